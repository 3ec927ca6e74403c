/*
 * dp/kube.h - the device plugin's use of the API server.
 *
 * Two things: list the pods on this node (Allocate finds the pod being
 * admitted from their gpusched.io assignment annotations), and publish the
 * node's GPU inventory annotation and labels. Both go through the shared
 * Kubernetes client (src/kube/); this module only says what to ask.
 *
 * Ownership: dp_kube_open() returns an object freed by dp_kube_close();
 * the struct dp_api filled by dp_kube_api() borrows it.
 */
#ifndef GPUSCHED_DP_KUBE_H
#define GPUSCHED_DP_KUBE_H

#include "dp/plugin.h"

struct dp_kube;

/* kubeconfig NULL: in-cluster configuration. -GS_ENOENT when there is
 * neither (no API server: the caller runs without one). */
int dp_kube_open(const char *kubeconfig, const char *node, const char *annot_prefix,
                 struct dp_kube **out, struct gs_err *e);
void dp_kube_api(struct dp_kube *k, struct dp_api *api);
void dp_kube_close(struct dp_kube *k);

#endif
