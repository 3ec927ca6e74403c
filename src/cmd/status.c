/*
 * cmd/status.c - `gpusched status` (also `kubectl gpusched status`): who
 * holds which GPU.
 *
 * It rebuilds the allocation state exactly as the extender does, from the
 * same sources and with the same code: nodes through ext_node_spec(), each
 * allocation from its assignment annotations through ext_annot_parse() into
 * a core cluster model. In a cluster the sources are the API server's nodes
 * and pods (read-only GETs); standalone, the extender's NodeList file and its
 * journal in --state-dir, read without writing (a torn last record, which the
 * running extender may be writing, is skipped). Then it prints one row per
 * GPU, totals and fragmentation per model, and with --quotas the use of each
 * GPUQuota. In a cluster it also shows the GPU memory each shared container
 * really holds, as the device plugins publish it from their in-container
 * limiters' ledgers (the <prefix>gpu-usage node annotation). Colour only on
 * a terminal (and never with NO_COLOR).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "core/cluster.h"
#include "core/policy.h"
#include "core/quota.h"
#include "core/request.h"
#include "ext/annot.h"
#include "ext/journal.h"
#include "ext/nodes.h"
#include "kube/client.h"
#include "kube/yaml.h"
#include "util/opt.h"

/* The extender's default inventory_ttl: an older GPU inventory is stale. */
#define STATUS_INVENTORY_TTL 300.0

struct status {
    const struct core_names *names;
    struct core_cluster *c;
    struct core_quotas *q; /* NULL without --quotas */
    int warnings;
    json_t *usage;         /* rows of in-container use, each with its "node" */
};

