/* wh/wh_admit.c - see wh_admit.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/policy.h"
#include "ext/annot.h"
#include "ext/nodes.h"
#include "kube/client.h"
#include "wh/wh_admit.h"

static int is_gpu_resource(const struct core_names *n, const char *key)
{
    return strcmp(key, n->gpu) == 0 || strcmp(key, n->gpu_memory) == 0 ||
           strcmp(key, n->gpu_cores) == 0 || strcmp(key, n->vcuda_core) == 0 ||
           strcmp(key, n->vcuda_memory) == 0 ||
           strncmp(key, n->mig_prefix, strlen(n->mig_prefix)) == 0;
}

static const char *const ctr_lists[] = {"initContainers", "containers"};
static const char *const res_maps[] = {"limits", "requests"};

/* Does any container name a GPU resource (in limits or requests)? */
static int asks_gpu(const struct wh_config *c, const json_t *spec)
{
    for (int l = 0; l < 2; l++) {
        json_t *arr = json_object_get(spec, ctr_lists[l]), *ctr, *v;
        size_t i;
        const char *key;
        json_array_foreach(arr, i, ctr) {
            json_t *res = json_object_get(ctr, "resources");
            for (int m = 0; m < 2; m++) {
                json_object_foreach(json_object_get(res, res_maps[m]), key, v) {
                    if (is_gpu_resource(&c->names, key))
                        return 1;
                }
            }
        }
    }
    return 0;
}

/* The label that marks a pod asking for a GPU (mutation sets it): the
 * manifest's UPDATE rule selects on it, so that no update of any other pod
 * waits for this webhook, nor fails while it is down. */
static void gpu_pod_label(const struct wh_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%sgpu-pod", c->names.annot_prefix);
}

/* The annotation /mutate writes on every GPU pod: its request, canonical. */
static void request_annotation(const struct wh_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%srequest", c->names.annot_prefix);
}

/* Does the pod ask for a GPU (`nvidia.com/gpu: 0` does not)? One the parser
 * refuses counts as asking when it names a GPU resource. */
static int is_gpu_pod(const struct wh_config *c, const json_t *pod)
{
    struct core_pod p;
    struct gs_err e = GS_ERR_INIT;
    if (!asks_gpu(c, json_object_get(pod, "spec")))
        return 0;
    if (core_pod_parse(pod, &c->names, &p, &e) < 0)
        return 1;
    int gpu = p.req.kind != CORE_REQ_NONE;
    core_pod_clear(&p);
    return gpu;
}

static int is_assigner(const char *list, const char *user)
{
    size_t ul = strlen(user);
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len == ul && ul > 0 && memcmp(p, user, len) == 0)
            return 1;
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

/* Without assigners configured, anyone may. */
static int may_assign(const struct wh_config *c, const char *user)
{
    return !c->assigners || !c->assigners[0] || is_assigner(c->assigners, user ? user : "");
}

int wh_check_assignment(const struct wh_config *c, const json_t *old, const json_t *pod,
                        const char *user, struct gs_err *e)
{
    if (may_assign(c, user))
        return 0;
    const char *prefix = c->names.annot_prefix;
    const json_t *now = json_object_get(json_object_get(pod, "metadata"), "annotations");
    const json_t *was = json_object_get(json_object_get(old, "metadata"), "annotations");
    const char *key, *how = NULL;
    const json_t *v;
    json_object_foreach((json_t *)now, key, v) {
        if (!ext_annot_is_assignment(key, prefix))
            continue;
        const char *before = kube_annotation(old, key);
        if (!before || !json_is_string(v) || strcmp(before, json_string_value(v)) != 0) {
            how = before ? "change" : "set";
            break;
        }
    }
    if (!how)
        json_object_foreach((json_t *)was, key, v) {
            if (ext_annot_is_assignment(key, prefix) && !json_object_get(now, key)) {
                how = "remove";
                break;
            }
        }
    if (how)
        return gs_errf(e, GS_EPERM, "annotation %s: the GPU assignment is written by the "
                       "extender at bind; user '%.253s' may not %s it (webhook --assigners)", key,
                       user[0] ? user : "(unknown)", how);
    char label[160];
    gpu_pod_label(c, label, sizeof label);
    if (old && kube_label(old, label) && !kube_label(pod, label) && is_gpu_pod(c, pod))
        return gs_errf(e, GS_EPERM, "metadata.labels[%s]: marks a GPU pod, whose updates this "
                       "webhook checks; user '%.253s' may not remove it (webhook --assigners)",
                       label, user[0] ? user : "(unknown)");
    return 0;
}

