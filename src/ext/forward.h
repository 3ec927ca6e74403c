/*
 * ext/forward.h - a replica that does not lead hands the scheduling verbs to
 * the one that does.
 *
 * kube-scheduler calls one URL; behind a Service every ready replica gets a
 * share of the requests, but only the Lease holder may bind. Without this a
 * non-leader answers /bind with 503 and the pod waits out kube-scheduler's
 * backoff: about half the pods of a two-replica deployment. And a follower's
 * /filter and /prioritize answer from a view that trails the leader's by the
 * watch's delay: a node the leader has just filled still looks free there,
 * and kube-scheduler's bind to it fails (409). When the Lease's
 * holderIdentity names an address, "NAME@HOST:PORT" (deploy/ sets
 * $(POD_NAME)@$(POD_IP):8888), a non-leader posts the body of /filter,
 * /prioritize, /bind and /preempt to http://HOST:PORT/VERB (https with
 * ext_forward_tls) and relays the
 * leader's status and answer. A leader that does not answer gets /bind
 * answered 503 and the other verbs answered here, from this replica's own
 * view, for a few seconds before it is asked again. An identity without '@'
 * is not forwarded to (/bind's 503 stays). A forwarded request carries
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

/* Replicas serving HTTPS (tls_cert) forward over HTTPS to a leader that
 * presents a certificate with the public key of cert_file, the one this
 * replica serves (deploy/ mounts one Secret in every replica): the leader's
 * pod IP need not be in the certificate. Called again after the server
 * reloaded a rotated certificate: the previous key stays accepted beside
 * the new one, for a leader that has not reloaded yet. 0 or -GS_E* naming
 * the file (the pins in force are kept). */
int ext_forward_tls(struct ext_forward *f, const char *cert_file, struct gs_err *e);
/* With tls_ca: trust a leader whose certificate the CA in ca_file signed
 * (its name unchecked), instead of the pinned keys, so a key rotated on the
 * leader before this replica's copy of the Secret turns is still trusted.
 * 0 or -GS_E* naming the file. */
int ext_forward_ca(struct ext_forward *f, const char *ca_file, struct gs_err *e);

/* "NAME@HOST:PORT" -> "HOST:PORT" (HOST a name, IPv4 or [IPv6]) in out.
 * 0 = forwarded to there; 1 = the identity names no address; -GS_EINVAL when
 * what follows '@' is not HOST:PORT (e->msg says which part). */
int ext_forward_addr(const char *identity, char *out, size_t cap, struct gs_err *e);

/* 1 when another replica leads and its identity names an address (ext_forward
 * would post there, or answer /bind 503 for an address it cannot use). */
int ext_forward_elsewhere(struct ext_forward *f);

/* When another replica leads and its identity names an address, forwards the
 * body of verb ("filter", "prioritize", "bind", "preempt") there: 1 with
 * *status and a malloc'd reply (*out, *out_len): the leader's answer, or for
 * /bind a JSON error (503) when the leader could not be reached or its
 * identity names no usable address. 0 = answer here: this replica leads, no
 * leader or address is known, or a verb other than /bind whose leader did
 * not answer (now or in the last few seconds). */
int ext_forward(struct ext_forward *f, const char *verb, const char *body, size_t len,
                int *status, char **out, size_t *out_len);

#endif
