/* dp/kube.c - see kube.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp/inventory.h"
#include "dp/kube.h"
#include "kube/client.h"

struct dp_kube {
    struct kube_client *c;
    char node[254];
    char annot_key[160];
    char alloc_key[160];
    char usage_key[160];
    char pods_path[1300];
};

int dp_kube_open(const char *kubeconfig, const char *node, const char *annot_prefix,
                 struct dp_kube **out, struct gs_err *e)
{
    struct kube_config cfg;
    struct kube_client_opts o = {10000, 64 << 20, "gpusched-device-plugin"};
    char sel[600], esc[1200];
    int rc;

    *out = NULL;
    if (kubeconfig)
        rc = kube_config_load_file(kubeconfig, NULL, &cfg, e);
    else if (!getenv("KUBERNETES_SERVICE_HOST"))
        return gs_errf(e, GS_ENOENT, "no --kubeconfig and not in a cluster");
    else
        rc = kube_config_in_cluster(NULL, &cfg, e);
    if (rc)
        return rc;
    struct dp_kube *k = calloc(1, sizeof *k);
    if (!k) {
        kube_config_clear(&cfg);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    rc = kube_client_new(&cfg, &o, &k->c, e);
    kube_config_clear(&cfg);
    snprintf(k->node, sizeof k->node, "%s", node);
    snprintf(k->annot_key, sizeof k->annot_key, "%sgpu-inventory", annot_prefix);
    snprintf(k->alloc_key, sizeof k->alloc_key, "%sallocated-at", annot_prefix);
    snprintf(k->usage_key, sizeof k->usage_key, "%sgpu-usage", annot_prefix);
    snprintf(sel, sizeof sel, "spec.nodeName=%s", node);
    if (rc == 0 && (rc = kube_escape(sel, esc, sizeof esc, e)) == 0)
        snprintf(k->pods_path, sizeof k->pods_path, "/api/v1/pods?fieldSelector=%s", esc);
    if (rc) {
        dp_kube_close(k);
        return rc;
    }
    *out = k;
    return 0;
}

/* Pods bound to this node: Allocate runs after the Binding. */
static int list_pods(void *ud, json_t **out, struct gs_err *e)
{
    struct dp_kube *k = ud;
    return kube_get(k->c, k->pods_path, out, e);
}

static int list_pods_cached(void *ud, json_t **out, struct gs_err *e)
{
    struct dp_kube *k = ud;
    char path[sizeof k->pods_path + 32];
    snprintf(path, sizeof path, "%s&resourceVersion=0", k->pods_path);
    return kube_get(k->c, path, out, e);
}

static int publish(void *ud, const struct dp_inventory *inv, struct gs_err *e)
{
    struct dp_kube *k = ud;
    char path[300], now[32];
    json_t *node = NULL;
    time_t t = time(NULL);
    struct tm tm;

    snprintf(path, sizeof path, "/api/v1/nodes/%s", k->node);
    int rc = kube_get(k->c, path, &node, e);
    if (rc) {
        json_decref(node); /* the API server's Status, if it sent one */
        return rc;
    }
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels");
    json_t *patch = dp_inventory_node_patch(inv, k->annot_key, labels, now);
    json_decref(node);
    rc = kube_patch(k->c, path, KUBE_PATCH_MERGE, patch, NULL, e);
    json_decref(patch);
    return rc;
}

/* A merge patch with metadata.uid: the API server refuses it for another
 * pod of the same name (a precondition), so a re-created pod is not marked. */
static int mark_allocated(void *ud, const char *ns, const char *name, const char *uid,
                          struct gs_err *e)
{
    struct dp_kube *k = ud;
    char path[700], now[32];
    kube_now_micro(now, sizeof now);
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, name);
    json_t *patch = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "uid", uid, "annotations",
                              k->alloc_key, now);
    if (!patch)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    int rc = kube_patch(k->c, path, KUBE_PATCH_MERGE, patch, NULL, e);
    json_decref(patch);
    return rc;
}

static int publish_usage(void *ud, const char *usage_json, struct gs_err *e)
{
    struct dp_kube *k = ud;
    char path[300];
    snprintf(path, sizeof path, "/api/v1/nodes/%s", k->node);
    json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", k->usage_key,
                              usage_json);
    if (!patch)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    int rc = kube_patch(k->c, path, KUBE_PATCH_MERGE, patch, NULL, e);
    json_decref(patch);
    return rc;
}

void dp_kube_api(struct dp_kube *k, struct dp_api *api)
{
    api->ud = k;
    api->list_pods = list_pods;
    api->list_pods_cached = list_pods_cached;
    api->publish = publish;
    api->mark_allocated = mark_allocated;
    api->publish_usage = publish_usage;
}

void dp_kube_close(struct dp_kube *k)
{
    if (!k)
        return;
    kube_client_free(k->c);
    free(k);
}