int wh_parse_defaults(const char *spec, struct wh_config *c, struct gs_err *e)
{
    const char *p = spec;

    c->n_defaults = 0;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        struct wh_policy_default *d = &c->defaults[c->n_defaults];
        size_t nl, pl;

        if (!eq || eq == p || eq == p + len - 1)
            return gs_errf(e, GS_EINVAL, "--default-policy: '%.*s' is not NAMESPACE=POLICY",
                           (int)len, p);
        nl = (size_t)(eq - p);
        pl = len - nl - 1;
        if (c->n_defaults == WH_MAX_DEFAULTS || nl >= sizeof d->ns || pl >= sizeof d->policy)
            return gs_errf(e, GS_EINVAL, "--default-policy: too many entries or names too long");
        memcpy(d->ns, p, nl);
        d->ns[nl] = '\0';
        memcpy(d->policy, eq + 1, pl);
        d->policy[pl] = '\0';
        for (const char *q = d->policy; *q; q++)
            if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-'))
                return gs_errf(e, GS_EINVAL, "--default-policy: '%s' is not a policy name",
                               d->policy);
        if (!core_policy_need(d->policy, "--default-policy", e))
            return -GS_EINVAL;
        c->n_defaults++;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* ---- what the cluster has -------------------------------------------------- */

static void consider(struct wh_cluster *out, const char *model, int64_t mem_mib, int count)
{
    if (mem_mib > out->max_gpu_mem_mib) {
        out->max_gpu_mem_mib = mem_mib;
        snprintf(out->max_gpu_model, sizeof out->max_gpu_model, "%s", model ? model : "");
    }
    if (count > out->max_gpus_per_node)
        out->max_gpus_per_node = count;
}

/* Adds a model (or lowers its memory) to the cluster's list. */
static void add_model(struct wh_cluster *out, const char *model, int64_t mem_mib)
{
    for (int i = 0; i < out->n_models; i++)
        if (strcmp(out->models[i].model, model) == 0) {
            if (mem_mib < out->models[i].mem_mib)
                out->models[i].mem_mib = mem_mib;
            return;
        }
    if (out->n_models == WH_MAX_MODELS) {
        out->models_overflow = 1;
        return;
    }
    struct wh_model *m = &out->models[out->n_models++];
    snprintf(m->model, sizeof m->model, "%s", model);
    m->mem_mib = mem_mib;
}

void wh_cluster_merge(struct wh_cluster *into, const struct wh_cluster *c)
{
    consider(into, c->max_gpu_model, c->max_gpu_mem_mib, c->max_gpus_per_node);
    if (c->kubelet_minor > 0 && (into->kubelet_minor == 0 || c->kubelet_minor < into->kubelet_minor))
        into->kubelet_minor = c->kubelet_minor;
    for (int i = 0; i < c->n_models; i++)
        add_model(into, c->models[i].model, c->models[i].mem_mib);
    into->models_overflow |= c->models_overflow;
}

int wh_cluster_same(const struct wh_cluster *a, const struct wh_cluster *b)
{
    if (a->max_gpu_mem_mib != b->max_gpu_mem_mib || a->max_gpus_per_node != b->max_gpus_per_node ||
        a->kubelet_minor != b->kubelet_minor || strcmp(a->max_gpu_model, b->max_gpu_model) != 0 ||
        a->n_models != b->n_models || a->models_overflow != b->models_overflow)
        return 0;
    for (int i = 0; i < a->n_models; i++)
        if (a->models[i].mem_mib != b->models[i].mem_mib ||
            strcmp(a->models[i].model, b->models[i].model) != 0)
            return 0;
    return 1;
}

/* "v1.20.2", "v1.27.3-eks-a5565ad" -> 20; 0 for anything else. */
static int kubelet_minor(const json_t *node)
{
    const char *v = json_string_value(json_object_get(
        json_object_get(json_object_get(node, "status"), "nodeInfo"), "kubeletVersion"));
    int minor = 0;
    if (!v || strncmp(v, "v1.", 3) != 0)
        return 0;
    for (v += 3; *v >= '0' && *v <= '9' && minor < 1000; v++)
        minor = minor * 10 + (*v - '0');
    return minor;
}

int wh_node_gpus(const json_t *node, const struct core_names *names, struct wh_cluster *out,
                 struct gs_err *e)
{
    /* the extender's own reading of a node, so both agree on its GPUs */
    struct core_node_spec spec;
    struct ext_node_buf buf = {0};
    double updated;
    int rc = ext_node_spec(node, names, &spec, &buf, &updated, e);

    memset(out, 0, sizeof *out);
    /* only a node a GPU pod can run on says which kubelet starts one: not a
     * CPU-only node (a Windows or a virtual kubelet's); one whose GPUs
     * cannot be read may have some */
    if (rc < 0 || spec.n_gpus > 0)
        out->kubelet_minor = kubelet_minor(node);
    if (rc == 0) {
        for (int g = 0; g < spec.n_gpus; g++) {
            consider(out, spec.gpus[g].model, spec.gpus[g].mem_mib, 0);
            add_model(out, spec.gpus[g].model, spec.gpus[g].mem_mib);
        }
        consider(out, NULL, 0, spec.n_gpus);
    }
    ext_node_buf_clear(&buf);
    return rc;
}

int wh_cluster_from_nodes(const json_t *nodelist, const struct core_names *names,
                          struct wh_cluster *out, struct gs_err *e)
{
    json_t *items = json_object_get(nodelist, "items"), *node;
    size_t i;

    memset(out, 0, sizeof *out);
    if (!json_is_array(items))
        return gs_errf(e, GS_EINVAL, "items: expected a NodeList");
    json_array_foreach(items, i, node) {
        struct wh_cluster one;
        int rc = wh_node_gpus(node, names, &one, e);
        if (rc < 0) {
            gs_err_prefix(e, "items[%zu]", i);
            return rc;
        }
        wh_cluster_merge(out, &one);
    }
    return 0;
}

/* ---- validation ------------------------------------------------------------ */

/* A GPU share asked by an init container fails on a kubelet before 1.31
 * (OutOfnvidia.com/gpu-memory at admission: it drops the resources no node
 * advertises for app containers only); the cluster may have one unless every
 * node's kubelet is known to be newer. */
static int init_share_fails(const struct wh_config *c, const char *list,
                            const struct core_request *r)
{
    return r->kind == CORE_REQ_SHARED && strcmp(list, "initContainers") == 0 &&
           (c->cluster.kubelet_minor == 0 || c->cluster.kubelet_minor < WH_KUBELET_INIT_EXTENDED);
}

/* Does mutation rewrite this container's tkestack keys in the native form?
 * Not where the parser or validation refuses the container (naming what the
 * user wrote), nor where it asks for no GPU. */
static int rewritten(const struct wh_config *c, const json_t *ctr, const char *list, size_t idx,
                     struct core_request *r)
{
    struct gs_err e = GS_ERR_INIT;
    return core_container_parse(ctr, &c->names, list, idx, r, &e) == 0 &&
           (r->kind == CORE_REQ_WHOLE || r->kind == CORE_REQ_SHARED) &&
           !init_share_fails(c, list, r);
}

/* One resources map (limits or requests) of a container that mutation
 * rewrites, holding a tkestack key. */
struct vcuda_map {
    const json_t *ctr, *map;
    const char *list, *map_name, *key; /* key: the first tkestack key found */
    size_t idx;
    struct core_request r;             /* the container's request */
};

/* Calls fn for every such map of the pod, in spec order, until fn returns
 * nonzero, which it returns. */
static int foreach_vcuda_map(const struct wh_config *c, const json_t *pod,
                             int (*fn)(const struct wh_config *c, const struct vcuda_map *v,
                                       void *ud),
                             void *ud)
{
    const json_t *spec = json_object_get(pod, "spec");
    for (int l = 0; l < 2; l++) {
        const json_t *arr = json_object_get(spec, ctr_lists[l]), *ctr;
        size_t i;
        json_array_foreach(arr, i, ctr) {
            struct vcuda_map v = {.ctr = ctr, .list = ctr_lists[l], .idx = i};
            if (!rewritten(c, ctr, ctr_lists[l], i, &v.r))
                continue;
            for (int m = 0; m < 2; m++) {
                v.map_name = res_maps[m];
                v.map = json_object_get(json_object_get(ctr, "resources"), res_maps[m]);
                v.key = json_object_get(v.map, c->names.vcuda_core)     ? c->names.vcuda_core
                        : json_object_get(v.map, c->names.vcuda_memory) ? c->names.vcuda_memory
                                                                        : NULL;
                int rc = v.key ? fn(c, &v, ud) : 0;
                if (rc)
                    return rc;
            }
        }
    }
    return 0;
}

static int refuse_init_share(const struct wh_config *c, const json_t *lim, const json_t *req,
                             const char *list, size_t idx, const char *name, struct gs_err *e)
{
    const struct core_names *n = &c->names;
    const char *const keys[] = {n->gpu_memory, n->gpu_cores, n->vcuda_memory, n->vcuda_core};
    const char *key = n->gpu_memory, *map = "limits";
    char oldest[48];
    for (int k = 3; k >= 0; k--) {
        if (json_object_get(req, keys[k]))
            key = keys[k], map = "requests";
        if (json_object_get(lim, keys[k]))
            key = keys[k], map = "limits";
    }
    if (c->cluster.kubelet_minor > 0)
        snprintf(oldest, sizeof oldest, "the oldest GPU node runs kubelet 1.%d", c->cluster.kubelet_minor);
    else
        snprintf(oldest, sizeof oldest, "no GPU node's kubelet version is known");
    return gs_errf(e, GS_EINVAL, "%s[%zu].%s[%s]: a GPU share in an init container fails on "
                                 "kubelets before 1.31, which admit unadvertised resources in "
                                 "app containers only (kubernetes#124255; %s); ask for whole "
                                 "GPUs (%s) in init containers and the share in an app "
                                 "container (container '%s')",
                   list, idx, map, key, oldest, n->gpu, name ? name : "");
}

/* Per-container checks that need the cluster or the raw resources map. */
static int check_container(const struct wh_config *c, json_t *ctr, const char *list, size_t idx,
                           struct gs_err *e)
{
    struct core_request r;
    json_t *res = json_object_get(ctr, "resources");
    json_t *lim = json_object_get(res, "limits"), *req = json_object_get(res, "requests"), *v;
    const char *key, *name = json_string_value(json_object_get(ctr, "name"));

    if (core_container_parse(ctr, &c->names, list, idx, &r, e) < 0)
        return -GS_EINVAL;
    json_object_foreach(req, key, v) {
        if (is_gpu_resource(&c->names, key) && !json_object_get(lim, key))
            return gs_errf(e, GS_EINVAL, "%s[%zu].requests[%s]: set without limits; GPU "
                                         "resources cannot be overcommitted, so set limits "
                                         "(equal to requests) (container '%s')",
                           list, idx, key, name ? name : "");
    }
    if (init_share_fails(c, list, &r))
        return refuse_init_share(c, lim, req, list, idx, name, e);
    if (r.kind == CORE_REQ_SHARED && c->cluster.max_gpu_mem_mib > 0 &&
        r.mem_mib > c->cluster.max_gpu_mem_mib) {
        const char *res_name = json_object_get(lim, c->names.vcuda_memory) ||
                                       json_object_get(req, c->names.vcuda_memory)
                                   ? c->names.vcuda_memory
                                   : c->names.gpu_memory;
        char want[32], have[32];
        core_quota_fmt_mib(r.mem_mib, want, sizeof want);
        core_quota_fmt_mib(c->cluster.max_gpu_mem_mib, have, sizeof have);
        return gs_errf(e, GS_EINVAL, "%s[%zu].limits[%s]: asks for %s per GPU, but the largest "
                                     "GPU in the cluster (%s) has %s (container '%s')",
                       list, idx, res_name, want,
                       c->cluster.max_gpu_model[0] ? c->cluster.max_gpu_model : "unnamed", have,
                       name ? name : "");
    }
    return 0;
}

static const char not_mutated[] = "the mutating webhook (/mutate) did not run on this pod (it "
                                  "was unreachable or timed out, and its failurePolicy is "
                                  "Ignore); create the pod again";

static int refuse_vcuda(const struct wh_config *c, const struct vcuda_map *v, void *ud)
{
    const char *name = json_string_value(json_object_get(v->ctr, "name"));
    return gs_errf(ud, GS_EINVAL, "%s[%zu].%s[%s]: not rewritten as %s, so kubelet would start "
                   "the container without a GPU: %s (container '%s')", v->list, v->idx,
                   v->map_name, v->key, c->names.gpu, not_mutated, name ? name : "");
}

/* A GPU pod that got past /mutate, whose failurePolicy is Ignore, while it
 * was down or slow, is refused where what mutation does matters:
 * - with --assigners, a GPU pod without the GPU pod label: no update of it
 *   would be checked. Always, even when the pod carries the request
 *   annotation, which its author may have written to look mutated;
 * - without the `gpusched.io/request` annotation, which /mutate writes on
 *   every GPU pod (and every version of it did), a tkestack key left in a
 *   container that asks for a GPU (kubelet would start it without one). With
 *   the annotation this passes: replicas may differ in what they know of the
 *   kubelets, and so in which init containers they rewrite. */
static int check_mutated(const struct wh_config *c, const json_t *pod, struct gs_err *e)
{
    char label[160];
    gpu_pod_label(c, label, sizeof label);
    if (c->assigners && c->assigners[0] && !kube_label(pod, label))
        return gs_errf(e, GS_EINVAL, "metadata.labels[%s]: missing, so no update of this GPU "
                       "pod would be checked (webhook --assigners): %s", label, not_mutated);
    char key[160];
    request_annotation(c, key, sizeof key);
    if (kube_annotation(pod, key))
        return 0;
    return foreach_vcuda_map(c, pod, refuse_vcuda, e);
}

/* The least memory of a GPU the request may get: the smallest GPU of the
 * models it accepts; 0 when none is known, one of them has no known memory
 * (the extender counts it as 0), or the models were too many to keep. */
static int64_t least_gpu_mem(const struct wh_cluster *cl, const struct core_request *r)
{
    int64_t least = -1;
    if (cl->models_overflow)
        return 0;
    for (int i = 0; i < cl->n_models; i++)
        if (core_request_model_ok(r, cl->models[i].model) &&
            (least < 0 || cl->models[i].mem_mib < least))
            least = cl->models[i].mem_mib;
    return least > 0 ? least : 0;
}

/* A request alone over a quota of ns. Whole GPUs hold all their memory, which
 * the GPU they get decides: at admission they count the least memory of a
 * GPU they may get, which no placement lowers. */
static int admit_quota(const struct wh_config *c, const struct core_quotas *quotas,
                       const char *ns, const struct core_request *r, struct gs_err *e)
{
    int rc = core_quotas_admit(quotas, ns, r, 0, e);
    int64_t least = r->kind == CORE_REQ_WHOLE ? least_gpu_mem(&c->cluster, r) : 0;
    if (rc < 0 || !least)
        return rc;
    rc = core_quotas_admit(quotas, ns, r, least, e);
    if (rc < 0 && e) {
        char have[32];
        size_t n = strlen(e->msg);
        core_quota_fmt_mib(least, have, sizeof have);
        snprintf(e->msg + n, sizeof e->msg - n, " (whole GPUs count all their memory, and the "
                 "smallest GPU the pod accepts has %s)", have);
    }
    return rc;
}

int wh_validate_pod(const struct wh_config *c, const struct core_quotas *quotas,
                    const json_t *pod, const char *ns, struct gs_err *e)
{
    struct core_pod p;
    json_t *spec = json_object_get(pod, "spec");
    int rc;

    /* a pod that asks for no GPU is not this webhook's to refuse: the
     * parser's bounds (list sizes, fields newer Kubernetes adds) would
     * otherwise stop CPU-only pods under failurePolicy Fail */
    if (!asks_gpu(c, spec))
        return 0;
    if (core_pod_parse(pod, &c->names, &p, e) < 0)
        return -GS_EINVAL;
    for (int l = 0; l < 2; l++) {
        json_t *arr = json_object_get(spec, ctr_lists[l]), *ctr;
        size_t i;
        json_array_foreach(arr, i, ctr) {
            if (check_container(c, ctr, ctr_lists[l], i, e) < 0) {
                core_pod_clear(&p);
                return -GS_EINVAL;
            }
        }
    }
    rc = 0;
    if ((p.req.kind == CORE_REQ_WHOLE || p.req.kind == CORE_REQ_SHARED) &&
        c->cluster.max_gpus_per_node > 0 && p.req.num_gpu > c->cluster.max_gpus_per_node)
        rc = gs_errf(e, GS_EINVAL, "spec.containers: the pod asks for %d GPUs on one node, but "
                                   "the largest node has %d", p.req.num_gpu,
                     c->cluster.max_gpus_per_node);
    else if (quotas && p.req.kind != CORE_REQ_NONE)
        rc = admit_quota(c, quotas, ns && ns[0] ? ns : p.ns, &p.req, e);
    if (rc == 0 && p.req.kind != CORE_REQ_NONE) /* what a second try cannot fix comes first */
        rc = check_mutated(c, pod, e);
    core_pod_clear(&p);
    return rc;
}

/* ---- mutation ---------------------------------------------------------------- */

void wh_request_string(const struct core_request *r, char *buf, size_t cap)
{
    switch (r->kind) {
    case CORE_REQ_WHOLE:
        snprintf(buf, cap, "kind=whole,gpus=%d", r->num_gpu);
        break;
    case CORE_REQ_SHARED:
        snprintf(buf, cap, "kind=shared,gpus=%d,memory-mib=%lld,milli=%d", r->num_gpu,
                 (long long)r->mem_mib, r->milli);
        break;
    case CORE_REQ_MIG:
        snprintf(buf, cap, "kind=mig,profile=%s,count=%d", r->mig_profile, r->mig_count);
        break;
    case CORE_REQ_NONE:
        snprintf(buf, cap, "kind=none");
        break;
    }
}

/* JSON Pointer escaping of one path segment: '~' -> "~0", '/' -> "~1". */
static void pointer_escape(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 3 < cap; s++) {
        if (*s == '~' || *s == '/') {
            out[n++] = '~';
            out[n++] = *s == '~' ? '0' : '1';
        } else {
            out[n++] = *s;
        }
    }
    out[n] = '\0';
}