static void warn(struct status *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void warn(struct status *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpusched status: warning: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    st->warnings++;
}

/* ---- building the state ---------------------------------------------------- */

static void add_usage(struct status *st, const char *node, const json_t *annotations);

/* ttl: the extender's staleness rule in cluster mode (a standalone
 * extender never applies one: 0) */
static void add_nodes(struct status *st, const json_t *items, double ttl)
{
    size_t i;
    const json_t *node;

    json_array_foreach(items, i, node) {
        struct core_node_spec spec;
        struct ext_node_buf buf = {0};
        struct gs_err e = GS_ERR_INIT;
        double updated;
        if (ext_node_spec(node, st->names, &spec, &buf, &updated, &e) < 0 ||
            core_cluster_upsert_node(st->c, &spec, &e) < 0)
            warn(st, "node %zu skipped: %s", i, e.msg);
        else if (ttl > 0 && updated > 0 && (double)time(NULL) - updated > ttl)
            core_cluster_set_available(st->c, spec.name, 0, &e); /* shown as stale */
        ext_node_buf_clear(&buf);
        const char *name = kube_meta_str(node, "name");
        if (name && st->usage)
            add_usage(st, name, json_object_get(json_object_get(node, "metadata"),
                                                "annotations"));
    }
}

/* A node's <prefix>gpu-usage annotation (dp/limiter.h): checked row by row,
 * added to st->usage with the node's name. */
static void add_usage(struct status *st, const char *node, const json_t *annotations)
{
    char key[160];
    json_error_t je;
    snprintf(key, sizeof key, "%sgpu-usage", st->names->annot_prefix);
    const char *s = json_string_value(json_object_get(annotations, key));
    if (!s)
        return;
    if (strlen(s) > 256 * 1024) {
        warn(st, "node %s: %s: longer than 256 KiB, ignored", node, key);
        return;
    }
    json_t *doc = json_loads(s, 0, &je);
    const json_t *rows = json_object_get(doc, "containers");
    const char *at = json_string_value(json_object_get(doc, "updated_at"));
    if (!json_is_array(rows)) {
        warn(st, "node %s: %s: not a usage document (%s)", node, key,
             doc ? "no containers array" : je.text);
        json_decref(doc);
        return;
    }
    size_t i;
    const json_t *r;
    json_array_foreach(rows, i, r) {
        const char *c = json_string_value(json_object_get(r, "container"));
        const json_t *dev = json_object_get(r, "device"), *used = json_object_get(r, "used_mib");
        const json_t *lim = json_object_get(r, "limit_mib"), *procs = json_object_get(r, "procs");
        if (!c || strlen(c) > 800 || !json_is_integer(dev) || json_integer_value(dev) < 0 ||
            json_integer_value(dev) > 63 || !json_is_integer(used) ||
            json_integer_value(used) < 0 || !json_is_integer(lim) ||
            json_integer_value(lim) < 0 || !json_is_integer(procs) ||
            json_integer_value(procs) < 0) {
            warn(st, "node %s: %s: containers[%zu]: a field is missing or out of range", node,
                 key, i);
            continue;
        }
        json_array_append_new(st->usage,
                              json_pack("{s:s, s:s, s:O, s:O, s:O, s:O, s:s}", "node", node,
                                        "container", c, "device", dev, "used_mib", used,
                                        "limit_mib", lim, "procs", procs, "updated_at",
                                        at ? at : ""));
    }
    json_decref(doc);
}

/* One allocation from a pod's (or journal record's) annotations; pod: the
 * pod object, whose request they must match as the extender checks (NULL
 * for a journal record). */
static void add_alloc(struct status *st, const char *uid, const char *ns, const char *name,
                      const json_t *annotations, const json_t *pod)
{
    struct core_alloc a;
    struct core_pod cp;
    struct gs_err e = GS_ERR_INIT;
    int rc;

    if (!annotations || !ext_annot_node(annotations, st->names->annot_prefix))
        return;
    memset(&a, 0, sizeof a);
    snprintf(a.pod_uid, sizeof a.pod_uid, "%s", uid);
    snprintf(a.pod_name, sizeof a.pod_name, "%s/%s", ns, name);
    /* host CPU and memory are not shown; GPUs are all that is rebuilt */
    rc = ext_annot_parse(st->c, annotations, st->names->annot_prefix, &a, &e);
    if (rc == 0 && pod && (rc = core_pod_parse(pod, st->names, &cp, &e)) == 0) {
        rc = ext_annot_fits(&cp.req, &a, &e);
        core_pod_clear(&cp);
    }
    if (rc < 0 || core_reserve(st->c, &a, &e) < 0)
        warn(st, "pod %s/%s skipped: %s", ns, name, e.msg);
}

static void add_pods(struct status *st, const json_t *items)
{
    size_t i;
    const json_t *pod;

    json_array_foreach(items, i, pod) {
        if (kube_pod_done(pod))
            continue; /* their GPUs are free (kube/client.h) */
        const char *uid = kube_meta_str(pod, "uid"), *ns = kube_meta_str(pod, "namespace");
        const char *name = kube_meta_str(pod, "name");
        add_alloc(st, uid ? uid : "", ns ? ns : "default", name ? name : "",
                  json_object_get(json_object_get(pod, "metadata"), "annotations"), pod);
    }
}

/* Folds journal records into uid -> live bind record. */
struct journal_fold {
    struct status *st;
    json_t *live;
};

static int fold_record(void *ud, const json_t *rec, struct gs_err *e)
{
    struct journal_fold *jf = ud;
    const char *op = json_string_value(json_object_get(rec, "op"));
    const char *uid = json_string_value(json_object_get(rec, "uid"));
    (void)e;
    if (op && uid && strcmp(op, "bind") == 0)
        json_object_set(jf->live, uid, (json_t *)rec);
    else if (op && uid && strcmp(op, "release") == 0)
        json_object_del(jf->live, uid);
    else if (!op || strcmp(op, "workload") != 0) /* the learned workload's: not status's */
        warn(jf->st, "journal record without op/uid skipped");
    return 0;
}

/* Reads DIR/journal without writing it: binds and releases in order. */
static int read_journal(struct status *st, const char *dir, struct gs_err *e)
{
    struct journal_fold jf = {st, json_object()};
    int torn;
    const char *uid;
    json_t *rec;
    int rc = ext_journal_read(dir, fold_record, &jf, &torn, e);
    if (rc < 0) {
        json_decref(jf.live);
        return rc;
    }
    json_object_foreach(jf.live, uid, rec) {
        const char *ns = json_string_value(json_object_get(rec, "ns"));
        const char *name = json_string_value(json_object_get(rec, "name"));
        add_alloc(st, uid, ns ? ns : "default", name ? name : "",
                  json_object_get(rec, "annotations"), NULL);
    }
    json_decref(jf.live);
    return 0;
}

static void on_bad_quota(void *ud, int index, const struct gs_err *e)
{
    warn(ud, "GPUQuota %d ignored: %s", index, e->msg);
}

/* Quotas from a list of GPUQuota objects, charged with every allocation. */
static int load_quotas(struct status *st, const json_t *doc, struct gs_err *e)
{
    struct core_quota *qs;
    int n;

    if (core_quota_parse_doc(doc, &qs, &n, on_bad_quota, st, e) < 0)
        return -GS_EINVAL;
    st->q = core_quotas_new();
    for (int i = 0; st->q && i < n; i++)
        core_quotas_put(st->q, &qs[i], e);
    free(qs);
    if (!st->q)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    return core_quotas_recount(st->q, st->c, NULL, e);
}

static int from_cluster(struct status *st, const char *kubeconfig, int quotas, struct gs_err *e)
{
    struct kube_config cfg = {0};
    struct kube_client *kc = NULL;
    json_t *nodes = NULL, *pods = NULL, *ql = NULL;
    int rc;

    rc = kubeconfig ? kube_config_load_file(kubeconfig, NULL, &cfg, e)
                    : kube_config_in_cluster(NULL, &cfg, e);
    if (rc < 0)
        return rc;
    rc = kube_client_new(&cfg, NULL, &kc, e);
    kube_config_clear(&cfg);
    if (rc < 0)
        return rc;
    if ((rc = kube_get(kc, "/api/v1/nodes", &nodes, e)) < 0 ||
        (rc = kube_get(kc, "/api/v1/pods", &pods, e)) < 0)
        goto out;
    add_nodes(st, json_object_get(nodes, "items"), STATUS_INVENTORY_TTL);
    add_pods(st, json_object_get(pods, "items"));
    if (quotas) {
        rc = kube_get(kc, "/apis/gpusched.io/v1/gpuquotas", &ql, e);
        if (rc == -GS_ENOENT) {
            warn(st, "the GPUQuota CRD is not installed (deploy/crd-gpuquota.yaml)");
            json_decref(ql); /* the 404's Status */
            ql = json_pack("{s:[]}", "items");
            rc = 0;
        }
        if (rc < 0)
            goto out;
        rc = load_quotas(st, ql, e);
    }
out:
    json_decref(nodes);
    json_decref(pods);
    json_decref(ql);
    kube_client_free(kc);
    return rc;
}

static int from_state_dir(struct status *st, const char *dir, const char *nodes_file,
                          const char *quota_file, int quotas, struct gs_err *e)
{
    json_error_t je;
    json_t *nodes = json_load_file(nodes_file, 0, &je);

    if (!nodes)
        return gs_errf(e, GS_EINVAL, "%s:%d: %s", nodes_file, je.line, je.text);
    if (!json_is_array(json_object_get(nodes, "items"))) {
        json_decref(nodes);
        return gs_errf(e, GS_EINVAL, "%s: not a NodeList (no items array)", nodes_file);
    }
    add_nodes(st, json_object_get(nodes, "items"), 0);
    json_decref(nodes);
    if (read_journal(st, dir, e) < 0)
        return -GS_EINVAL;
    if (quotas) {
        json_t *doc = NULL;
        int rc = quota_file ? kube_yaml_load(quota_file, &doc, e) : 0;
        if (rc < 0)
            return rc;
        if (!doc)
            doc = json_array();
        rc = load_quotas(st, doc, e);
        json_decref(doc);
        if (rc < 0 && quota_file)
            gs_err_prefix(e, "%s", quota_file);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- output ------------------------------------------------------------------- */

struct colours {
    const char *red, *yellow, *green, *bold, *off;
};

static void pods_on_gpu(const struct core_cluster *c, const struct core_node *n, int g,
                        char *buf, size_t cap, json_t *arr)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < core_cluster_alloc_count(c); i++) {
        const struct core_alloc *a = core_cluster_alloc(c, i);
        if (strcmp(a->node, n->name) != 0)
            continue;
        for (int k = 0; k < a->n; k++) {
            if (a->gpu[k] != g)
                continue;
            if (arr)
                json_array_append_new(arr, json_string(a->pod_name));
            if (len < cap)
                len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? "," : "",
                                        a->pod_name);
            break;
        }
    }
    if (!buf[0])
        snprintf(buf, cap, "-");
}

