/*
 * kube/lease.h - leader election on a coordination.k8s.io/v1 Lease.
 *
 * Several replicas of a service may run; exactly one should act (bind pods,
 * write node annotations). Each replica runs a kube_leader: it tries every
 * retry_s to take the Lease named opts->name, and the holder renews it. A
 * holder that cannot renew within lease_s stops leading on its own before
 * anyone else can take over. Expiry is judged on the local clock from when
 * this replica last saw the lease change (as client-go does), so clock skew
 * between replicas does not matter. Updates carry the resourceVersion, so
 * two candidates racing for an expired lease cannot both win (409).
 *
 * kube_leader_stop() releases a held lease (holderIdentity cleared) so a
 * successor takes over at once.
 *
 * Ownership: the client must outlive the leader; on_change runs on the
 * election thread.
 */
#ifndef GPUSCHED_KUBE_LEASE_H
#define GPUSCHED_KUBE_LEASE_H

#include "kube/client.h"

struct kube_leader_opts {
    const char *ns;        /* NULL = the client's namespace */
    const char *name;      /* Lease name, e.g. "gpusched-extender" */
    const char *identity;  /* this replica, e.g. the pod name */
    double lease_s;        /* leaseDurationSeconds; 0 = 15 */
    double renew_s;        /* renew period; 0 = lease_s / 3 */
    double retry_s;        /* candidate retry period, and a failed renew's; 0 = 2 */
    void (*on_change)(void *ud, int leading);
    void *ud;
};

struct kube_leader;

int kube_leader_start(struct kube_client *c, const struct kube_leader_opts *opts,
                      struct kube_leader **out, struct gs_err *e);
/* Whether this replica leads: it holds the lease and renewed it within 2/3
 * of lease_s, so no other replica can have taken it over (a renew stuck in
 * a slow request ends the leadership then, not when the request fails).
 * Thread-safe. */
int kube_leader_is_leader(struct kube_leader *l);
/* Leader transitions observed by this replica (became or stopped leading). */
unsigned long kube_leader_transitions(struct kube_leader *l);
void kube_leader_stop(struct kube_leader *l);
/* The holderIdentity this replica last read from the Lease (its own when it
 * leads; "" before the first read, when nobody holds it, or when it is this
 * replica's own and no longer renewed lately) into out. May name a replica
 * whose lease has expired. Thread-safe. */
void kube_leader_holder(struct kube_leader *l, char *out, size_t cap);

/* One election step, exposed for tests: reads the lease and takes, renews
 * or leaves it. Returns 1 when this replica holds the lease afterwards, 0
 * when another does, negative on an API error. */
int kube_leader_try(struct kube_leader *l, struct gs_err *e);

#endif
