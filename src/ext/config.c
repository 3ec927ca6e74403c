/* ext/config.c - see config.h. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/config.h"
#include "ext/sched.h"
#include "kube/yaml.h"
#include "util/log.h"

enum ctype { C_STR, C_INT, C_DBL, C_BOOL };

struct row {
    const char *key;   /* config key; the flag is the same with '-' for '_' */
    enum ctype type;
    size_t off;
    const char *arg, *help;
    long min, max;
};

#define F(f) offsetof(struct ext_config, f)
static const struct row rows[] = {
    {"listen", C_STR, F(listen), "HOST:PORT", "address to serve on (default 127.0.0.1:8888)", 0, 0},
    {"tls_cert", C_STR, F(tls_cert), "FILE", "serve HTTPS with this certificate (PEM)", 0, 0},
    {"tls_key", C_STR, F(tls_key), "FILE", "... and this key (PEM)", 0, 0},
    {"tls_ca", C_STR, F(tls_ca), "FILE", "forward to a leader whose certificate this CA "
     "signed (PEM; default: one with this replica's own key)", 0, 0},
    {"policy", C_STR, F(policy), "NAME", "default placement policy (default " EXT_DEFAULT_POLICY ")", 0, 0},
    {"top_k", C_INT, F(top_k), "K", "/filter keeps only the policy's best K nodes (0 = all)", 0,
     100000},
    {"hard_pod_affinity_weight", C_INT, F(hard_pod_affinity_weight), "W",
     "what a placed pod's required podAffinity term adds to the score of the pods it picks: "
     "kube-scheduler's InterPodAffinityArgs hardPodAffinityWeight, keep the two equal "
     "(0..100, default 1)", 0, 100},
    {"nodes", C_STR, F(nodes), "FILE", "standalone: NodeList JSON file", 0, 0},
    {"state_dir", C_STR, F(state_dir), "DIR", "standalone: journal directory", 0, 0},
    {"quotas", C_STR, F(quotas), "FILE", "standalone: GPUQuota objects, YAML or JSON (re-read "
     "on change; cluster mode watches gpuquotas)", 0, 0},
    {"kubeconfig", C_STR, F(kubeconfig), "FILE", "cluster: kubeconfig file", 0, 0},
    {"in_cluster", C_BOOL, F(in_cluster), NULL, "cluster: use the pod's service account", 0, 0},
    {"inventory_ttl", C_DBL, F(inventory_ttl), "SECONDS",
     "a node whose GPU inventory is older is unavailable (0 = never; default 300)", 0, 0},
    {"leader_elect", C_BOOL, F(leader_elect), NULL, "cluster: elect a leader with a Lease", 0, 0},
    {"lease_name", C_STR, F(lease_name), "NAME", "Lease name (default gpusched-extender)", 0, 0},
    {"lease_namespace", C_STR, F(lease_namespace), "NS", "Lease namespace (default: own)", 0, 0},
    {"identity", C_STR, F(identity), "ID", "this replica's name (default: hostname)", 0, 0},
    {"lease_duration", C_DBL, F(lease_duration), "SECONDS", "lease duration (default 15)", 0, 0},
    {"workload_configmap", C_STR, F(workload_configmap), "NAME",
     "cluster: ConfigMap (in the Lease's namespace) where the leader saves what it learned from "
     "pods that have ended, read back at start (default gpusched-workload; \"\" = off)", 0, 0},
    {"workload_save", C_DBL, F(workload_save), "SECONDS",
     "cluster: how often the leader saves it, when it changed (default 60)", 0, 0},
    {"nudge", C_BOOL, F(nudge), NULL, "touch unschedulable GPU pods when GPUs free up (default on)",
     0, 0},
    {"events", C_BOOL, F(events), NULL, "post Events on pods that fit nowhere (default on)", 0, 0},
    {"filter_preemption", C_BOOL, F(filter_preemption), NULL,
     "cluster: when GPUs alone keep a pod off every node, the leader preempts lower-priority "
     "GPU pods for it from /filter (for kube-scheduler 1.22+, whose preemption never asks "
     "/preempt then; default off)", 0, 0},
    {"node_lock_timeout", C_DBL, F(node_lock_timeout), "SECONDS",
     "cluster: a GPU pod bound to a node holds it until kubelet admits it, at most this long "
     "(0 = no node lock; default 300)", 0, 0},
    {"bind_wait", C_DBL, F(bind_wait), "SECONDS",
     "cluster: how long a /bind waits for a held node before answering 503 (default 5)", 0, 0},
    {"filter_wait", C_DBL, F(filter_wait), "SECONDS",
     "how long a GPU pod's /filter waits for the /bind of the GPU pod filtered before it "
     "(kube-scheduler binds beside the next cycle; 0 = never; default 0.1)", 0, 0},
    {"log_level", C_STR, F(log_level), "LEVEL", "debug, info, warn or error", 0, 0},
    {"log_format", C_STR, F(log_format), "FMT", "text or json", 0, 0},
    {"threads", C_INT, F(threads), "N", "HTTP worker threads (default 4)", 1, 256},
    {"max_body", C_INT, F(max_body), "BYTES", "largest request body (default 8 MiB)", 1024,
     1L << 30},
    {"resource_gpu", C_STR, F(res_gpu), "NAME", "whole-GPU resource", 0, 0},
    {"resource_gpu_memory", C_STR, F(res_gpu_memory), "NAME", "GPU memory resource", 0, 0},
    {"resource_gpu_cores", C_STR, F(res_gpu_cores), "NAME", "GPU cores resource", 0, 0},
    {"resource_vcuda_core", C_STR, F(res_vcuda_core), "NAME", "vcuda core resource", 0, 0},
    {"resource_vcuda_memory", C_STR, F(res_vcuda_memory), "NAME", "vcuda memory resource", 0, 0},
    {"resource_mig_prefix", C_STR, F(res_mig_prefix), "PREFIX", "MIG resource prefix", 0, 0},
    {"annotation_prefix", C_STR, F(annotation_prefix), "PREFIX", "annotation prefix", 0, 0},
};
#define NROWS (sizeof rows / sizeof rows[0])