static int add_op(json_t *patch, const char *path, json_t *value)
{
    return json_array_append_new(patch, json_pack("{s:s, s:s, s:o}", "op", "add", "path", path,
                                                  "value", value));
}

/* A copy of a resources map (limits or requests) with the tkestack keys
 * replaced by the native request r; NULL when it has no tkestack key. */
static json_t *native_resources(const struct core_names *n, const json_t *res,
                                const struct core_request *r)
{
    if (!json_object_get(res, n->vcuda_core) && !json_object_get(res, n->vcuda_memory))
        return NULL;
    json_t *out = json_deep_copy(res);
    char q[32];
    json_object_del(out, n->vcuda_core);
    json_object_del(out, n->vcuda_memory);
    snprintf(q, sizeof q, "%d", r->num_gpu);
    json_object_set_new(out, n->gpu, json_string(q));
    if (r->kind == CORE_REQ_SHARED && r->mem_mib > 0) {
        snprintf(q, sizeof q, "%lldMi", (long long)r->mem_mib * r->num_gpu); /* the pod's total */
        json_object_set_new(out, n->gpu_memory, json_string(q));
    }
    if (r->kind == CORE_REQ_SHARED && r->milli > 0) {
        snprintf(q, sizeof q, "%d", (r->milli + 9) / 10);
        json_object_set_new(out, n->gpu_cores, json_string(q));
    }
    return out;
}