static int mig_used(const struct core_gpu *gpu)
{
    int k = 0;
    for (int i = 0; i < gpu->n_mig; i++)
        k += gpu->mig[i].used != 0;
    return k;
}

/* MIG instances the device plugin marked unhealthy (their GPU may be fine). */
static int mig_unhealthy(const struct core_gpu *gpu)
{
    int k = 0;
    for (int i = 0; i < gpu->n_mig; i++)
        k += gpu->mig[i].unhealthy != 0;
    return k;
}

/* MIG GPUs count the memory of their used instances. */
struct model_total {
    char model[CORE_MODEL_MAX];
    int gpus, free_gpus, unhealthy;
    int64_t mem, mem_used, milli_used;
    double frag;
};

static int model_totals(struct core_cluster *c, struct model_total *mt, int max)
{
    int n = 0;
    for (int i = 0; i < core_cluster_node_count(c); i++) {
        const struct core_node *node = core_cluster_node(c, i);
        for (int g = 0; g < node->n_gpus; g++) {
            const struct core_gpu *gpu = &node->gpus[g];
            int k;
            for (k = 0; k < n; k++)
                if (strcmp(mt[k].model, gpu->model) == 0)
                    break;
            if (k == n) {
                if (n == max)
                    continue;
                memset(&mt[n], 0, sizeof mt[n]);
                snprintf(mt[n].model, sizeof mt[n].model, "%s", gpu->model);
                n++;
            }
            mt[k].gpus++;
            mt[k].mem += gpu->mem_mib;
            mt[k].mem_used += core_gpu_mem_used(gpu);
            mt[k].milli_used += core_gpu_milli_used(gpu);
            mt[k].free_gpus += gpu->n_pods == 0 && gpu->healthy && node->available;
            mt[k].unhealthy += !gpu->healthy;
        }
        if (node->n_gpus > 0) /* a node's fragmentation goes to its first GPU's model */
            for (int k = 0; k < n; k++)
                if (strcmp(mt[k].model, node->gpus[0].model) == 0)
                    mt[k].frag += core_node_frag(c, node);
    }
    return n;
}

