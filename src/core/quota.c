/* core/quota.c - see quota.h. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "core/cluster.h"
#include "core/quota.h"

#define MIB (1024 * 1024)
#define QUOTA_MAX_DOC (4u << 20)  /* quota file size */
#define YAML_MAX_NODES 200000     /* JSON values built from one YAML file */
#define YAML_MAX_DEPTH 64

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

/* ---- quota files: JSON, or YAML converted to JSON values ---------------------- */

struct yconv {
    yaml_document_t *doc;
    long nodes;
    struct gs_err *e;
};

static json_t *yaml_scalar(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    const char *tag = n->tag ? (const char *)n->tag : "";

    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || strcmp(tag, YAML_STR_TAG) == 0)
        return json_stringn(s, len);
    if (len == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
        strcmp(s, "NULL") == 0)
        return json_null();
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
        return json_true();
    if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
        return json_false();
    /* plain integers stay integers; anything else (16Gi, 2.5) stays a string,
     * which every quantity field accepts */
    const char *p = s + (*s == '-' || *s == '+');
    size_t digits = strspn(p, "0123456789");
    if (digits && digits <= 18 && p[digits] == '\0')
        return json_integer(strtoll(s, NULL, 10));
    return json_stringn(s, len);
}

static json_t *yaml_to_json(struct yconv *c, yaml_node_t *n, int depth)
{
    json_t *out;

    if (!n) {
        gs_errf(c->e, GS_EINVAL, "YAML: dangling node");
        return NULL;
    }
    if (++c->nodes > YAML_MAX_NODES || depth > YAML_MAX_DEPTH) {
        gs_errf(c->e, GS_ETOOBIG, "YAML: more than %d values or %d levels (aliases expanding?)",
                YAML_MAX_NODES, YAML_MAX_DEPTH);
        return NULL;
    }
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return yaml_scalar(n);
    case YAML_SEQUENCE_NODE:
        out = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             out && it < n->data.sequence.items.top; it++) {
            json_t *v = yaml_to_json(c, yaml_document_get_node(c->doc, *it), depth + 1);
            if (!v || json_array_append_new(out, v) < 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    case YAML_MAPPING_NODE:
        out = json_object();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
             out && p < n->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE) {
                gs_errf(c->e, GS_EINVAL, "YAML line %lu: mapping keys must be scalars",
                        k ? (unsigned long)k->start_mark.line + 1 : 0UL);
                json_decref(out);
                return NULL;
            }
            json_t *v = yaml_to_json(c, yaml_document_get_node(c->doc, p->value), depth + 1);
            if (!v || json_object_set_new(out, (const char *)k->data.scalar.value, v) < 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    case YAML_NO_NODE:
        break;
    }
    return json_null();
}

/* Every YAML document of the text as one JSON array of documents. */
static json_t *yaml_docs(const char *text, size_t len, struct gs_err *e)
{
    yaml_parser_t p;
    json_t *docs = json_array();
    struct yconv c = {NULL, 0, e};

    if (!docs || !yaml_parser_initialize(&p)) {
        json_decref(docs);
        gs_errf(e, GS_ENOMEM, "out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    for (;;) {
        yaml_document_t doc;
        if (!yaml_parser_load(&p, &doc)) {
            gs_errf(e, GS_EINVAL, "YAML line %lu: %s", (unsigned long)p.problem_mark.line + 1,
                    p.problem ? p.problem : "syntax error");
            json_decref(docs);
            docs = NULL;
            break;
        }
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (!root) {
            yaml_document_delete(&doc);
            break;
        }
        c.doc = &doc;
        json_t *v = yaml_to_json(&c, root, 0);
        yaml_document_delete(&doc);
        if (!v) {
            json_decref(docs);
            docs = NULL;
            break;
        }
        if (!json_is_null(v))
            json_array_append_new(docs, v);
        else
            json_decref(v);
    }
    yaml_parser_delete(&p);
    return docs;
}

int core_quota_parse_doc(const char *text, size_t len, struct core_quota **out, int *n,
                         core_quota_bad_fn bad, void *ud, struct gs_err *e)
{
    json_t *root, *items = NULL;
    size_t i, skip = 0;

    *out = NULL;
    *n = 0;
    if (len > QUOTA_MAX_DOC)
        return gs_errf(e, GS_ETOOBIG, "quota file larger than %u bytes", QUOTA_MAX_DOC);
    while (skip < len && isspace((unsigned char)text[skip]))
        skip++;
    if (skip < len && (text[skip] == '[' || text[skip] == '{')) {
        json_error_t je;
        root = json_loadb(text, len, 0, &je);
        if (!root)
            return gs_errf(e, GS_EINVAL, "JSON line %d: %s", je.line, je.text);
    } else {
        json_t *docs = yaml_docs(text, len, e);
        if (!docs)
            return -GS_EINVAL;
        /* one document holding a list or a List, or several objects */
        if (json_array_size(docs) == 1 && !json_is_object(json_array_get(docs, 0))) {
            root = json_incref(json_array_get(docs, 0));
            json_decref(docs);
        } else if (json_array_size(docs) == 1 &&
                   json_object_get(json_array_get(docs, 0), "items")) {
            root = json_incref(json_array_get(docs, 0));
            json_decref(docs);
        } else {
            root = docs;
        }
    }
    if (json_is_array(root))
        items = root;
    else if (json_is_object(root) && json_is_array(json_object_get(root, "items")))
        items = json_object_get(root, "items");
    else if (json_is_object(root) && json_object_get(root, "kind"))
        items = NULL; /* a single object */
    else {
        json_decref(root);
        return gs_errf(e, GS_EINVAL, "quota file: expected a list of GPUQuota objects");
    }
    size_t total = items ? json_array_size(items) : 1;
    struct core_quota *qs = calloc(total ? total : 1, sizeof *qs);
    if (!qs) {
        json_decref(root);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    for (i = 0; i < total; i++) {
        struct gs_err qe = GS_ERR_INIT;
        const json_t *obj = items ? json_array_get(items, i) : root;
        if (core_quota_parse(obj, &qs[*n], &qe) < 0) {
            if (bad)
                bad(ud, (int)i, &qe);
            continue;
        }
        (*n)++;
    }
    json_decref(root);
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
};

struct core_quotas *core_quotas_new(void) { return calloc(1, sizeof(struct core_quotas)); }

void core_quotas_free(struct core_quotas *s)
{
    if (!s)
        return;
    free(s->q);
    free(s->u);
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

static struct usage *usage_get(struct core_quotas *s, const char *ns, const char *model,
                               struct gs_err *e)
{
    for (int i = 0; i < s->nu; i++)
        if (strcmp(s->u[i].ns, ns) == 0 && strcmp(s->u[i].model, model) == 0)
            return &s->u[i];
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
    struct usage *u = &s->u[s->nu++];
    memset(u, 0, sizeof *u);
    snprintf(u->ns, sizeof u->ns, "%s", ns);
    snprintf(u->model, sizeof u->model, "%s", model);
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

void core_quotas_reset_usage(struct core_quotas *s) { s->nu = 0; }

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
            memset(&out[k], 0, sizeof out[k]);
            snprintf(out[k].model, sizeof out[k].model, "%s", g->model);
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

int core_quotas_admit(const struct core_quotas *s, const char *ns,
                      const struct core_request *req, struct gs_err *e)
{
    struct core_quota_use u;
    const struct core_quota_limits zero = {0, 0, 0};

    core_quota_use_of(req, NULL, 0, &u);
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
