/*
 * ext/forward.h - a replica that does not lead hands /bind to the one that does.
 *
 * kube-scheduler calls one URL; behind a Service every ready replica gets a
 * share of the requests, but only the Lease holder may bind. Without this a
 * non-leader answers /bind with 503 and the pod waits out kube-scheduler's
 * backoff: about half the pods of a two-replica deployment. When the Lease's
 * holderIdentity names an address, "NAME@HOST:PORT" (deploy/ sets
 * $(POD_NAME)@$(POD_IP):8888), a non-leader posts the /bind body to
 * http://HOST:PORT/bind and relays the leader's status and answer. An identity
 * without '@' is not forwarded to (the 503 stays). A forwarded request carries
 * EXT_FORWARD_HEADER and is never forwarded again, so a leadership change
 * under way cannot make two replicas bounce a request between them.
 *
 * Ownership: ext_forward_new() returns an object freed by ext_forward_free();
 * the leader callback's data and the metrics registry must outlive it.
 * Thread-safe: one curl handle per call.
 */
#ifndef GPUSCHED_EXT_FORWARD_H
#define GPUSCHED_EXT_FORWARD_H

#include <stddef.h>

#include "util/err.h"
#include "util/metrics.h"

#define EXT_FORWARD_HEADER "X-Gpusched-Forwarded-By"

struct ext_forward;

/* leader(ud, out, cap): 1 with the Lease holder's identity in out when another
 * replica leads, else 0 (ext_cluster_leader). self names this replica in the
 * forwarded requests' header. timeout_s bounds one forwarded call. */
int ext_forward_new(int (*leader)(void *ud, char *out, size_t cap), void *ud, const char *self,
                    double timeout_s, struct metrics *m, struct ext_forward **out,
                    struct gs_err *e);
void ext_forward_free(struct ext_forward *f);

/* "NAME@HOST:PORT" -> "HOST:PORT" (HOST a name, IPv4 or [IPv6]) in out.
 * 0 = forwarded to there; 1 = the identity names no address; -GS_EINVAL when
 * what follows '@' is not HOST:PORT (e->msg says which part). */
int ext_forward_addr(const char *identity, char *out, size_t cap, struct gs_err *e);

/* When another replica leads and its identity names an address, forwards the
 * /bind body there: 1 with *status and a malloc'd reply (*out, *out_len; the
 * leader's answer, or a JSON error when it could not be reached: 503).
 * 0 = answer here (this replica leads, no leader known, no address). */
int ext_forward_bind(struct ext_forward *f, const char *body, size_t len, int *status,
                     char **out, size_t *out_len);

#endif