static void print_table(struct status *st, int wide, const struct colours *co)
{
    struct core_cluster *c = st->c;
    char pods[512], mem[48];

    printf("%s%-20s %3s  %-26s %-20s %7s  %-8s %s%s%s\n", co->bold, "NODE", "GPU", "MODEL",
           "MEMORY USED/TOTAL", "COMPUTE", "HEALTH", wide ? "UUID                 " : "",
           "PODS", co->off);
    for (int i = 0; i < core_cluster_node_count(c); i++) {
        const struct core_node *n = core_cluster_node(c, i);
        for (int g = 0; g < n->n_gpus; g++) {
            const struct core_gpu *gpu = &n->gpus[g];
            int used_milli = core_gpu_milli_used(gpu);
            int64_t used_mem = core_gpu_mem_used(gpu);
            int sick = mig_unhealthy(gpu); /* some MIG instances, the GPU healthy */
            char bad[24];
            snprintf(bad, sizeof bad, "%d/%d bad", sick, gpu->n_mig);
            const char *health = !gpu->healthy   ? "unhealthy"
                                 : !n->available ? "stale"
                                 : sick          ? bad
                                                 : "ok";
            const char *hc = !gpu->healthy || !n->available ? co->red
                             : sick                         ? co->yellow
                                                            : co->green;
            const char *uc = used_milli >= 1000 ? co->yellow : "";
            pods_on_gpu(c, n, g, pods, sizeof pods, NULL);
            snprintf(mem, sizeof mem, "%lld/%lld MiB", (long long)used_mem,
                     (long long)gpu->mem_mib);
            char uuid[CORE_UUID_MAX + 2] = "";
            if (wide)
                snprintf(uuid, sizeof uuid, "%-21s ", gpu->uuid);
            char comp[24];
            if (gpu->mig_enabled)
                snprintf(comp, sizeof comp, "%d/%d mig", mig_used(gpu), gpu->n_mig);
            else
                snprintf(comp, sizeof comp, "%.1f%%", used_milli / 10.0);
            printf("%-20s %3d  %-26s %-20s %s%7s%s  %s%-8s%s %s%s\n", n->name, gpu->index,
                   gpu->model, mem, uc, comp, co->off, hc, health, co->off, uuid, pods);
        }
    }
    struct model_total mt[CORE_MAX_MODELS];
    int nm = model_totals(c, mt, CORE_MAX_MODELS);
    printf("\n%s%-26s %5s %9s %10s %-24s %12s %14s%s\n", co->bold, "MODEL", "GPUS", "FREE GPUS",
           "UNHEALTHY", "MEMORY USED/TOTAL", "COMPUTE USED", "FRAGMENTATION", co->off);
    struct model_total all = {"TOTAL", 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k <= nm; k++) {
        const struct model_total *m = k < nm ? &mt[k] : &all;
        if (k < nm) {
            all.gpus += m->gpus;
            all.free_gpus += m->free_gpus;
            all.unhealthy += m->unhealthy;
            all.mem += m->mem;
            all.mem_used += m->mem_used;
            all.milli_used += m->milli_used;
            all.frag += m->frag;
        }
        snprintf(mem, sizeof mem, "%lld/%lld MiB", (long long)m->mem_used, (long long)m->mem);
        printf("%-26s %5d %9d %10d %-24s %12.2f %14.2f\n", m->model, m->gpus, m->free_gpus,
               m->unhealthy, mem, m->milli_used / 1000.0, m->frag / 1000.0);
    }
    printf("(compute and fragmentation in GPUs; fragmentation: free GPU compute the typical pod "
           "cannot use)\n");
}

