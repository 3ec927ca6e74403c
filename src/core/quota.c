/* core/quota.c - see quota.h. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/cluster.h"
#include "core/quota.h"

#define MIB (1024 * 1024)

/* ---- one GPUQuota object ---------------------------------------------------- */

static int parse_limits(json_t *obj, const char *field, int allow_model,
                        struct core_quota_limits *l, char *model, struct gs_err *e)
{
    const char *key;
    json_t *v;

    l->gpus = l->mem_mib = l->milli = CORE_QUOTA_NONE;
    if (!json_is_object(obj))
        return gs_errf(e, GS_EINVAL, "%s: must be an object", field);
    json_object_foreach(obj, key, v) {
        char f[320], buf[32];
        const char *s;
        int64_t x;
        snprintf(f, sizeof f, "%s.%s", field, key);
        if (allow_model && strcmp(key, "model") == 0) {
            if (!json_is_string(v) || json_string_length(v) == 0)
                return gs_errf(e, GS_EINVAL, "%s: must be a non-empty string", f);
            if (json_string_length(v) >= CORE_MODEL_MAX)
                return gs_errf(e, GS_EINVAL, "%s: longer than %d characters", f,
                               CORE_MODEL_MAX - 1);
            strcpy(model, json_string_value(v));
            continue;
        }
        int which = strcmp(key, "gpus") == 0 ? 0 : strcmp(key, "memory") == 0 ? 1
                  : strcmp(key, "compute") == 0 ? 2 : -1;
        if (which < 0)
            return gs_errf(e, GS_EINVAL, "%s: unknown field (expected %sgpus, memory, compute)",
                           f, allow_model ? "model, " : "");
        if (json_is_integer(v)) {
            snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
            s = buf;
        } else if (json_is_real(v)) { /* YAML's plain 2.5 */
            snprintf(buf, sizeof buf, "%.15g", json_real_value(v));
            s = buf;
        } else if (json_is_string(v)) {
            s = json_string_value(v);
        } else {
            return gs_errf(e, GS_EINVAL, "%s: must be a quantity such as 4, \"64Gi\" or \"2.5\"",
                           f);
        }
        if (core_quantity_parse(s, which == 1 ? 1 : 1000, &x, f, e) < 0)
            return -GS_EINVAL;
        if (which == 0) {
            if (x % 1000)
                return gs_errf(e, GS_EINVAL, "%s: '%s' is not a whole number of GPUs", f, s);
            l->gpus = x / 1000;
        } else if (which == 1) {
            l->mem_mib = x / MIB; /* a limit rounds down: never more than written */
        } else {
            l->milli = x;
        }
    }
    return 0;
}

static int has_limit(const struct core_quota_limits *l)
{
    return l->gpus != CORE_QUOTA_NONE || l->mem_mib != CORE_QUOTA_NONE ||
           l->milli != CORE_QUOTA_NONE;
}

static int copy_name(char *dst, size_t cap, json_t *v, const char *field, struct gs_err *e)
{
    if (!json_is_string(v) || json_string_length(v) == 0)
        return gs_errf(e, GS_EINVAL, "%s: missing", field);
    if (json_string_length(v) >= cap)
        return gs_errf(e, GS_EINVAL, "%s: longer than %zu characters", field, cap - 1);
    strcpy(dst, json_string_value(v));
    return 0;
}

