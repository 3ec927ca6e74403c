/* dp/podres.c - see podres.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dp/grpc.h"
#include "dp/podres.h"
#include "podresources.pb-c.h"

void dp_podres_clear(struct dp_podres *p)
{
    for (int i = 0; i < p->n; i++) {
        free(p->e[i].key);
        for (int k = 0; k < p->e[i].n_ids; k++)
            free(p->e[i].ids[k]);
        free(p->e[i].ids);
    }
    free(p->e);
    p->n = 0;
    p->e = NULL;
}

/* A new entry for container c of pod pr, without IDs yet. */
static struct dp_podres_entry *add(struct dp_podres *p, const V1__PodResources *pr,
                                   const V1__ContainerResources *c)
{
    struct dp_podres_entry *n = realloc(p->e, (size_t)(p->n + 1) * sizeof *n);
    if (!n)
        return NULL;
    p->e = n;
    struct dp_podres_entry *x = &p->e[p->n];
    memset(x, 0, sizeof *x);
    size_t len = strlen(pr->namespace_) + strlen(pr->name) + strlen(c->name) + 3;
    if (!(x->key = malloc(len)))
        return NULL;
    snprintf(x->key, len, "%s/%s/%s", pr->namespace_, pr->name, c->name);
    p->n++;
    return x;
}

static int contains(char *const *set, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(set[i], id) == 0)
            return 1;
    return 0;
}

/* Adds d's IDs that x does not hold yet. */
static int add_ids(struct dp_podres_entry *x, const V1__ContainerDevices *d)
{
    char **ids = realloc(x->ids, ((size_t)x->n_ids + d->n_device_ids) * sizeof *ids);
    if (!ids)
        return -1;
    x->ids = ids;
    for (size_t i = 0; i < d->n_device_ids; i++) {
        if (contains(x->ids, x->n_ids, d->device_ids[i]))
            continue;
        if (!(x->ids[x->n_ids] = strdup(d->device_ids[i])))
            return -1;
        x->n_ids++;
    }
    return 0;
}

int dp_podres_parse(const uint8_t *buf, size_t len, const char *resource, struct dp_podres *out,
                    struct gs_err *e)
{
    memset(out, 0, sizeof *out);
    V1__ListPodResourcesResponse *r = v1__list_pod_resources_response__unpack(NULL, len, buf);
    if (!r)
        return gs_errf(e, GS_EPROTO, "pod-resources: reply is not a ListPodResourcesResponse");
    for (size_t i = 0; i < r->n_pod_resources; i++) {
        const V1__PodResources *pr = r->pod_resources[i];
        for (size_t j = 0; j < pr->n_containers; j++) {
            const V1__ContainerResources *c = pr->containers[j];
            /* kubelet splits a container's devices over several entries:
             * one per NUMA node (1.20), one per device and NUMA node of it
             * (1.21+); they are one set */
            struct dp_podres_entry *x = NULL;
            for (size_t k = 0; k < c->n_devices; k++) {
                const V1__ContainerDevices *d = c->devices[k];
                if (strcmp(d->resource_name, resource) != 0 || d->n_device_ids == 0)
                    continue;
                if ((!x && !(x = add(out, pr, c))) || add_ids(x, d) != 0) {
                    v1__list_pod_resources_response__free_unpacked(r, NULL);
                    dp_podres_clear(out);
                    return gs_errf(e, GS_ENOMEM, "out of memory");
                }
            }
        }
    }
    v1__list_pod_resources_response__free_unpacked(r, NULL);
    return 0;
}

int dp_podres_list(const char *sock, const char *resource, int timeout_ms, struct dp_podres *out,
                   struct gs_err *e)
{
    struct stat st;
    uint8_t *resp = NULL;
    size_t len = 0;

    memset(out, 0, sizeof *out);
    if (stat(sock, &st) != 0 || !S_ISSOCK(st.st_mode))
        return gs_errf(e, GS_EUNAVAIL, "pod-resources socket %s is absent", sock);
    /* ListPodResourcesRequest has no fields: its encoding is empty. */
    int rc = dp_grpc_call(sock, "/v1.PodResourcesLister/List", NULL, 0, timeout_ms, &resp, &len, e);
    if (rc)
        return rc;
    rc = dp_podres_parse(resp, len, resource, out, e);
    free(resp);
    return rc;
}

const struct dp_podres_entry *dp_podres_find_ids(const struct dp_podres *p, char *const *ids,
                                                 int n)
{
    for (int i = 0; i < p->n; i++) {
        const struct dp_podres_entry *x = &p->e[i];
        int ok = x->n_ids == n;
        for (int k = 0; ok && k < n; k++)
            ok = contains(x->ids, x->n_ids, ids[k]);
        if (ok)
            return x;
    }
    return NULL;
}