static char **str_at(struct ext_config *c, const struct row *r)
{
    return (char **)((char *)c + r->off);
}
static long *long_at(struct ext_config *c, const struct row *r)
{
    return (long *)((char *)c + r->off);
}
static double *dbl_at(struct ext_config *c, const struct row *r)
{
    return (double *)((char *)c + r->off);
}

static void set_str(struct ext_config *c, const struct row *r, const char *v)
{
    char **p = str_at(c, r);
    free(*p);
    *p = v ? strdup(v) : NULL;
}

void ext_config_defaults(struct ext_config *c)
{
    const struct core_names *d = core_names_default();
    memset(c, 0, sizeof *c);
    c->listen = strdup("127.0.0.1:8888");
    c->policy = strdup(EXT_DEFAULT_POLICY);
    c->inventory_ttl = 300;
    c->lease_name = strdup("gpusched-extender");
    c->lease_duration = 15;
    c->workload_configmap = strdup("gpusched-workload");
    c->workload_save = 60;
    c->nudge = 1;
    c->events = 1;
    c->node_lock_timeout = 300;
    c->bind_wait = 5;
    c->filter_wait = 0.1;
    c->hard_pod_affinity_weight = CORE_HARD_POD_AFFINITY_WEIGHT;
    c->log_level = strdup("info");
    c->log_format = strdup("text");
    c->threads = 4;
    c->max_body = 8L << 20;
    c->res_gpu = strdup(d->gpu);
    c->res_gpu_memory = strdup(d->gpu_memory);
    c->res_gpu_cores = strdup(d->gpu_cores);
    c->res_vcuda_core = strdup(d->vcuda_core);
    c->res_vcuda_memory = strdup(d->vcuda_memory);
    c->res_mig_prefix = strdup(d->mig_prefix);
    c->annotation_prefix = strdup(d->annot_prefix);
}

void ext_config_clear(struct ext_config *c)
{
    for (size_t i = 0; i < NROWS; i++)
        if (rows[i].type == C_STR)
            free(*str_at(c, &rows[i]));
    memset(c, 0, sizeof *c);
}