int core_quota_parse(const json_t *obj, struct core_quota *q, struct gs_err *e)
{
    json_t *o = (json_t *)obj, *meta, *spec, *models, *m;
    const char *av, *kind;
    size_t i;

    memset(q, 0, sizeof *q);
    q->total.gpus = q->total.mem_mib = q->total.milli = CORE_QUOTA_NONE;
    if (!json_is_object(o))
        return gs_errf(e, GS_EINVAL, "GPUQuota: must be an object");
    kind = json_string_value(json_object_get(o, "kind"));
    av = json_string_value(json_object_get(o, "apiVersion"));
    if (!kind || strcmp(kind, "GPUQuota") != 0)
        return gs_errf(e, GS_EINVAL, "kind: '%.64s' is not GPUQuota", kind ? kind : "");
    if (!av || strncmp(av, "gpusched.io/", 12) != 0)
        return gs_errf(e, GS_EINVAL, "apiVersion: '%.64s' is not in group gpusched.io",
                       av ? av : "");
    meta = json_object_get(o, "metadata");
    if (copy_name(q->name, sizeof q->name, json_object_get(meta, "name"), "metadata.name", e) <
            0 ||
        copy_name(q->ns, sizeof q->ns, json_object_get(meta, "namespace"), "metadata.namespace",
                  e) < 0)
        goto fail;
    spec = json_object_get(o, "spec");
    if (!json_is_object(spec)) {
        gs_errf(e, GS_EINVAL, "spec: missing");
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(spec, key, v) {
        if (strcmp(key, "total") != 0 && strcmp(key, "models") != 0) {
            gs_errf(e, GS_EINVAL, "spec.%s: unknown field (expected total, models)", key);
            goto fail;
        }
    }
    if (json_object_get(spec, "total") &&
        parse_limits(json_object_get(spec, "total"), "spec.total", 0, &q->total, NULL, e) < 0)
        goto fail;
    models = json_object_get(spec, "models");
    if (models && !json_is_array(models)) {
        gs_errf(e, GS_EINVAL, "spec.models: must be a list");
        goto fail;
    }
    if (json_array_size(models) > CORE_QUOTA_MAX_MODELS) {
        gs_errf(e, GS_EINVAL, "spec.models: more than %d entries", CORE_QUOTA_MAX_MODELS);
        goto fail;
    }
    json_array_foreach(models, i, m) {
        char f[64];
        struct core_quota_model *qm = &q->models[i];
        snprintf(f, sizeof f, "spec.models[%zu]", i);
        if (parse_limits(m, f, 1, &qm->lim, qm->model, e) < 0)
            goto fail;
        if (!qm->model[0]) {
            gs_errf(e, GS_EINVAL, "%s.model: missing", f);
            goto fail;
        }
        if (!has_limit(&qm->lim)) {
            gs_errf(e, GS_EINVAL, "%s: sets no limit (gpus, memory or compute)", f);
            goto fail;
        }
        for (size_t k = 0; k < i; k++)
            if (strcasecmp(q->models[k].model, qm->model) == 0) {
                gs_errf(e, GS_EINVAL, "%s.model: '%s' is listed twice", f, qm->model);
                goto fail;
            }
        q->n_models++;
    }
    if (!has_limit(&q->total) && q->n_models == 0) {
        gs_errf(e, GS_EINVAL, "spec: sets no limit (spec.total or spec.models)");
        goto fail;
    }
    return 0;
fail:
    {
        char ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
        snprintf(ns, sizeof ns, "%s", q->ns);
        snprintf(name, sizeof name, "%s", q->name);
        if (name[0])
            gs_err_prefix(e, "GPUQuota %s/%s", ns[0] ? ns : "?", name);
    }
    return -GS_EINVAL;
}

/* ---- lists of GPUQuota objects --------------------------------------------- */

int core_quota_parse_doc(const json_t *doc, struct core_quota **out, int *n,
                         core_quota_bad_fn bad, void *ud, struct gs_err *e)
{
    const json_t *items = NULL;
    size_t i, total;

    *out = NULL;
    *n = 0;
    if (json_is_array(doc))
        items = doc;
    else if (json_is_object(doc) && json_is_array(json_object_get(doc, "items")))
        items = json_object_get(doc, "items");
    else if (!json_is_object(doc) || !json_object_get(doc, "kind"))
        return gs_errf(e, GS_EINVAL, "expected a list of GPUQuota objects");
    total = items ? json_array_size(items) : 1;
    struct core_quota *qs = calloc(total ? total : 1, sizeof *qs);
    if (!qs)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    for (i = 0; i < total; i++) {
        struct gs_err qe = GS_ERR_INIT;
        const json_t *obj = items ? json_array_get(items, i) : doc;
        if (core_quota_parse(obj, &qs[*n], &qe) < 0) {
            if (bad)
                bad(ud, (int)i, &qe);
            continue;
        }
        (*n)++;
    }
    *out = qs;
    return 0;
}

/* ---- the set: quotas and usage --------------------------------------------- */

struct usage {
    char ns[CORE_NAME_MAX];
    char model[CORE_MODEL_MAX];
    struct core_quota_limits used;
};

struct core_quotas {
    struct core_quota *q;
    int n, cap;
    struct usage *u;
    int nu, capu;
    int *slot;       /* open-addressing index into u by (ns, model); -1 = empty */
    int nslot;       /* power of two, > 2 * nu */
};

struct core_quotas *core_quotas_new(void) { return calloc(1, sizeof(struct core_quotas)); }

void core_quotas_free(struct core_quotas *s)
{
    if (!s)
        return;
    free(s->q);
    free(s->u);
    free(s->slot);
    free(s);
}

int core_quotas_count(const struct core_quotas *s) { return s->n; }

int core_quotas_put(struct core_quotas *s, const struct core_quota *q, struct gs_err *e)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->q[i].ns, q->ns) == 0 && strcmp(s->q[i].name, q->name) == 0) {
            s->q[i] = *q;
            return 0;
        }
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        struct core_quota *nq = realloc(s->q, (size_t)cap * sizeof *nq);
        if (!nq)
            return gs_errf(e, GS_ENOMEM, "out of memory");
        s->q = nq;
        s->cap = cap;
    }
    s->q[s->n++] = *q;
    return 0;
}