/* What shared containers really hold, from their limiters' ledgers. */
static void print_usage(const struct status *st, const struct colours *co)
{
    size_t i;
    const json_t *r;
    if (!json_array_size(st->usage))
        return;
    printf("\n%s%-20s %-44s %6s %-20s %5s  %s%s\n", co->bold, "NODE", "CONTAINER (in-container use)",
           "DEVICE", "MEMORY USED/LIMIT", "PROCS", "AS OF", co->off);
    json_array_foreach(st->usage, i, r) {
        char mem[64];
        long long used = json_integer_value(json_object_get(r, "used_mib"));
        long long lim = json_integer_value(json_object_get(r, "limit_mib"));
        snprintf(mem, sizeof mem, "%lld/%lld MiB", used, lim);
        printf("%-20s %-44s %6lld %s%-20s%s %5lld  %s\n",
               json_string_value(json_object_get(r, "node")),
               json_string_value(json_object_get(r, "container")),
               json_integer_value(json_object_get(r, "device")),
               lim && used * 10 >= lim * 9 ? co->yellow : "", mem, co->off,
               json_integer_value(json_object_get(r, "procs")),
               json_string_value(json_object_get(r, "updated_at")));
    }
}

static void fmt_pair(int64_t used, int64_t limit, int kind, char *buf, size_t cap)
{
    char u[32], l[32];
    if (kind == 0) {
        snprintf(u, sizeof u, "%lld", (long long)used);
        snprintf(l, sizeof l, "%lld", (long long)limit);
    } else if (kind == 1) {
        core_quota_fmt_mib(used, u, sizeof u);
        core_quota_fmt_mib(limit, l, sizeof l);
    } else {
        core_quota_fmt_milli(used, u, sizeof u);
        core_quota_fmt_milli(limit, l, sizeof l);
    }
    snprintf(buf, cap, "%s/%s", u, limit == CORE_QUOTA_NONE ? "-" : l);
}

static void quota_row_print(void *ud, const struct core_quota_row *r)
{
    char g[72], m[72], c[72];
    (void)ud;
    fmt_pair(r->used.gpus, r->limit.gpus, 0, g, sizeof g);
    fmt_pair(r->used.mem_mib, r->limit.mem_mib, 1, m, sizeof m);
    fmt_pair(r->used.milli, r->limit.milli, 2, c, sizeof c);
    printf("%-20s %-20s %-16s %-12s %-18s %-14s\n", r->ns, r->quota,
           r->model[0] ? r->model : "(total)", g, m, c);
}