/* kubelet hands a container the GPUs of a device plugin's Allocate only for
 * a resource the plugin serves (nvidia.com/gpu); it ignores the resources no
 * node advertises, such as the tkestack vcuda-core / vcuda-memory. So a
 * container asking in the tkestack form is rewritten in the native one (the
 * same request: the extender reads both the same way), and then gets its
 * GPUs from the device plugin like any other. */
static int add_native(const struct wh_config *c, const struct vcuda_map *v, void *ops)
{
    char path[96];
    snprintf(path, sizeof path, "/spec/%s/%zu/resources/%s", v->list, v->idx, v->map_name);
    add_op(ops, path, native_resources(&c->names, v->map, &v->r)); /* "add" replaces it */
    return 0;
}

/* Removes the assignment annotations of a pod created without a node by a
 * user who may not write them (one op each) and says so in warn, meaning
 * first: API servers may cut a warning past 256 characters. The number
 * removed. */
static int strip_stale(const struct wh_config *c, const json_t *pod, const char *user,
                       json_t *ops, char *warn, size_t cap)
{
    const json_t *spec_node = json_object_get(json_object_get(pod, "spec"), "nodeName");
    const json_t *have = json_object_get(json_object_get(pod, "metadata"), "annotations");
    const char *key, *first = NULL;
    json_t *v;
    int n = 0;
    if (may_assign(c, user) || json_string_length(spec_node) > 0 || !json_is_object(have))
        return 0;
    json_object_foreach((json_t *)have, key, v) {
        if (!ext_annot_is_assignment(key, c->names.annot_prefix))
            continue;
        char esc[400], path[440];
        pointer_escape(key, esc, sizeof esc);
        snprintf(path, sizeof path, "/metadata/annotations/%s", esc);
        json_array_append_new(ops, json_pack("{s:s, s:s}", "op", "remove", "path", path));
        if (!n++)
            first = key;
    }
    if (n && warn && cap) {
        char others[48] = "";
        if (n > 1)
            snprintf(others, sizeof others, " and %d more", n - 1);
        snprintf(warn, cap, "GPU assignment removed (%s%s): the extender writes it at bind; "
                 "copied from another pod?", first, others);
    }
    return n;
}