int core_quotas_remove(struct core_quotas *s, const char *ns, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->q[i].ns, ns) == 0 && strcmp(s->q[i].name, name) == 0) {
            memmove(&s->q[i], &s->q[i + 1], (size_t)(s->n - i - 1) * sizeof *s->q);
            s->n--;
            return 0;
        }
    return -GS_ENOENT;
}

static unsigned usage_hash(const char *ns, const char *model)
{
    unsigned h = 2166136261u;
    for (const char *p = ns; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ '/') * 16777619u;
    for (const char *p = model; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

static int *slot_of(const struct core_quotas *s, const char *ns, const char *model)
{
    unsigned m = (unsigned)s->nslot - 1, i = usage_hash(ns, model) & m;
    while (s->slot[i] >= 0) {
        const struct usage *u = &s->u[s->slot[i]];
        if (strcmp(u->ns, ns) == 0 && strcmp(u->model, model) == 0)
            break;
        i = (i + 1) & m;
    }
    return &s->slot[i];
}

static int reindex(struct core_quotas *s, int nslot)
{
    int *slot = malloc((size_t)nslot * sizeof *slot);
    if (!slot)
        return -1;
    free(s->slot);
    s->slot = slot;
    s->nslot = nslot;
    memset(slot, 0xff, (size_t)nslot * sizeof *slot);
    for (int i = 0; i < s->nu; i++)
        *slot_of(s, s->u[i].ns, s->u[i].model) = i;
    return 0;
}

/* Usage of (ns, model), created at zero when new. O(1) expected: the
 * extender recounts every allocation while it holds its lock. */
static struct usage *usage_get(struct core_quotas *s, const char *ns, const char *model,
                               struct gs_err *e)
{
    if (s->nslot < 2 * (s->nu + 1) && reindex(s, s->nslot ? 2 * s->nslot : 64) < 0) {
        gs_errf(e, GS_ENOMEM, "out of memory");
        return NULL;
    }
    int *slot = slot_of(s, ns, model);
    if (*slot >= 0)
        return &s->u[*slot];
    if (s->nu == s->capu) {
        int cap = s->capu ? s->capu * 2 : 16;
        struct usage *nu = realloc(s->u, (size_t)cap * sizeof *nu);
        if (!nu) {
            gs_errf(e, GS_ENOMEM, "out of memory");
            return NULL;
        }
        s->u = nu;
        s->capu = cap;
    }
    struct usage *u = &s->u[s->nu];
    memset(u, 0, sizeof *u);
    snprintf(u->ns, sizeof u->ns, "%s", ns);
    snprintf(u->model, sizeof u->model, "%s", model);
    *slot = s->nu++;
    return u;
}

int core_quotas_charge(struct core_quotas *s, const char *ns, const struct core_quota_use *u,
                       int n, int sign, struct gs_err *e)
{
    for (int i = 0; i < n; i++) {
        struct usage *x = usage_get(s, ns, u[i].model, e);
        if (!x)
            return -GS_ENOMEM;
        int64_t k = sign < 0 ? -1 : 1;
        x->used.gpus += k * u[i].gpus;
        x->used.mem_mib += k * u[i].mem_mib;
        x->used.milli += k * u[i].milli;
        /* releasing more than was charged (a pod seen twice) clamps at zero */
        if (x->used.gpus < 0)
            x->used.gpus = 0;
        if (x->used.mem_mib < 0)
            x->used.mem_mib = 0;
        if (x->used.milli < 0)
            x->used.milli = 0;
    }
    return 0;
}

void core_quotas_reset_usage(struct core_quotas *s)
{
    s->nu = 0;
    if (s->slot)
        memset(s->slot, 0xff, (size_t)s->nslot * sizeof *s->slot);
}

static int model_covered(const char *limit_model, const char *model)
{
    return !limit_model || !limit_model[0] || strcasestr(model, limit_model) != NULL;
}

/* Usage of `ns` over the models a limit covers (NULL/"" = all). */
static struct core_quota_limits used_of(const struct core_quotas *s, const char *ns,
                                        const char *limit_model)
{
    struct core_quota_limits t = {0, 0, 0};
    for (int i = 0; i < s->nu; i++) {
        if (strcmp(s->u[i].ns, ns) != 0 || !model_covered(limit_model, s->u[i].model))
            continue;
        t.gpus += s->u[i].used.gpus;
        t.mem_mib += s->u[i].used.mem_mib;
        t.milli += s->u[i].used.milli;
    }
    return t;
}

void core_quota_fmt_mib(int64_t mib, char *buf, size_t cap)
{
    if (mib >= 1024 && mib % 1024 == 0)
        snprintf(buf, cap, "%lldGi", (long long)(mib / 1024));
    else
        snprintf(buf, cap, "%lldMi", (long long)mib);
}

void core_quota_fmt_milli(int64_t milli, char *buf, size_t cap)
{
    if (milli % 1000 == 0)
        snprintf(buf, cap, "%lld", (long long)(milli / 1000));
    else
        snprintf(buf, cap, "%lld.%03lld", (long long)(milli / 1000), (long long)(milli % 1000));
    /* trim trailing zeros of the fraction: "2.500" -> "2.5" */
    char *dot = strchr(buf, '.');
    if (dot) {
        char *end = buf + strlen(buf) - 1;
        while (end > dot && *end == '0')
            *end-- = '\0';
    }
}

/* Checks one limit set against used + asked; fills the reason on excess. */
static int over(const struct core_quota *q, const char *model,
                const struct core_quota_limits *lim, const struct core_quota_limits *used,
                const struct core_quota_limits *ask, struct gs_err *e)
{
    static const char *const what[] = {"whole GPUs", "GPU memory", "GPU compute (GPUs)"};
    const int64_t l[3] = {lim->gpus, lim->mem_mib, lim->milli};
    const int64_t u[3] = {used->gpus, used->mem_mib, used->milli};
    const int64_t a[3] = {ask->gpus, ask->mem_mib, ask->milli};

    for (int i = 0; i < 3; i++) {
        char sl[32], su[32], sa[32];
        if (l[i] == CORE_QUOTA_NONE || a[i] == 0 || u[i] + a[i] <= l[i])
            continue;
        if (i == 0) {
            snprintf(sl, sizeof sl, "%lld", (long long)l[i]);
            snprintf(su, sizeof su, "%lld", (long long)u[i]);
            snprintf(sa, sizeof sa, "%lld", (long long)a[i]);
        } else if (i == 1) {
            core_quota_fmt_mib(l[i], sl, sizeof sl);
            core_quota_fmt_mib(u[i], su, sizeof su);
            core_quota_fmt_mib(a[i], sa, sizeof sa);
        } else {
            core_quota_fmt_milli(l[i], sl, sizeof sl);
            core_quota_fmt_milli(u[i], su, sizeof su);
            core_quota_fmt_milli(a[i], sa, sizeof sa);
        }
        return gs_errf(e, GS_ENOFIT,
                       "GPUQuota %s/%s: %s%s%s: the pod asks for %s, %s already in use, "
                       "limit %s",
                       q->ns, q->name, what[i], model ? " on " : "", model ? model : "", sa, su,
                       sl);
    }
    return 0;
}

int core_quotas_check(const struct core_quotas *s, const char *ns,
                      const struct core_quota_use *u, int n, struct gs_err *e)
{
    for (int i = 0; i < s->n; i++) {
        const struct core_quota *q = &s->q[i];
        if (strcmp(q->ns, ns) != 0)
            continue;
        struct core_quota_limits ask = {0, 0, 0}, used = used_of(s, ns, NULL);
        for (int k = 0; k < n; k++) {
            ask.gpus += u[k].gpus;
            ask.mem_mib += u[k].mem_mib;
            ask.milli += u[k].milli;
        }
        if (over(q, NULL, &q->total, &used, &ask, e) < 0)
            return -GS_ENOFIT;
        for (int m = 0; m < q->n_models; m++) {
            const struct core_quota_model *qm = &q->models[m];
            struct core_quota_limits mask = {0, 0, 0};
            for (int k = 0; k < n; k++) {
                if (!model_covered(qm->model, u[k].model))
                    continue;
                mask.gpus += u[k].gpus;
                mask.mem_mib += u[k].mem_mib;
                mask.milli += u[k].milli;
            }
            struct core_quota_limits mused = used_of(s, ns, qm->model);
            if (over(q, qm->model, &qm->lim, &mused, &mask, e) < 0)
                return -GS_ENOFIT;
        }
    }
    return 0;
}

void core_quota_use_of(const struct core_request *req, const char *model, int64_t gpu_mem_mib,
                       struct core_quota_use *u)
{
    memset(u, 0, sizeof *u);
    snprintf(u->model, sizeof u->model, "%s", model ? model : "");
    switch (req->kind) {
    case CORE_REQ_WHOLE:
        u->gpus = req->num_gpu;
        u->mem_mib = (int64_t)req->num_gpu * gpu_mem_mib;
        u->milli = (int64_t)req->num_gpu * CORE_MILLI;
        break;
    case CORE_REQ_SHARED:
        u->mem_mib = (int64_t)req->num_gpu * req->mem_mib;
        u->milli = (int64_t)req->num_gpu * req->milli;
        break;
    case CORE_REQ_MIG:
    case CORE_REQ_NONE:
        break;
    }
}

int core_quota_use_of_alloc(const struct core_cluster *c, const struct core_alloc *a,
                            struct core_quota_use *out)
{
    const struct core_node *n = core_cluster_find(c, a->node);
    int k = 0;

    if (!n)
        return -GS_ENOENT;
    for (int i = 0; i < a->n && i < CORE_MAX_GPUS; i++) {
        if (a->gpu[i] < 0 || a->gpu[i] >= n->n_gpus)
            continue;
        const struct core_gpu *g = &n->gpus[a->gpu[i]];
        int j;
        for (j = 0; j < k; j++)
            if (strcmp(out[j].model, g->model) == 0)
                break;
        if (j == k) {
            size_t len = strnlen(g->model, sizeof out[k].model - 1);
            memcpy(out[k].model, g->model, len);
            out[k].model[len] = '\0';
            out[k].gpus = out[k].mem_mib = out[k].milli = 0;
            k++;
        }
        if (a->kind == CORE_REQ_WHOLE)
            out[j].gpus++;
        out[j].mem_mib += a->mem_mib[i];
        if (a->kind != CORE_REQ_MIG)
            out[j].milli += a->milli[i];
    }
    return k;
}

/* Whether GPU g has a MIG instance of that profile (MIG layouts differ
 * from GPU to GPU: the one that holds the profile says its memory). */
static int has_profile(const struct core_gpu *g, const char *profile)
{
    for (int i = 0; i < g->n_mig; i++)
        if (strcmp(g->mig[i].profile, profile) == 0)
            return 1;
    return 0;
}

void core_quota_use_on_node(const struct core_request *req, const struct core_node *n,
                            struct core_quota_use *u)
{
    const struct core_gpu *pick = NULL;
    for (int g = 0; g < n->n_gpus && !pick; g++)
        if (core_request_model_ok(req, n->gpus[g].model) &&
            (req->kind == CORE_REQ_MIG) == (n->gpus[g].mig_enabled != 0) &&
            (req->kind != CORE_REQ_MIG || has_profile(&n->gpus[g], req->mig_profile)))
            pick = &n->gpus[g];
    if (!pick && n->n_gpus > 0)
        pick = &n->gpus[0];
    core_quota_use_of(req, pick ? pick->model : "", pick ? pick->mem_mib : 0, u);
    if (req->kind == CORE_REQ_MIG && pick)
        for (int i = 0; i < pick->n_mig; i++)
            if (strcmp(pick->mig[i].profile, req->mig_profile) == 0) {
                u->mem_mib = (int64_t)req->mig_count * pick->mig[i].mem_mib;
                break;
            }
}

int core_quotas_recount(struct core_quotas *s, const struct core_cluster *c, const char *only,
                        struct gs_err *e)
{
    size_t olen = only ? strlen(only) : 0;

    core_quotas_reset_usage(s);
    for (int i = 0; i < core_cluster_alloc_count(c); i++) {
        const struct core_alloc *a = core_cluster_alloc(c, i);
        struct core_quota_use u[CORE_MAX_GPUS];
        char ns[CORE_NAME_MAX];
        if (only && (strncmp(a->pod_name, only, olen) != 0 || a->pod_name[olen] != '/'))
            continue;
        int k = core_quota_use_of_alloc(c, a, u);
        size_t nl = strcspn(a->pod_name, "/");
        if (nl >= sizeof ns)
            nl = sizeof ns - 1;
        memcpy(ns, a->pod_name, nl);
        ns[nl] = '\0';
        if (k > 0 && core_quotas_charge(s, ns, u, k, 1, e) < 0)
            return -GS_ENOMEM;
    }
    return 0;
}

int core_quotas_has(const struct core_quotas *s, const char *ns)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->q[i].ns, ns) == 0)
            return 1;
    return 0;
}