static json_t *limits_json(const struct core_quota_limits *l)
{
    json_t *o = json_object();
    if (l->gpus != CORE_QUOTA_NONE)
        json_object_set_new(o, "gpus", json_integer(l->gpus));
    if (l->mem_mib != CORE_QUOTA_NONE)
        json_object_set_new(o, "memory_mib", json_integer(l->mem_mib));
    if (l->milli != CORE_QUOTA_NONE)
        json_object_set_new(o, "milli", json_integer(l->milli));
    return o;
}

static void quota_row_json(void *ud, const struct core_quota_row *r)
{
    json_array_append_new(ud, json_pack("{s:s, s:s, s:s, s:o, s:o}", "namespace", r->ns, "quota",
                                        r->quota, "model", r->model, "limit",
                                        limits_json(&r->limit), "used",
                                        limits_json(&r->used)));
}

static void print_json(struct status *st)
{
    struct core_cluster *c = st->c;
    json_t *root = json_object(), *nodes = json_array(), *models = json_array();
    char pods[8];

    for (int i = 0; i < core_cluster_node_count(c); i++) {
        const struct core_node *n = core_cluster_node(c, i);
        json_t *gpus = json_array();
        for (int g = 0; g < n->n_gpus; g++) {
            const struct core_gpu *gpu = &n->gpus[g];
            json_t *pl = json_array();
            pods_on_gpu(c, n, g, pods, sizeof pods, pl);
            json_t *gj = json_pack("{s:i, s:s, s:s, s:I, s:I, s:i, s:b, s:o}", "index",
                                   gpu->index, "uuid", gpu->uuid, "model", gpu->model,
                                   "memory_mib", (json_int_t)gpu->mem_mib, "memory_used_mib",
                                   (json_int_t)core_gpu_mem_used(gpu), "milli_used",
                                   core_gpu_milli_used(gpu), "healthy", gpu->healthy, "pods", pl);
            if (gj && gpu->mig_enabled)
                json_object_set_new(gj, "mig_unhealthy", json_integer(mig_unhealthy(gpu)));
            json_array_append_new(gpus, gj);
        }
        json_array_append_new(nodes, json_pack("{s:s, s:b, s:o}", "name", n->name, "available",
                                               n->available, "gpus", gpus));
    }
    struct model_total mt[CORE_MAX_MODELS];
    int nm = model_totals(c, mt, CORE_MAX_MODELS);
    for (int k = 0; k < nm; k++)
        json_array_append_new(
            models, json_pack("{s:s, s:i, s:i, s:i, s:I, s:I, s:I, s:f}", "model", mt[k].model,
                              "gpus", mt[k].gpus, "free_gpus", mt[k].free_gpus, "unhealthy",
                              mt[k].unhealthy, "memory_mib", (json_int_t)mt[k].mem,
                              "memory_used_mib", (json_int_t)mt[k].mem_used, "milli_used",
                              (json_int_t)mt[k].milli_used, "frag_milli", mt[k].frag));
    json_object_set_new(root, "nodes", nodes);
    json_object_set_new(root, "models", models);
    if (st->q) {
        json_t *qa = json_array();
        core_quotas_foreach(st->q, quota_row_json, qa);
        json_object_set_new(root, "quotas", qa);
    }
    if (json_array_size(st->usage))
        json_object_set(root, "containers", st->usage);
    char *s = json_dumps(root, JSON_INDENT(2));
    if (s)
        puts(s);
    free(s);
    json_decref(root);
}