/* Ops that add the members of `add` to metadata.<map>, creating the map
 * when the pod has none. */
static void add_to_metadata(json_t *ops, const json_t *meta, const char *map, json_t *add)
{
    const json_t *have = json_object_get(meta, map);
    char path[440];
    if (json_object_size(add) == 0)
        return;
    if (!json_is_object(have)) {
        snprintf(path, sizeof path, "/metadata/%s", map);
        add_op(ops, path, json_incref(add));
        return;
    }
    const char *k;
    json_t *v;
    json_object_foreach(add, k, v) {
        char esc[400];
        pointer_escape(k, esc, sizeof esc);
        snprintf(path, sizeof path, "/metadata/%s/%s", map, esc);
        add_op(ops, path, json_incref(v));
    }
}

int wh_mutate_pod(const struct wh_config *c, const json_t *pod, const char *ns, const char *user,
                  json_t **patch, char *warn, size_t warn_cap, struct gs_err *e)
{
    struct core_pod p;
    json_t *ops = json_array(), *annots = json_object(), *labels = json_object();
    json_t *meta = json_object_get(pod, "metadata");
    json_t *have = json_object_get(meta, "annotations");
    char key[160], val[160];

    *patch = NULL;
    if (!ops || !annots || !labels) {
        json_decref(ops);
        json_decref(annots);
        json_decref(labels);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    if (warn && warn_cap)
        warn[0] = '\0';
    if (core_pod_parse(pod, &c->names, &p, e) < 0) {
        json_decref(ops);
        json_decref(annots);
        json_decref(labels);
        return -GS_EINVAL; /* validation will deny it with this message */
    }
    strip_stale(c, pod, user, ops, warn, warn_cap);
    if (ns && ns[0])
        snprintf(p.ns, sizeof p.ns, "%s", ns);
    if (p.req.kind != CORE_REQ_NONE) {
        const char *sn = json_string_value(json_object_get(json_object_get(pod, "spec"),
                                                           "schedulerName"));
        if (c->scheduler_name && c->scheduler_name[0] &&
            (!sn || !sn[0] || strcmp(sn, "default-scheduler") == 0))
            add_op(ops, "/spec/schedulerName", json_string(c->scheduler_name));
        request_annotation(c, key, sizeof key);
        wh_request_string(&p.req, val, sizeof val);
        const char *cur = json_string_value(json_object_get(have, key));
        if (!cur || strcmp(cur, val) != 0)
            json_object_set_new(annots, key, json_string(val));
        gpu_pod_label(c, key, sizeof key);
        if (!kube_label(pod, key))
            json_object_set_new(labels, key, json_string("true"));
        foreach_vcuda_map(c, pod, add_native, ops);
        if (!p.policy[0]) {
            for (int i = 0; i < c->n_defaults; i++)
                if (strcmp(c->defaults[i].ns, p.ns) == 0) {
                    snprintf(key, sizeof key, "%spolicy", c->names.annot_prefix);
                    json_object_set_new(annots, key, json_string(c->defaults[i].policy));
                    break;
                }
        }
    }
    core_pod_clear(&p);
    if (!meta && json_object_size(annots) + json_object_size(labels) > 0)
        add_op(ops, "/metadata", json_object());
    add_to_metadata(ops, meta, "annotations", annots);
    add_to_metadata(ops, meta, "labels", labels);
    json_decref(annots);
    json_decref(labels);
    *patch = ops;
    return 0;
}