int core_quotas_admit(const struct core_quotas *s, const char *ns,
                      const struct core_request *req, int64_t gpu_mem_mib, struct gs_err *e)
{
    struct core_quota_use u;
    const struct core_quota_limits zero = {0, 0, 0};

    core_quota_use_of(req, NULL, gpu_mem_mib, &u);
    struct core_quota_limits ask = {u.gpus, u.mem_mib, u.milli};
    for (int i = 0; i < s->n; i++) {
        const struct core_quota *q = &s->q[i];
        if (strcmp(q->ns, ns) != 0)
            continue;
        if (over(q, NULL, &q->total, &zero, &ask, e) < 0)
            return -GS_ENOFIT;
        if (req->n_types == 0)
            continue;
        /* refused only if every type the pod accepts is capped below its ask */
        int blocked = 0;
        struct gs_err first = GS_ERR_INIT;
        for (int t = 0; t < req->n_types; t++) {
            int hit = 0;
            for (int m = 0; m < q->n_models && !hit; m++) {
                const struct core_quota_model *qm = &q->models[m];
                struct gs_err me = GS_ERR_INIT;
                if (!strcasestr(req->types[t], qm->model))
                    continue;
                if (over(q, qm->model, &qm->lim, &zero, &ask, &me) < 0) {
                    hit = 1;
                    if (!first.code)
                        first = me;
                }
            }
            blocked += hit;
        }
        if (blocked == req->n_types) {
            if (e)
                *e = first;
            return -GS_ENOFIT;
        }
    }
    return 0;
}

void core_quotas_foreach(const struct core_quotas *s,
                         void (*fn)(void *ud, const struct core_quota_row *row), void *ud)
{
    for (int i = 0; i < s->n; i++) {
        const struct core_quota *q = &s->q[i];
        struct core_quota_row r = {q->ns, q->name, "", q->total, used_of(s, q->ns, NULL)};
        fn(ud, &r);
        for (int m = 0; m < q->n_models; m++) {
            r.model = q->models[m].model;
            r.limit = q->models[m].lim;
            r.used = used_of(s, q->ns, r.model);
            fn(ud, &r);
        }
    }
}

void core_quotas_foreach_usage(const struct core_quotas *s,
                               void (*fn)(void *ud, const char *ns, const char *model,
                                          const struct core_quota_limits *used),
                               void *ud)
{
    for (int i = 0; i < s->nu; i++)
        fn(ud, s->u[i].ns, s->u[i].model, &s->u[i].used);
}