int cmd_status(int argc, char **argv)
{
    const char *kubeconfig = NULL, *state_dir = NULL, *nodes = NULL, *quota_file = NULL;
    const char *output = NULL, *res_prefix = CORE_RES_PREFIX_DEFAULT;
    const char *annot_prefix = CORE_ANNOT_PREFIX_DEFAULT;
    int quotas = 0, npos;
    struct core_names_store names;
    struct gs_err e = GS_ERR_INIT;
    const struct opt opts[] = {
        OPT_STR("kubeconfig", &kubeconfig, "FILE", "read the cluster through this kubeconfig"),
        OPT_STR("state-dir", &state_dir, "DIR", "standalone: the extender's --state-dir"),
        OPT_STR("nodes", &nodes, "FILE", "standalone: the extender's --nodes NodeList"),
        OPT_STR("quota-file", &quota_file, "FILE", "standalone: GPUQuota objects (with --quotas)"),
        OPT_STR("o", &output, "wide|json", "output format"),
        OPT_STR("output", &output, "wide|json", "output format"),
        OPT_BOOL("quotas", &quotas, "also show GPUQuota use per namespace"),
        OPT_STR("resource-prefix", &res_prefix, "PREFIX", "resource names' prefix (nvidia.com/)"),
        OPT_STR("annotation-prefix", &annot_prefix, "PREFIX", "annotation prefix (gpusched.io/)"),
        OPT_END(),
    };
    const char *usage = "gpusched status [--kubeconfig FILE | --state-dir DIR --nodes FILE] "
                        "[-o wide|json] [--quotas]";

    int rc = cmd_flags("status", argc - 1, argv + 1, opts, usage, 0, &npos);
    if (rc >= 0)
        return rc;
    int wide = output && strcmp(output, "wide") == 0, as_json = output && strcmp(output, "json") == 0;
    if (output && !wide && !as_json) {
        fprintf(stderr, "gpusched status: -o: '%s' is not wide or json\n", output);
        return 2;
    }
    if (kubeconfig && state_dir) {
        fprintf(stderr, "gpusched status: --kubeconfig and --state-dir exclude each other\n");
        return 2;
    }
    if (!!state_dir != !!nodes) {
        fprintf(stderr, "gpusched status: --state-dir and --nodes FILE go together (a "
                        "standalone extender's journal and node list)\n");
        return 2;
    }
    if (quota_file && (!quotas || !state_dir)) {
        fprintf(stderr, "gpusched status: --quota-file needs --quotas and --state-dir (in a "
                        "cluster the GPUQuota objects are read)\n");
        return 2;
    }
    if (core_names_prefixed(&names, res_prefix, annot_prefix, &e) < 0) {
        fprintf(stderr, "gpusched status: %s\n", e.msg);
        return 2;
    }
    /* as kubectl: $KUBECONFIG's first file, else ~/.kube/config when it
     * exists, else the service account of the pod it runs in */
    if (!state_dir && !kubeconfig) {
        static char def[4096];
        const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
        if (env && env[0])
            snprintf(def, sizeof def, "%.*s", (int)strcspn(env, ":"), env);
        else if (home) {
            snprintf(def, sizeof def, "%s/.kube/config", home);
            if (access(def, F_OK) != 0 && getenv("KUBERNETES_SERVICE_HOST"))
                def[0] = '\0'; /* in a pod, without one */
        }
        kubeconfig = def[0] ? def : NULL;
    }

    struct status st = {&names.names, core_cluster_new(), NULL, 0, json_array()};
    if (!st.c || !st.usage) {
        json_decref(st.usage);
        core_cluster_free(st.c);
        fprintf(stderr, "gpusched status: out of memory\n");
        return 1;
    }
    rc = state_dir ? from_state_dir(&st, state_dir, nodes, quota_file, quotas, &e)
                   : from_cluster(&st, kubeconfig, quotas, &e);
    if (rc < 0) {
        fprintf(stderr, "gpusched status: %s\n", e.msg);
        json_decref(st.usage);
        core_quotas_free(st.q);
        core_cluster_free(st.c);
        return 1;
    }
    int tty = isatty(STDOUT_FILENO) && !getenv("NO_COLOR") &&
              !(getenv("TERM") && strcmp(getenv("TERM"), "dumb") == 0);
    const struct colours co = tty ? (struct colours){"\033[31m", "\033[33m", "\033[32m",
                                                     "\033[1m", "\033[0m"}
                                  : (struct colours){"", "", "", "", ""};
    if (as_json) {
        print_json(&st);
    } else {
        print_table(&st, wide, &co);
        if (st.q) {
            printf("\n%s%-20s %-20s %-16s %-12s %-18s %-14s%s\n", co.bold, "NAMESPACE", "QUOTA",
                   "MODEL", "GPUS", "MEMORY", "COMPUTE", co.off);
            core_quotas_foreach(st.q, quota_row_print, NULL);
        }
        print_usage(&st, &co);
    }
    json_decref(st.usage);
    core_quotas_free(st.q);
    core_cluster_free(st.c);
    return 0;
}