int ext_config_load(struct ext_config *c, const char *path, struct gs_err *e)
{
    json_t *doc, *v;
    const char *k;
    int rc = kube_yaml_load(path, &doc, e);
    if (rc < 0)
        return rc;
    if (!json_is_object(doc)) {
        json_decref(doc);
        return gs_errf(e, GS_EINVAL, "%s: top level must be a mapping", path);
    }
    json_object_foreach(doc, k, v)
    {
        const struct row *r = NULL;
        for (size_t i = 0; i < NROWS; i++)
            if (strcmp(rows[i].key, k) == 0)
                r = &rows[i];
        if (!r) {
            rc = gs_errf(e, GS_EINVAL, "%s: %s: unknown setting", path, k);
            break;
        }
        if (r->type == C_STR && (json_is_string(v) || json_is_null(v))) {
            set_str(c, r, json_is_string(v) ? json_string_value(v) : NULL);
        } else if (r->type == C_INT && json_is_integer(v)) {
            *long_at(c, r) = (long)json_integer_value(v);
        } else if (r->type == C_DBL && json_is_number(v)) {
            *dbl_at(c, r) = json_number_value(v);
        } else if (r->type == C_BOOL && json_is_boolean(v)) {
            *long_at(c, r) = json_is_true(v);
        } else {
            static const char *const tn[] = {"a string", "an integer", "a number", "true or false"};
            rc = gs_errf(e, GS_EINVAL, "%s: %s: must be %s", path, k, tn[r->type]);
            break;
        }
    }
    json_decref(doc);
    return rc;
}

int ext_config_finish(struct ext_config *c, struct gs_err *e)
{
    enum log_level lv;
    enum log_format lf;
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        if (r->type == C_INT && r->min <= r->max &&
            (*long_at(c, r) < r->min || *long_at(c, r) > r->max))
            return gs_errf(e, GS_EINVAL, "%s: %ld is out of range %ld..%ld", r->key,
                           *long_at(c, r), r->min, r->max);
        if (r->type == C_DBL && (!isfinite(*dbl_at(c, r)) || *dbl_at(c, r) < 0))
            return gs_errf(e, GS_EINVAL, "%s: must be a non-negative number", r->key);
    }
    if (!c->listen || !c->policy || !c->res_gpu || !c->res_gpu_memory || !c->res_gpu_cores ||
        !c->res_vcuda_core || !c->res_vcuda_memory || !c->res_mig_prefix || !c->annotation_prefix)
        return gs_errf(e, GS_EINVAL, "listen, policy and resource names must not be empty");
    if (core_prefix_check("annotation_prefix", c->annotation_prefix, CORE_ANNOT_PREFIX_MAX, e) < 0)
        return -GS_EINVAL;
    if (log_parse_level(c->log_level ? c->log_level : "", &lv) < 0)
        return gs_errf(e, GS_EINVAL, "log_level: '%s' is not debug, info, warn or error",
                       c->log_level ? c->log_level : "");
    if (log_parse_format(c->log_format ? c->log_format : "", &lf) < 0)
        return gs_errf(e, GS_EINVAL, "log_format: '%s' is not text or json",
                       c->log_format ? c->log_format : "");
    if (!!c->tls_cert != !!c->tls_key)
        return gs_errf(e, GS_EINVAL, "tls_cert and tls_key go together");
    if (c->tls_ca && !c->tls_cert)
        return gs_errf(e, GS_EINVAL, "tls_ca needs tls_cert and tls_key");
    if (c->lease_duration < 1)
        return gs_errf(e, GS_EINVAL, "lease_duration: at least 1 second");
    if (c->workload_configmap && c->workload_configmap[0] &&
        (strlen(c->workload_configmap) > 253 ||
         strspn(c->workload_configmap, "abcdefghijklmnopqrstuvwxyz0123456789.-") !=
             strlen(c->workload_configmap)))
        return gs_errf(e, GS_EINVAL, "workload_configmap: '%s' is not a ConfigMap name "
                       "(lower-case letters, digits, '.' and '-', at most 253)",
                       c->workload_configmap);
    if (!(c->workload_save >= 1 && c->workload_save <= 86400))
        return gs_errf(e, GS_EINVAL, "workload_save: 1..86400 seconds");
    if (!(c->node_lock_timeout >= 0 && c->node_lock_timeout <= 86400))
        return gs_errf(e, GS_EINVAL, "node_lock_timeout: 0..86400 seconds");
    /* kube-scheduler's extender httpTimeout is 10 s in deploy/: stay under it */
    if (!(c->bind_wait >= 0 && c->bind_wait <= 60))
        return gs_errf(e, GS_EINVAL, "bind_wait: 0..60 seconds (keep it under the scheduler's "
                       "httpTimeout)");
    if (!(c->filter_wait >= 0 && c->filter_wait <= 1))
        return gs_errf(e, GS_EINVAL, "filter_wait: 0..1 seconds");
    c->names.gpu = c->res_gpu;
    c->names.gpu_memory = c->res_gpu_memory;
    c->names.gpu_cores = c->res_gpu_cores;
    c->names.vcuda_core = c->res_vcuda_core;
    c->names.vcuda_memory = c->res_vcuda_memory;
    c->names.mig_prefix = c->res_mig_prefix;
    c->names.annot_prefix = c->annotation_prefix;
    return 0;
}

