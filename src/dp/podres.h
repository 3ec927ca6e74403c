/*
 * dp/podres.h - kubelet's pod-resources API: which container holds which
 * device IDs.
 *
 * Allocate does not say which pod it is for. Kubelet's PodResourcesLister
 * (a gRPC service on /var/lib/kubelet/pod-resources/kubelet.sock) does, once
 * admission is under way: Allocate uses it to skip containers that already
 * hold devices, and PreStartContainer to check that the devices went to the
 * pod Allocate assumed.
 *
 * Ownership: dp_podres_list() fills a struct freed by dp_podres_clear().
 */
#ifndef GPUSCHED_DP_PODRES_H
#define GPUSCHED_DP_PODRES_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct dp_podres_entry {
    char *key;      /* "namespace/pod/container" */
    int n_ids;
    char **ids;     /* device IDs of the requested resource, each once (kubelet may
                       split them over several entries) */
};

struct dp_podres {
    int n;
    struct dp_podres_entry *e;
};

/* Lists the containers holding devices of `resource`. -GS_EUNAVAIL when the
 * socket is absent or kubelet does not answer within timeout_ms. */
int dp_podres_list(const char *sock, const char *resource, int timeout_ms, struct dp_podres *out,
                   struct gs_err *e);

/* The same from a packed v1.ListPodResourcesResponse (unit tests, fuzzer). */
int dp_podres_parse(const uint8_t *buf, size_t len, const char *resource, struct dp_podres *out,
                    struct gs_err *e);

/* The container holding exactly this set of IDs (any order), or NULL. */
const struct dp_podres_entry *dp_podres_find_ids(const struct dp_podres *p, char *const *ids,
                                                 int n);

void dp_podres_clear(struct dp_podres *p);

#endif