/* ---- flags -------------------------------------------------------------- */

/* Every boolean key also gets a --no-<flag> form, so a setting that
 * defaults on (nudge, events) or that a config file turned on can be turned
 * off from the command line. */
struct ext_flags {
    struct opt opts[2 * NROWS + 2];
    char names[NROWS][40], neg_names[NROWS][44];
    int noflag[NROWS];
    const char *str[NROWS];
    long num[NROWS];
    double dbl[NROWS];
    int flag[NROWS];
    const char *config;
};

const struct opt *ext_config_opts(struct ext_flags **out)
{
    struct ext_flags *f = calloc(1, sizeof *f);
    size_t i, k = 1;
    if (!f)
        return NULL;
    f->opts[0] = (struct opt)OPT_STR("config", &f->config, "FILE", "YAML config file (keys as "
                                     "the flags, with '_' for '-')");
    for (i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        struct opt *o = &f->opts[k++];
        snprintf(f->names[i], sizeof f->names[i], "%s", r->key);
        for (char *p = f->names[i]; *p; p++)
            if (*p == '_')
                *p = '-';
        f->num[i] = LONG_MIN;
        f->dbl[i] = NAN;
        switch (r->type) {
        case C_STR: *o = (struct opt)OPT_STR(f->names[i], &f->str[i], r->arg, r->help); break;
        case C_INT:
            *o = (struct opt)OPT_INT(f->names[i], &f->num[i], r->arg, r->help, r->min, r->max);
            break;
        case C_DBL: *o = (struct opt)OPT_DBL(f->names[i], &f->dbl[i], r->arg, r->help); break;
        case C_BOOL:
            *o = (struct opt)OPT_BOOL(f->names[i], &f->flag[i], r->help);
            snprintf(f->neg_names[i], sizeof f->neg_names[i], "no-%s", f->names[i]);
            f->opts[k++] = (struct opt)OPT_BOOL(f->neg_names[i], &f->noflag[i], "... off");
            break;
        }
    }
    f->opts[k] = (struct opt)OPT_END();
    *out = f;
    return f->opts;
}

void ext_config_apply_flags(struct ext_config *c, struct ext_flags *f)
{
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        if (r->type == C_STR && f->str[i])
            set_str(c, r, f->str[i]);
        else if (r->type == C_INT && f->num[i] != LONG_MIN)
            *long_at(c, r) = f->num[i];
        else if (r->type == C_DBL && !isnan(f->dbl[i]))
            *dbl_at(c, r) = f->dbl[i];
        else if (r->type == C_BOOL && (f->flag[i] || f->noflag[i]))
            *long_at(c, r) = !f->noflag[i];
    }
}

const char *ext_flags_config_file(const struct ext_flags *f) { return f->config; }

void ext_flags_free(struct ext_flags *f) { free(f); }
