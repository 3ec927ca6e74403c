/*
 * core/request.c - see request.h.
 *
 * Three parts: Kubernetes quantities (exact integer arithmetic, no floating
 * point), one container's GPU request in any of DESIGN.md's forms, and the
 * pod around it (containers summed as the kubelet sums them, node
 * selection, tolerations, gpusched.io annotations).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/request.h"

#include "core/cluster.h"
#include "core/policy.h"

#define MIB (1024 * 1024)
#define QTY_MAX_LEN 64
#define QTY_MAX_DIGITS 30 /* significant digits; 10^30 < 2^100 */
#define QTY_MAX_EXP 60    /* |decimal exponent| from "e<n>" */
#define CORE_MAX_MEM_MIB (4LL << 20) /* 4 TiB per GPU: larger than any GPU */

typedef unsigned __int128 u128;

const struct core_names *core_names_default(void)
{
#define R CORE_RES_PREFIX_DEFAULT
    static const struct core_names n = {
        R "gpu", R "gpu-memory", R "gpu-cores", R "vcuda-core", R "vcuda-memory", R "mig-",
        CORE_ANNOT_PREFIX_DEFAULT,
    };
#undef R
    return &n;
}

int core_prefix_check(const char *what, const char *prefix, size_t max, struct gs_err *e)
{
    size_t n = strlen(prefix), host = n ? n - 1 : 0;
    if (n < 2 || n > max || prefix[host] != '/' ||
        strspn(prefix, "abcdefghijklmnopqrstuvwxyz0123456789-.") != host ||
        !isalnum((unsigned char)prefix[0]) || !isalnum((unsigned char)prefix[host - 1]))
        return gs_errf(e, GS_EINVAL,
                       "%s '%.*s': must be a DNS subdomain followed by '/' (lower-case "
                       "letters, digits, '-' and '.', like 'example.com/'), at most %zu "
                       "characters", what, n > 80 ? 80 : (int)n, prefix, max);
    return 0;
}

int core_names_prefixed(struct core_names_store *st, const char *res_prefix,
                        const char *annot_prefix, struct gs_err *e)
{
    const struct core_names *d = core_names_default();
    const char *def[6] = {d->gpu, d->gpu_memory, d->gpu_cores,
                          d->vcuda_core, d->vcuda_memory, d->mig_prefix};
    size_t n = strlen(res_prefix);
    if (core_prefix_check("resource prefix", res_prefix, CORE_RES_PREFIX_MAX, e) < 0 ||
        core_prefix_check("annotation prefix", annot_prefix, CORE_ANNOT_PREFIX_MAX, e) < 0)
        return -GS_EINVAL;
    /* kubelet takes a name with "kubernetes.io/" for a native resource and
     * refuses a device plugin's */
    if (n >= 14 && strcmp(res_prefix + n - 14, "kubernetes.io/") == 0)
        return gs_errf(e, GS_EINVAL, "resource prefix '%s': the kubernetes.io domain is "
                       "Kubernetes' own; extended resources need another", res_prefix);
    for (int i = 0; i < 6; i++)
        snprintf(st->res[i], sizeof st->res[i], "%s%s", res_prefix,
                 def[i] + strlen(CORE_RES_PREFIX_DEFAULT));
    snprintf(st->annot, sizeof st->annot, "%s", annot_prefix);
    st->names = (struct core_names){st->res[0], st->res[1], st->res[2], st->res[3],
                                    st->res[4], st->res[5], st->annot};
    return 0;
}

/* ---- quantities ----------------------------------------------------------- */

struct suffix {
    const char *s;
    int e10, e2;
};

static const struct suffix suffixes[] = {
    {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50}, {"Ei", 0, 60},
    {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},  {"k", 3, 0},   {"M", 6, 0},   {"G", 9, 0},
    {"T", 12, 0},  {"P", 15, 0},  {"E", 18, 0},  {NULL, 0, 0},
};

static int mul_ok(u128 *v, u128 m)
{
    if (*v && m > ~(u128)0 / *v)
        return 0;
    *v *= m;
    return 1;
}

int core_quantity_parse(const char *s, int64_t scale, int64_t *out, const char *field,
                        struct gs_err *e)
{
    const char *p = s;
    u128 n = 0, v;
    int digits = 0, nfrac = 0, any = 0, e10 = 0, e2 = 0;
    size_t len;

    if (!s)
        return gs_errf(e, GS_EINVAL, "%s: missing quantity", field);
    len = strnlen(s, QTY_MAX_LEN + 1);
    if (len == 0)
        return gs_errf(e, GS_EINVAL, "%s: empty quantity", field);
    if (len > QTY_MAX_LEN)
        return gs_errf(e, GS_EINVAL, "%s: quantity longer than %d characters", field,
                       QTY_MAX_LEN);
    if (scale < 1)
        return gs_errf(e, GS_EINVAL, "%s: bad scale %lld", field, (long long)scale);
    if (*p == '-')
        return gs_errf(e, GS_EINVAL, "%s: '%s' is negative", field, s);
    if (*p == '+')
        p++;
    for (int frac = 0;; p++) {
        if (*p == '.' && !frac) {
            frac = 1;
            continue;
        }
        if (*p < '0' || *p > '9')
            break;
        any = 1;
        if (n == 0 && *p == '0') { /* leading zeros carry no digits */
            nfrac += frac;
            continue;
        }
        if (++digits > QTY_MAX_DIGITS)
            return gs_errf(e, GS_EINVAL, "%s: '%s' has more than %d significant digits", field,
                           s, QTY_MAX_DIGITS);
        n = n * 10 + (u128)(*p - '0');
        nfrac += frac;
    }
    if (!any)
        return gs_errf(e, GS_EINVAL, "%s: '%s' is not a quantity (expected a number such as "
                                     "'2', '500m' or '16Gi')", field, s);
    if (*p == 'e' || (*p == 'E' && (p[1] == '-' || p[1] == '+' || isdigit((unsigned char)p[1])))) {
        char *end;
        long x;
        p++;
        if (!(*p == '-' || *p == '+' || isdigit((unsigned char)*p)) ||
            !isdigit((unsigned char)p[*p == '-' || *p == '+']))
            return gs_errf(e, GS_EINVAL, "%s: '%s' has a malformed exponent", field, s);
        x = strtol(p, &end, 10);
        if (end - p > 4 || x > QTY_MAX_EXP || x < -QTY_MAX_EXP)
            return gs_errf(e, GS_EINVAL, "%s: '%s' has an exponent out of range -%d..%d", field,
                           s, QTY_MAX_EXP, QTY_MAX_EXP);
        e10 = (int)x;
        p = end;
    } else if (*p) {
        const struct suffix *sf;
        for (sf = suffixes; sf->s; sf++)
            if (strcmp(p, sf->s) == 0)
                break;
        if (!sf->s)
            return gs_errf(e, GS_EINVAL, "%s: '%s' has an unknown suffix '%s' (expected one of "
                                         "Ki Mi Gi Ti Pi Ei n u m k M G T P E)", field, s, p);
        e10 = sf->e10;
        e2 = sf->e2;
        p += strlen(sf->s);
    }
    if (*p)
        return gs_errf(e, GS_EINVAL, "%s: '%s' has trailing characters '%s'", field, s, p);

    /* value = n * 2^e2 * scale * 10^(e10 - nfrac), rounded up */
    v = n;
    if (!mul_ok(&v, (u128)1 << e2) || !mul_ok(&v, (u128)scale))
        goto overflow;
    int k = nfrac - e10;
    if (k <= 0) {
        for (; k < 0; k++)
            if (!mul_ok(&v, 10))
                goto overflow;
    } else if (k >= 39) { /* 10^39 > 2^128 > v: any nonzero value rounds up to 1 */
        v = v ? 1 : 0;
    } else {
        u128 d = 1;
        for (int i = 0; i < k; i++)
            d *= 10;
        v = v / d + (v % d != 0);
    }
    if (v > (u128)INT64_MAX)
        goto overflow;
    *out = (int64_t)v;
    return 0;
overflow:
    return gs_errf(e, GS_EINVAL, "%s: '%s' is too large", field, s);
}

/* ---- containers ---------------------------------------------------------- */

/* One container's GPU request before pod-level summing. */
struct ctr_req {
    enum core_req_kind kind;
    int num_gpu;
    int64_t mem_mib; /* per GPU */
    int milli;       /* per GPU */
    char mig_profile[CORE_MIG_PROFILE_MAX];
    int mig_count;
    int64_t cpu_milli, mem_bytes;
};

/* A container's (or a pod's summed) request as the canonical request. */
static void to_request(const struct ctr_req *r, struct core_request *out)
{
    out->kind = r->kind;
    out->num_gpu = r->kind == CORE_REQ_MIG ? 0 : r->num_gpu;
    out->mem_mib = r->mem_mib;
    out->milli = r->milli;
    memcpy(out->mig_profile, r->mig_profile, sizeof out->mig_profile);
    out->mig_count = r->mig_count;
    out->cpu_milli = r->cpu_milli;
    out->mem_bytes = r->mem_bytes;
}

/* Where a container's resource value came from, for error messages. */
struct rsrc {
    const char *val;  /* the quantity string, NULL when absent */
    const char *from; /* "limits" or "requests" */
};

/* The container's own name, for the end of error messages. */
struct ctx {
    const char *list; /* "containers" / "initContainers" */
    size_t idx;
    const char *name;
    struct gs_err *e;
};

static int cerr(const struct ctx *c, const char *from, const char *res, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int cerr(const struct ctx *c, const char *from, const char *res, const char *fmt, ...)
{
    char msg[384];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (from && res)
        return gs_errf(c->e, GS_EINVAL, "%s[%zu].%s[%s]: %s (container '%s')", c->list, c->idx,
                       from, res, msg, c->name);
    return gs_errf(c->e, GS_EINVAL, "%s[%zu]: %s (container '%s')", c->list, c->idx, msg,
                   c->name);
}

static int qty_field(const struct ctx *c, const char *from, const char *res, const char *val,
                     int64_t scale, int64_t *out)
{
    char field[320];
    snprintf(field, sizeof field, "%s[%zu].%s[%s]", c->list, c->idx, from, res);
    int rc = core_quantity_parse(val, scale, out, field, c->e);
    if (rc < 0 && c->e) { /* callers may pass no error (gs_errf takes NULL) */
        size_t n = strlen(c->e->msg);
        snprintf(c->e->msg + n, sizeof c->e->msg - n, " (container '%s')", c->name);
    }
    return rc;
}

/* A quantity string from a resources map, or a clear error for non-strings
 * (the API server always sends quantities as strings; a bare JSON integer
 * from a hand-written file is accepted too). */
static int rsrc_str(const struct ctx *c, const char *from, const char *res, json_t *v,
                    char *buf, size_t cap, const char **out)
{
    if (json_is_string(v)) {
        *out = json_string_value(v);
        return 0;
    }
    if (json_is_integer(v)) {
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
        *out = buf;
        return 0;
    }
    return cerr(c, from, res, "must be a quantity string such as \"2\" or \"16Gi\"");
}

/* Looks up one resource in limits and requests. Extended resources cannot be
 * overcommitted, so when both are given they must be equal (as the API server
 * requires); limits win, requests alone are accepted. */
static int ext_resource(const struct ctx *c, json_t *limits, json_t *requests, const char *res,
                        int64_t scale, int64_t *out, struct rsrc *r)
{
    char lb[32], rb[32];
    const char *ls = NULL, *rs = NULL;
    json_t *lv = limits ? json_object_get(limits, res) : NULL;
    json_t *rv = requests ? json_object_get(requests, res) : NULL;
    int64_t l = 0, q = 0;

    r->val = NULL;
    r->from = NULL;
    *out = 0;
    if (lv && rsrc_str(c, "limits", res, lv, lb, sizeof lb, &ls) < 0)
        return -GS_EINVAL;
    if (rv && rsrc_str(c, "requests", res, rv, rb, sizeof rb, &rs) < 0)
        return -GS_EINVAL;
    if (ls && qty_field(c, "limits", res, ls, scale, &l) < 0)
        return -GS_EINVAL;
    if (rs && qty_field(c, "requests", res, rs, scale, &q) < 0)
        return -GS_EINVAL;
    if (ls && rs && l != q)
        return cerr(c, "requests", res,
                    "'%s' differs from limits '%s'; extended resources cannot be "
                    "overcommitted, so requests must equal limits", rs, ls);
    if (ls) {
        r->val = ls, r->from = "limits", *out = l;
    } else if (rs) {
        r->val = rs, r->from = "requests", *out = q;
    }
    return 0;
}

/* A count of devices: a whole number in lo..hi. */
static int count_resource(const struct ctx *c, json_t *lim, json_t *req, const char *res,
                          int lo, int hi, int *out, struct rsrc *r)
{
    int64_t m;
    if (ext_resource(c, lim, req, res, 1000, &m, r) < 0)
        return -GS_EINVAL;
    *out = 0;
    if (!r->val)
        return 0;
    if (m % 1000)
        return cerr(c, r->from, res, "'%s' is not a whole number", r->val);
    if (m / 1000 < lo || m / 1000 > hi)
        return cerr(c, r->from, res, "'%s' is out of range %d..%d", r->val, lo, hi);
    *out = (int)(m / 1000);
    return 0;
}

/* MIG profiles look like "1g.10gb", "3g.40gb", "1g.10gb+me". */
static int mig_profile_ok(const char *p)
{
    const char *q = p;
    size_t n = strlen(p);

    if (n == 0 || n >= CORE_MIG_PROFILE_MAX || !isdigit((unsigned char)*q))
        return 0;
    while (isdigit((unsigned char)*q))
        q++;
    if (*q++ != 'g' || *q++ != '.' || !isdigit((unsigned char)*q))
        return 0;
    while (isdigit((unsigned char)*q))
        q++;
    if (*q++ != 'g' || *q++ != 'b')
        return 0;
    if (*q == '+') {
        q++;
        if (!islower((unsigned char)*q))
            return 0;
        while (islower((unsigned char)*q))
            q++;
    }
    return *q == '\0';
}

/* Finds MIG resources among the keys of limits and requests. */
static int mig_resources(const struct ctx *c, const struct core_names *nm, json_t *lim,
                         json_t *req, struct ctr_req *out)
{
    json_t *maps[2] = {lim, req};
    size_t plen = strlen(nm->mig_prefix);

    for (int i = 0; i < 2; i++) {
        const char *key;
        json_t *val;
        if (!maps[i])
            continue;
        json_object_foreach(maps[i], key, val) {
            struct rsrc r;
            int n;
            (void)val;
            if (strncmp(key, nm->mig_prefix, plen) != 0)
                continue;
            const char *prof = key + plen;
            if (!mig_profile_ok(prof))
                return cerr(c, i ? "requests" : "limits", key,
                            "'%s' is not a MIG profile (expected e.g. mig-1g.10gb)", prof);
            if (out->mig_profile[0] && strcmp(out->mig_profile, prof) != 0)
                return cerr(c, i ? "requests" : "limits", key,
                            "asks for MIG profile '%s' and also '%s'; one profile per pod",
                            out->mig_profile, prof);
            if (count_resource(c, lim, req, key, 1, CORE_MAX_GPUS, &n, &r) < 0)
                return -GS_EINVAL;
            snprintf(out->mig_profile, sizeof out->mig_profile, "%s", prof);
            out->mig_count = n;
        }
    }
    if (out->mig_profile[0])
        out->kind = CORE_REQ_MIG;
    return 0;
}


static int ctr_gpu(const struct ctx *c, const struct core_names *nm, json_t *lim, json_t *req,
                   struct ctr_req *out)
{
    struct rsrc rg, rm, rc, rvc, rvm;
    int ngpu, cores, vcore, vmem;
    int64_t mem;

    if (mig_resources(c, nm, lim, req, out) < 0 ||
        count_resource(c, lim, req, nm->gpu, 0, CORE_MAX_GPUS, &ngpu, &rg) < 0 ||
        ext_resource(c, lim, req, nm->gpu_memory, 1, &mem, &rm) < 0 ||
        count_resource(c, lim, req, nm->gpu_cores, 1, 100, &cores, &rc) < 0 ||
        count_resource(c, lim, req, nm->vcuda_core, 1, CORE_MAX_GPUS * 100, &vcore, &rvc) < 0 ||
        count_resource(c, lim, req, nm->vcuda_memory, 1, (int)(CORE_MAX_MEM_MIB / 256), &vmem,
                       &rvm) < 0)
        return -GS_EINVAL;

    /* the first resource of each form, to name in "cannot be combined" */
    const struct rsrc *nv = ngpu > 0 ? &rg : rm.val ? &rm : rc.val ? &rc : NULL;
    const char *nv_name = ngpu > 0 ? nm->gpu : rm.val ? nm->gpu_memory : nm->gpu_cores;
    const struct rsrc *vc = rvc.val ? &rvc : rvm.val ? &rvm : NULL;
    const char *vc_name = rvc.val ? nm->vcuda_core : nm->vcuda_memory;

    if (out->kind == CORE_REQ_MIG && (nv || vc))
        return cerr(c, nv ? nv->from : vc->from, nv ? nv_name : vc_name,
                    "cannot be combined with MIG instances (%s%s) in one container",
                    nm->mig_prefix, out->mig_profile);
    if (nv && vc)
        return cerr(c, vc->from, vc_name,
                    "cannot be combined with %s in one container; use one request form",
                    nv_name);
    if (out->kind == CORE_REQ_MIG)
        return 0;

    if (nv) {
        if (ngpu == 0) {
            const struct rsrc *r = rm.val ? &rm : &rc;
            return cerr(c, r->from, rm.val ? nm->gpu_memory : nm->gpu_cores,
                        "needs %s (the number of GPUs to share) in the same container",
                        nm->gpu);
        }
        out->num_gpu = ngpu;
        if (!rm.val && !rc.val) {
            out->kind = CORE_REQ_WHOLE;
            out->milli = CORE_MILLI;
            return 0;
        }
        out->kind = CORE_REQ_SHARED;
        if (rm.val) {
            if (mem < MIB)
                return cerr(c, rm.from, nm->gpu_memory,
                            "'%s' is less than 1 MiB; plain numbers are bytes (did you "
                            "mean '%sMi'?)", rm.val, rm.val);
            /* ceilings that cannot overflow: mem may be up to INT64_MAX */
            int64_t mib = mem / MIB + (mem % MIB != 0);
            out->mem_mib = mib / ngpu + (mib % ngpu != 0);
            if (out->mem_mib > CORE_MAX_MEM_MIB)
                return cerr(c, rm.from, nm->gpu_memory,
                            "'%s' is %lld MiB per GPU, larger than any GPU", rm.val,
                            (long long)out->mem_mib);
        }
        out->milli = rc.val ? cores * 10 : 0;
        return 0;
    }
    if (vc) {
        if (!rvc.val)
            return cerr(c, rvm.from, nm->vcuda_memory, "needs %s in the same container",
                        nm->vcuda_core);
        if (vcore >= 100) {
            if (vcore % 100)
                return cerr(c, rvc.from, nm->vcuda_core,
                            "'%s' must be below 100 (a share of one GPU) or a multiple of 100 "
                            "(whole GPUs)", rvc.val);
            out->kind = CORE_REQ_WHOLE;
            out->num_gpu = vcore / 100;
            out->milli = CORE_MILLI;
            return 0;
        }
        out->kind = CORE_REQ_SHARED;
        out->num_gpu = 1;
        out->milli = vcore * 10;
        out->mem_mib = (int64_t)vmem * 256;
    }
    return 0;
}

/* Host CPU and memory: requests, or limits when requests are absent (the
 * API server defaults requests to limits). */
static int ctr_host(const struct ctx *c, json_t *lim, json_t *req, struct ctr_req *out)
{
    static const struct { const char *res; int64_t scale; } host[] = {{"cpu", 1000},
                                                                      {"memory", 1}};
    for (int i = 0; i < 2; i++) {
        json_t *v = req ? json_object_get(req, host[i].res) : NULL;
        const char *from = "requests", *s = NULL;
        char buf[32];
        int64_t x;
        if (!v && lim) {
            v = json_object_get(lim, host[i].res);
            from = "limits";
        }
        if (!v)
            continue;
        if (rsrc_str(c, from, host[i].res, v, buf, sizeof buf, &s) < 0 ||
            qty_field(c, from, host[i].res, s, host[i].scale, &x) < 0)
            return -GS_EINVAL;
        *(i ? &out->mem_bytes : &out->cpu_milli) = x;
    }
    return 0;
}

static int get_obj(json_t *parent, const char *key, const char *field, json_t **out,
                   struct gs_err *e)
{
    json_t *v = parent ? json_object_get(parent, key) : NULL;
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return gs_errf(e, GS_EINVAL, "%s: must be an object", field);
    *out = v;
    return 0;
}

static int parse_container(const struct ctx *c0, const struct core_names *nm, json_t *ctr,
                           struct ctr_req *out, int *restartable)
{
    struct ctx c = *c0;
    json_t *res, *lim, *req, *name, *rp;
    char field[64];

    memset(out, 0, sizeof *out);
    *restartable = 0;
    snprintf(field, sizeof field, "%s[%zu]", c.list, c.idx);
    if (!json_is_object(ctr))
        return gs_errf(c.e, GS_EINVAL, "%s: must be an object", field);
    name = json_object_get(ctr, "name");
    c.name = json_is_string(name) ? json_string_value(name) : "";
    rp = json_object_get(ctr, "restartPolicy");
    if (rp && !json_is_null(rp)) {
        if (!json_is_string(rp) || strcmp(json_string_value(rp), "Always") != 0)
            return cerr(&c, NULL, NULL, "restartPolicy: only \"Always\" is allowed");
        if (strcmp(c.list, "initContainers") != 0)
            return cerr(&c, NULL, NULL, "restartPolicy: only init containers may set it");
        *restartable = 1;
    }
    if (get_obj(ctr, "resources", field, &res, c.e) < 0)
        return -GS_EINVAL;
    snprintf(field, sizeof field, "%s[%zu].resources.limits", c.list, c.idx);
    if (get_obj(res, "limits", field, &lim, c.e) < 0)
        return -GS_EINVAL;
    snprintf(field, sizeof field, "%s[%zu].resources.requests", c.list, c.idx);
    if (get_obj(res, "requests", field, &req, c.e) < 0)
        return -GS_EINVAL;
    if (ctr_gpu(&c, nm, lim, req, out) < 0 || ctr_host(&c, lim, req, out) < 0)
        return -GS_EINVAL;
    return 0;
}

int core_container_parse(const json_t *ctr, const struct core_names *names, const char *list,
                         size_t idx, struct core_request *out, struct gs_err *e)
{
    struct ctx c = {list, idx, "", e};
    struct ctr_req r;
    int restartable;

    memset(out, 0, sizeof *out);
    if (parse_container(&c, names ? names : core_names_default(), (json_t *)ctr, &r,
                        &restartable) < 0)
        return -GS_EINVAL;
    to_request(&r, out);
    return 0;
}

/* ---- summing containers as Kubernetes does --------------------------------- */

static const char *kind_name(enum core_req_kind k)
{
    switch (k) {
    case CORE_REQ_WHOLE: return "whole GPUs";
    case CORE_REQ_SHARED: return "shared GPUs";
    case CORE_REQ_MIG: return "MIG instances";
    case CORE_REQ_NONE: break;
    }
    return "no GPU";
}

static int add64(int64_t *a, int64_t b)
{
    return __builtin_add_overflow(*a, b, a) ? -1 : 0;
}

/* Combines b into a: sum (add != 0) or maximum. GPU kinds must agree; the
 * per-GPU share of shared requests is the largest one asked for. */
static int combine(struct ctr_req *a, const struct ctr_req *b, int add, const char *who,
                   struct gs_err *e)
{
    if (add ? add64(&a->cpu_milli, b->cpu_milli) || add64(&a->mem_bytes, b->mem_bytes) : 0)
        return gs_errf(e, GS_EINVAL, "%s: CPU or memory requests overflow when summed", who);
    if (!add) {
        if (b->cpu_milli > a->cpu_milli)
            a->cpu_milli = b->cpu_milli;
        if (b->mem_bytes > a->mem_bytes)
            a->mem_bytes = b->mem_bytes;
    }
    if (b->kind == CORE_REQ_NONE)
        return 0;
    if (a->kind == CORE_REQ_NONE) {
        int64_t cpu = a->cpu_milli, mem = a->mem_bytes;
        *a = *b;
        a->cpu_milli = cpu;
        a->mem_bytes = mem;
        return 0;
    }
    if (a->kind != b->kind)
        return gs_errf(e, GS_EINVAL, "%s: asks for %s while another container of the pod asks "
                                     "for %s; one pod holds one kind of GPU request",
                       who, kind_name(b->kind), kind_name(a->kind));
    if (a->kind == CORE_REQ_MIG) {
        if (strcmp(a->mig_profile, b->mig_profile) != 0)
            return gs_errf(e, GS_EINVAL, "%s: asks for MIG profile '%s' while another "
                                         "container asks for '%s'; one profile per pod",
                           who, b->mig_profile, a->mig_profile);
        a->mig_count = add ? a->mig_count + b->mig_count
                           : (b->mig_count > a->mig_count ? b->mig_count : a->mig_count);
        return 0;
    }
    a->num_gpu = add ? a->num_gpu + b->num_gpu
                     : (b->num_gpu > a->num_gpu ? b->num_gpu : a->num_gpu);
    if (b->mem_mib > a->mem_mib)
        a->mem_mib = b->mem_mib;
    if (b->milli > a->milli)
        a->milli = b->milli;
    return 0;
}

static int parse_containers(json_t *spec, const struct core_names *nm, struct core_request *r,
                            struct gs_err *e)
{
    json_t *ctrs = json_object_get(spec, "containers");
    json_t *inits = json_object_get(spec, "initContainers");
    struct ctr_req app = {0}, init = {0}, sidecars = {0}, one;
    char who[320];
    size_t i;
    json_t *v;
    int restartable;

    if (!json_is_array(ctrs) || json_array_size(ctrs) == 0)
        return gs_errf(e, GS_EINVAL, "spec.containers: missing or empty");
    if (inits && !json_is_null(inits) && !json_is_array(inits))
        return gs_errf(e, GS_EINVAL, "spec.initContainers: must be a list");

    json_array_foreach(ctrs, i, v) {
        struct ctx c = {"containers", i, "", e};
        if (parse_container(&c, nm, v, &one, &restartable) < 0)
            return -GS_EINVAL;
        snprintf(who, sizeof who, "containers[%zu]", i);
        if (combine(&app, &one, 1, who, e) < 0)
            return -GS_EINVAL;
    }
    /* Sidecars (restartable init containers) run alongside everything that
     * starts after them; a regular init container runs alongside the
     * sidecars started before it. */
    if (json_is_array(inits)) {
        json_array_foreach(inits, i, v) {
            struct ctx c = {"initContainers", i, "", e};
            struct ctr_req at_start;
            if (parse_container(&c, nm, v, &one, &restartable) < 0)
                return -GS_EINVAL;
            snprintf(who, sizeof who, "initContainers[%zu]", i);
            if (restartable) {
                if (combine(&app, &one, 1, who, e) < 0 || combine(&sidecars, &one, 1, who, e) < 0)
                    return -GS_EINVAL;
                at_start = sidecars;
            } else {
                at_start = one;
                if (combine(&at_start, &sidecars, 1, who, e) < 0)
                    return -GS_EINVAL;
            }
            if (combine(&init, &at_start, 0, who, e) < 0)
                return -GS_EINVAL;
        }
    }
    if (combine(&app, &init, 0, "initContainers", e) < 0)
        return -GS_EINVAL;

    json_t *ov;
    if (get_obj(spec, "overhead", "spec.overhead", &ov, e) < 0)
        return -GS_EINVAL;
    if (ov) {
        struct ctx c = {"spec", 0, "", e};
        struct ctr_req o = {0};
        if (ctr_host(&c, NULL, ov, &o) < 0 || combine(&app, &o, 1, "spec.overhead", e) < 0)
            return -GS_EINVAL;
    }

    if ((app.kind == CORE_REQ_WHOLE || app.kind == CORE_REQ_SHARED) &&
        app.num_gpu > CORE_MAX_GPUS)
        return gs_errf(e, GS_EINVAL, "spec.containers: the pod asks for %d GPUs in total; a "
                                     "node has at most %d", app.num_gpu, CORE_MAX_GPUS);
    if (app.kind == CORE_REQ_MIG && app.mig_count > CORE_MAX_GPUS)
        return gs_errf(e, GS_EINVAL, "spec.containers: the pod asks for %d MIG instances in "
                                     "total; a pod holds at most %d", app.mig_count,
                       CORE_MAX_GPUS);
    to_request(&app, r);
    return 0;
}

/* ---- metadata, selectors, tolerations ------------------------------------- */

#define MAX_LIST 256 /* selector entries, terms, expressions, values, tolerations */

static int copy_str(char *dst, size_t cap, json_t *v, const char *field, struct gs_err *e)
{
    dst[0] = '\0';
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return gs_errf(e, GS_EINVAL, "%s: must be a string", field);
    if (json_string_length(v) >= cap)
        return gs_errf(e, GS_EINVAL, "%s: longer than %zu characters", field, cap - 1);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int dup_str(char **dst, json_t *v, const char *field, struct gs_err *e)
{
    *dst = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return gs_errf(e, GS_EINVAL, "%s: must be a string", field);
    if (!(*dst = strdup(json_string_value(v))))
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", field);
    return 0;
}

static int split_types(const char *val, char list[][CORE_MODEL_MAX], int *n, const char *field,
                       struct gs_err *e)
{
    const char *p = val;
    *n = 0;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *s = p;
        while (len && isspace((unsigned char)*s))
            s++, len--;
        while (len && isspace((unsigned char)s[len - 1]))
            len--;
        if (len) {
            if (*n == CORE_MAX_TYPES)
                return gs_errf(e, GS_EINVAL, "%s: more than %d GPU types", field,
                               CORE_MAX_TYPES);
            if (len >= CORE_MODEL_MAX)
                return gs_errf(e, GS_EINVAL, "%s: GPU type '%.*s' longer than %d characters",
                               field, (int)len, s, CORE_MODEL_MAX - 1);
            memcpy(list[*n], s, len);
            list[*n][len] = '\0';
            (*n)++;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

static int parse_annotations(json_t *meta, const struct core_names *nm, struct core_pod *pod,
                             struct gs_err *e)
{
    json_t *ann;
    char key[128], field[160];
    const char *v;

    if (get_obj(meta, "annotations", "metadata.annotations", &ann, e) < 0)
        return -GS_EINVAL;
    if (!ann)
        return 0;
    static const char *const names[] = {"gpu-type", "gpu-type-exclude", "policy"};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s%s", nm->annot_prefix, names[i]);
        snprintf(field, sizeof field, "metadata.annotations[%s]", key);
        json_t *j = json_object_get(ann, key);
        if (!j)
            continue;
        if (!json_is_string(j))
            return gs_errf(e, GS_EINVAL, "%s: must be a string", field);
        v = json_string_value(j);
        if (i == 0 && split_types(v, pod->req.types, &pod->req.n_types, field, e) < 0)
            return -GS_EINVAL;
        if (i == 1 &&
            split_types(v, pod->req.types_exclude, &pod->req.n_types_exclude, field, e) < 0)
            return -GS_EINVAL;
        if (i == 2) {
            size_t len = strlen(v);
            if (len == 0 || len >= sizeof pod->policy)
                return gs_errf(e, GS_EINVAL, "%s: '%s' is not a policy name (1..%zu "
                                             "characters)", field, v, sizeof pod->policy - 1);
            for (const char *p = v; *p; p++)
                if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '-')
                    return gs_errf(e, GS_EINVAL, "%s: '%s' is not a policy name (lowercase "
                                                 "letters, digits, '-')", field, v);
            if (!core_policy_need(v, field, e))
                return -GS_EINVAL;
            memcpy(pod->policy, v, len + 1);
        }
    }
    return 0;
}

static int parse_selector(json_t *spec, struct core_pod *pod, struct gs_err *e)
{
    json_t *sel, *v;
    const char *key;
    size_t n;

    if (get_obj(spec, "nodeSelector", "spec.nodeSelector", &sel, e) < 0)
        return -GS_EINVAL;
    if (!sel || (n = json_object_size(sel)) == 0)
        return 0;
    if (n > MAX_LIST)
        return gs_errf(e, GS_EINVAL, "spec.nodeSelector: more than %d entries", MAX_LIST);
    pod->selector_keys = calloc(n, sizeof(char *));
    pod->selector_values = calloc(n, sizeof(char *));
    if (!pod->selector_keys || !pod->selector_values)
        return gs_errf(e, GS_ENOMEM, "spec.nodeSelector: out of memory");
    json_object_foreach(sel, key, v) {
        char field[320];
        int i = pod->n_selector;
        snprintf(field, sizeof field, "spec.nodeSelector[%s]", key);
        if (!json_is_string(v))
            return gs_errf(e, GS_EINVAL, "%s: must be a string", field);
        pod->selector_keys[i] = strdup(key);
        pod->selector_values[i] = strdup(json_string_value(v));
        pod->n_selector++;
        if (!pod->selector_keys[i] || !pod->selector_values[i])
            return gs_errf(e, GS_ENOMEM, "%s: out of memory", field);
    }
    return 0;
}

static const struct { const char *name; enum core_sel_op op; } sel_ops[] = {
    {"In", CORE_OP_IN}, {"NotIn", CORE_OP_NOT_IN}, {"Exists", CORE_OP_EXISTS},
    {"DoesNotExist", CORE_OP_DOES_NOT_EXIST}, {"Gt", CORE_OP_GT}, {"Lt", CORE_OP_LT},
};

static int parse_int64(const char *s, int64_t *out)
{
    char *end;
    long long x;
    if (!*s || isspace((unsigned char)*s))
        return -1;
    errno = 0;
    x = strtoll(s, &end, 10);
    if (*end || errno)
        return -1;
    *out = x;
    return 0;
}

static int parse_requirement(json_t *j, int is_field, const char *field,
                             struct core_requirement *r, struct gs_err *e)
{
    char f[400];
    json_t *vals;
    const char *op;
    size_t i, k, nv;
    json_t *v;

    if (!json_is_object(j))
        return gs_errf(e, GS_EINVAL, "%s: must be an object", field);
    snprintf(f, sizeof f, "%s.key", field);
    if (dup_str(&r->key, json_object_get(j, "key"), f, e) < 0)
        return -GS_EINVAL;
    if (!r->key || !r->key[0])
        return gs_errf(e, GS_EINVAL, "%s: missing", f);
    r->field = is_field;
    if (is_field && strcmp(r->key, "metadata.name") != 0)
        return gs_errf(e, GS_EINVAL, "%s: '%s' is not a supported node field (only "
                                     "metadata.name)", f, r->key);
    snprintf(f, sizeof f, "%s.operator", field);
    op = json_string_value(json_object_get(j, "operator"));
    if (!op)
        return gs_errf(e, GS_EINVAL, "%s: missing", f);
    for (k = 0; k < sizeof sel_ops / sizeof sel_ops[0]; k++)
        if (strcmp(op, sel_ops[k].name) == 0)
            break;
    if (k == sizeof sel_ops / sizeof sel_ops[0])
        return gs_errf(e, GS_EINVAL, "%s: '%.64s' is not one of In, NotIn, Exists, "
                                     "DoesNotExist, Gt, Lt", f, op);
    r->op = sel_ops[k].op;
    if (is_field && r->op != CORE_OP_IN && r->op != CORE_OP_NOT_IN)
        return gs_errf(e, GS_EINVAL, "%s: node fields allow only In and NotIn", f);

    snprintf(f, sizeof f, "%s.values", field);
    vals = json_object_get(j, "values");
    if (vals && !json_is_null(vals) && !json_is_array(vals))
        return gs_errf(e, GS_EINVAL, "%s: must be a list", f);
    nv = json_is_array(vals) ? json_array_size(vals) : 0;
    if (nv > MAX_LIST)
        return gs_errf(e, GS_EINVAL, "%s: more than %d values", f, MAX_LIST);
    switch (r->op) {
    case CORE_OP_IN:
    case CORE_OP_NOT_IN:
        if (nv == 0)
            return gs_errf(e, GS_EINVAL, "%s: %s needs at least one value", f, op);
        break;
    case CORE_OP_EXISTS:
    case CORE_OP_DOES_NOT_EXIST:
        if (nv != 0)
            return gs_errf(e, GS_EINVAL, "%s: %s takes no values", f, op);
        break;
    case CORE_OP_GT:
    case CORE_OP_LT:
        if (nv != 1)
            return gs_errf(e, GS_EINVAL, "%s: %s needs exactly one value", f, op);
        break;
    }
    if (nv && !(r->values = calloc(nv, sizeof(char *))))
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", f);
    json_array_foreach(vals, i, v) {
        int64_t x;
        snprintf(f, sizeof f, "%s.values[%zu]", field, i);
        if (!json_is_string(v))
            return gs_errf(e, GS_EINVAL, "%s: must be a string", f);
        if (dup_str(&r->values[i], v, f, e) < 0)
            return -GS_EINVAL;
        r->n_values++;
        if ((r->op == CORE_OP_GT || r->op == CORE_OP_LT) && parse_int64(r->values[i], &x) < 0)
            return gs_errf(e, GS_EINVAL, "%s: '%.64s' is not an integer", f, r->values[i]);
    }
    return 0;
}

/* One nodeSelectorTerm at field f: matchExpressions and matchFields. */
static int parse_term(json_t *t, const char *f, struct core_term *term, struct gs_err *e)
{
    static const char *const lists[] = {"matchExpressions", "matchFields"};
    size_t total = 0;
    if (!json_is_object(t))
        return gs_errf(e, GS_EINVAL, "%s: must be an object", f);
    for (int l = 0; l < 2; l++) {
        json_t *x = json_object_get(t, lists[l]);
        if (x && !json_is_null(x) && !json_is_array(x))
            return gs_errf(e, GS_EINVAL, "%s.%s: must be a list", f, lists[l]);
        total += json_is_array(x) ? json_array_size(x) : 0;
    }
    if (total > MAX_LIST)
        return gs_errf(e, GS_EINVAL, "%s: more than %d requirements", f, MAX_LIST);
    if (total && !(term->reqs = calloc(total, sizeof *term->reqs)))
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", f);
    for (int l = 0; l < 2; l++) {
        json_t *x = json_object_get(t, lists[l]), *r;
        size_t k;
        json_array_foreach(x, k, r) {
            char rf[320];
            snprintf(rf, sizeof rf, "%s.%s[%zu]", f, lists[l], k);
            if (parse_requirement(r, l, rf, &term->reqs[term->n_reqs++], e) < 0)
                return -GS_EINVAL;
        }
    }
    return 0;
}

/* The list under key (field names it): *out NULL when absent or empty. */
static int get_list(json_t *parent, const char *key, const char *field, json_t **out,
                    struct gs_err *e)
{
    json_t *list = json_object_get(parent, key);
    *out = NULL;
    if (!list || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return gs_errf(e, GS_EINVAL, "%s: must be a list", field);
    if (json_array_size(list) > MAX_LIST)
        return gs_errf(e, GS_EINVAL, "%s: more than %d entries", field, MAX_LIST);
    *out = json_array_size(list) ? list : NULL;
    return 0;
}

/* preferredDuringSchedulingIgnoredDuringExecution: [{weight, preference}] */
static int parse_preferred(json_t *na, struct core_pod *pod, struct gs_err *e)
{
    const char *base = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution";
    json_t *list, *t;
    char f[256];
    size_t i;

    if (get_list(na, "preferredDuringSchedulingIgnoredDuringExecution", base, &list, e) < 0)
        return -GS_EINVAL;
    if (!list)
        return 0;
    pod->prefs = calloc(json_array_size(list), sizeof *pod->prefs);
    pod->pref_weights = calloc(json_array_size(list), sizeof *pod->pref_weights);
    if (!pod->prefs || !pod->pref_weights)
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", base);
    json_array_foreach(list, i, t) {
        json_t *w = json_object_get(t, "weight"), *pref;
        snprintf(f, sizeof f, "%s[%zu]", base, i);
        pod->n_prefs++;
        if (!json_is_object(t))
            return gs_errf(e, GS_EINVAL, "%s: must be an object", f);
        if (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > 100)
            return gs_errf(e, GS_EINVAL, "%s.weight: must be an integer 1..100", f);
        pod->pref_weights[i] = (int)json_integer_value(w);
        snprintf(f, sizeof f, "%s[%zu].preference", base, i);
        if (!(pref = json_object_get(t, "preference")))
            return gs_errf(e, GS_EINVAL, "%s: missing", f);
        if (parse_term(pref, f, &pod->prefs[i], e) < 0)
            return -GS_EINVAL;
    }
    return 0;
}

/* A pod labelSelector at f into sel: matchLabels as In [value], and
 * matchExpressions (In, NotIn, Exists, DoesNotExist). */
static int parse_label_selector(json_t *ls, const char *f, struct core_term *sel,
                                struct gs_err *e)
{
    json_t *ml = json_object_get(ls, "matchLabels"), *me = json_object_get(ls, "matchExpressions");
    json_t *v, *x;
    const char *k;
    size_t i;
    char rf[400];
    if (ml && !json_is_null(ml) && !json_is_object(ml))
        return gs_errf(e, GS_EINVAL, "%s.matchLabels: must be an object", f);
    if (me && !json_is_null(me) && !json_is_array(me))
        return gs_errf(e, GS_EINVAL, "%s.matchExpressions: must be a list", f);
    size_t total = (json_is_object(ml) ? json_object_size(ml) : 0) +
                   (json_is_array(me) ? json_array_size(me) : 0);
    if (total > MAX_LIST)
        return gs_errf(e, GS_EINVAL, "%s: more than %d requirements", f, MAX_LIST);
    if (total && !(sel->reqs = calloc(total, sizeof *sel->reqs)))
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", f);
    json_object_foreach(json_is_object(ml) ? ml : NULL, k, v) {
        struct core_requirement *r = &sel->reqs[sel->n_reqs++];
        snprintf(rf, sizeof rf, "%s.matchLabels.%.64s", f, k);
        if (!json_is_string(v))
            return gs_errf(e, GS_EINVAL, "%s: must be a string", rf);
        r->op = CORE_OP_IN;
        if (!(r->key = strdup(k)) || !(r->values = calloc(1, sizeof(char *))))
            return gs_errf(e, GS_ENOMEM, "%s: out of memory", rf);
        r->n_values = 1;
        if (!(r->values[0] = strdup(json_string_value(v))))
            return gs_errf(e, GS_ENOMEM, "%s: out of memory", rf);
    }
    json_array_foreach(json_is_array(me) ? me : NULL, i, x) {
        struct core_requirement *r = &sel->reqs[sel->n_reqs++];
        snprintf(rf, sizeof rf, "%s.matchExpressions[%zu]", f, i);
        if (parse_requirement(x, 0, rf, r, e) < 0)
            return -GS_EINVAL;
        if (r->op == CORE_OP_GT || r->op == CORE_OP_LT)
            return gs_errf(e, GS_EINVAL, "%s.operator: a label selector allows only In, NotIn, "
                                         "Exists and DoesNotExist", rf);
    }
    return 0;
}

int core_label_selector_parse(const json_t *ls, const char *field, struct core_term *out,
                              struct gs_err *e)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(ls))
        return gs_errf(e, GS_EINVAL, "%s: must be an object", field);
    if (parse_label_selector((json_t *)ls, field, out, e) < 0) {
        core_term_clear(out);
        return -(e && e->code ? e->code : GS_EINVAL);
    }
    return 0;
}

/* One PodAffinityTerm at f into *pt (its weight set by the caller). */
static int parse_affinity_term(json_t *at, const char *f, struct core_pod_term *pt,
                               struct gs_err *e)
{
    json_t *ns, *nsel, *ls, *v;
    char ff[300];
    size_t k;
    if (!json_is_object(at))
        return gs_errf(e, GS_EINVAL, "%s: must be an object", f);
    snprintf(ff, sizeof ff, "%s.topologyKey", f);
    if (dup_str(&pt->topology_key, json_object_get(at, "topologyKey"), ff, e) < 0)
        return -GS_EINVAL;
    if (!pt->topology_key || !pt->topology_key[0])
        return gs_errf(e, GS_EINVAL, "%s: missing", ff);
    snprintf(ff, sizeof ff, "%s.namespaces", f);
    ns = json_object_get(at, "namespaces");
    if (ns && !json_is_null(ns) && !json_is_array(ns))
        return gs_errf(e, GS_EINVAL, "%s: must be a list", ff);
    if (json_array_size(ns) > MAX_LIST)
        return gs_errf(e, GS_EINVAL, "%s: more than %d entries", ff, MAX_LIST);
    if (json_array_size(ns) && !(pt->namespaces = calloc(json_array_size(ns), sizeof(char *))))
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", ff);
    json_array_foreach(json_is_array(ns) ? ns : NULL, k, v) {
        char nf[320];
        snprintf(nf, sizeof nf, "%s[%zu]", ff, k);
        if (!json_is_string(v))
            return gs_errf(e, GS_EINVAL, "%s: must be a string", nf);
        if (dup_str(&pt->namespaces[pt->n_namespaces], v, nf, e) < 0)
            return -GS_EINVAL;
        pt->n_namespaces++;
    }
    snprintf(ff, sizeof ff, "%s.namespaceSelector", f);
    if (get_obj(at, "namespaceSelector", ff, &nsel, e) < 0)
        return -GS_EINVAL;
    /* {} is every namespace; one with labels needs the namespaces'
     * labels, which nothing here reads: the term picks no pod */
    pt->all_namespaces = nsel != NULL;
    snprintf(ff, sizeof ff, "%s.labelSelector", f);
    if (get_obj(at, "labelSelector", ff, &ls, e) < 0)
        return -GS_EINVAL;
    pt->selects = ls != NULL && !(nsel && json_object_size(nsel) > 0);
    if (ls && parse_label_selector(ls, ff, &pt->selector, e) < 0)
        return -GS_EINVAL;
    return 0;
}

/* Room for n more terms in pod->pod_terms. */
static int grow_terms(struct core_pod *pod, size_t n, const char *f, struct gs_err *e)
{
    struct core_pod_term *all = realloc(pod->pod_terms, (pod->n_pod_terms + n) * sizeof *all);
    if (!all)
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", f);
    pod->pod_terms = all;
    return 0;
}

/* podAffinity / podAntiAffinity (sign 1 / -1) at f0:
 * preferredDuringSchedulingIgnoredDuringExecution [{weight, podAffinityTerm}],
 * and with hard > 0 requiredDuringSchedulingIgnoredDuringExecution
 * [podAffinityTerm], each of weight hard */
static int parse_pod_terms(json_t *pa, const char *f0, int sign, int hard, struct core_pod *pod,
                           struct gs_err *e)
{
    json_t *list, *t;
    char base[200], f[260];
    size_t i;
    snprintf(base, sizeof base, "%s.preferredDuringSchedulingIgnoredDuringExecution", f0);
    if (get_list(pa, "preferredDuringSchedulingIgnoredDuringExecution", base, &list, e) < 0 ||
        (list && grow_terms(pod, json_array_size(list), base, e) < 0))
        return -GS_EINVAL;
    json_array_foreach(list, i, t) {
        struct core_pod_term *pt = &pod->pod_terms[pod->n_pod_terms++];
        json_t *w = json_object_get(t, "weight");
        memset(pt, 0, sizeof *pt);
        snprintf(f, sizeof f, "%s[%zu]", base, i);
        if (!json_is_object(t))
            return gs_errf(e, GS_EINVAL, "%s: must be an object", f);
        if (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > 100)
            return gs_errf(e, GS_EINVAL, "%s.weight: must be an integer 1..100", f);
        pt->weight = sign * (int)json_integer_value(w);
        snprintf(f, sizeof f, "%s[%zu].podAffinityTerm", base, i);
        if (parse_affinity_term(json_object_get(t, "podAffinityTerm"), f, pt, e) < 0)
            return -GS_EINVAL;
    }
    if (hard <= 0)
        return 0;
    snprintf(base, sizeof base, "%s.requiredDuringSchedulingIgnoredDuringExecution", f0);
    if (get_list(pa, "requiredDuringSchedulingIgnoredDuringExecution", base, &list, e) < 0 ||
        (list && grow_terms(pod, json_array_size(list), base, e) < 0))
        return -GS_EINVAL;
    json_array_foreach(list, i, t) {
        struct core_pod_term *pt = &pod->pod_terms[pod->n_pod_terms++];
        memset(pt, 0, sizeof *pt);
        pt->weight = hard;
        snprintf(f, sizeof f, "%s[%zu]", base, i);
        if (parse_affinity_term(t, f, pt, e) < 0)
            return -GS_EINVAL;
    }
    return 0;
}

/* spec.topologySpreadConstraints: the ScheduleAnyway ones become terms
 * (DoNotSchedule is kube-scheduler's filter, done before the extender) */
static int parse_spread(json_t *spec, struct core_pod *pod, struct gs_err *e)
{
    const char *base = "spec.topologySpreadConstraints";
    json_t *list, *c;
    char f[200], ff[260];
    size_t i;
    if (get_list(spec, "topologySpreadConstraints", base, &list, e) < 0)
        return -GS_EINVAL;
    json_array_foreach(list, i, c) {
        json_t *ms = json_object_get(c, "maxSkew"), *ls;
        const char *when = json_string_value(json_object_get(c, "whenUnsatisfiable"));
        snprintf(f, sizeof f, "%s[%zu]", base, i);
        if (!json_is_object(c))
            return gs_errf(e, GS_EINVAL, "%s: must be an object", f);
        if (!json_is_integer(ms) || json_integer_value(ms) < 1 ||
            json_integer_value(ms) > INT_MAX)
            return gs_errf(e, GS_EINVAL, "%s.maxSkew: must be a positive integer", f);
        if (!when || (strcmp(when, "DoNotSchedule") != 0 && strcmp(when, "ScheduleAnyway") != 0))
            return gs_errf(e, GS_EINVAL, "%s.whenUnsatisfiable: must be DoNotSchedule or "
                                         "ScheduleAnyway", f);
        json_t *tk = json_object_get(c, "topologyKey");
        if (!json_is_string(tk) || !json_string_value(tk)[0])
            return gs_errf(e, GS_EINVAL, "%s.topologyKey: must be a non-empty string", f);
        snprintf(ff, sizeof ff, "%s.labelSelector", f);
        if (get_obj(c, "labelSelector", ff, &ls, e) < 0)
            return -GS_EINVAL;
        if (strcmp(when, "ScheduleAnyway") != 0)
            continue;
        struct core_pod_term *all = realloc(pod->pod_terms, (size_t)(pod->n_pod_terms + 1) *
                                                                sizeof *all);
        if (!all)
            return gs_errf(e, GS_ENOMEM, "%s: out of memory", f);
        pod->pod_terms = all;
        struct core_pod_term *pt = &pod->pod_terms[pod->n_pod_terms++];
        memset(pt, 0, sizeof *pt);
        pt->max_skew = (int)json_integer_value(ms);
        pt->selects = ls != NULL;
        if (!(pt->topology_key = strdup(json_string_value(tk))))
            return gs_errf(e, GS_ENOMEM, "%s: out of memory", f);
        if (ls && parse_label_selector(ls, ff, &pt->selector, e) < 0)
            return -GS_EINVAL;
    }
    return 0;
}

static int parse_affinity(json_t *spec, struct core_pod *pod, struct gs_err *e)
{
    json_t *aff, *na, *req, *terms, *t;
    const char *base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    char f[256];
    size_t i;

    json_t *pa, *panti;
    if (get_obj(spec, "affinity", "spec.affinity", &aff, e) < 0 ||
        get_obj(aff, "nodeAffinity", "spec.affinity.nodeAffinity", &na, e) < 0 ||
        get_obj(na, "requiredDuringSchedulingIgnoredDuringExecution", base, &req, e) < 0 ||
        parse_preferred(na, pod, e) < 0 ||
        get_obj(aff, "podAffinity", "spec.affinity.podAffinity", &pa, e) < 0 ||
        get_obj(aff, "podAntiAffinity", "spec.affinity.podAntiAffinity", &panti, e) < 0 ||
        parse_pod_terms(pa, "spec.affinity.podAffinity", 1, 0, pod, e) < 0 ||
        parse_pod_terms(panti, "spec.affinity.podAntiAffinity", -1, 0, pod, e) < 0)
        return -GS_EINVAL;
    if (!req)
        return 0;
    snprintf(f, sizeof f, "%s.nodeSelectorTerms", base);
    terms = json_object_get(req, "nodeSelectorTerms");
    if (!json_is_array(terms) || json_array_size(terms) == 0)
        return gs_errf(e, GS_EINVAL, "%s: must be a non-empty list", f);
    if (json_array_size(terms) > MAX_LIST)
        return gs_errf(e, GS_EINVAL, "%s: more than %d terms", f, MAX_LIST);
    pod->terms = calloc(json_array_size(terms), sizeof *pod->terms);
    if (!pod->terms)
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", f);
    json_array_foreach(terms, i, t) {
        pod->n_terms++;
        snprintf(f, sizeof f, "%s.nodeSelectorTerms[%zu]", base, i);
        if (parse_term(t, f, &pod->terms[i], e) < 0)
            return -GS_EINVAL;
    }
    return 0;
}

static int parse_tolerations(json_t *spec, struct core_pod *pod, struct gs_err *e)
{
    json_t *tols = json_object_get(spec, "tolerations"), *t;
    size_t i;

    if (!tols || json_is_null(tols))
        return 0;
    if (!json_is_array(tols))
        return gs_errf(e, GS_EINVAL, "spec.tolerations: must be a list");
    if (json_array_size(tols) > MAX_LIST)
        return gs_errf(e, GS_EINVAL, "spec.tolerations: more than %d entries", MAX_LIST);
    if (json_array_size(tols) &&
        !(pod->tolerations = calloc(json_array_size(tols), sizeof *pod->tolerations)))
        return gs_errf(e, GS_ENOMEM, "spec.tolerations: out of memory");
    json_array_foreach(tols, i, t) {
        struct core_toleration *tl = &pod->tolerations[i];
        char f[96];
        const char *op;
        pod->n_tolerations++;
        snprintf(f, sizeof f, "spec.tolerations[%zu]", i);
        if (!json_is_object(t))
            return gs_errf(e, GS_EINVAL, "%s: must be an object", f);
        if (dup_str(&tl->key, json_object_get(t, "key"), f, e) < 0 ||
            dup_str(&tl->value, json_object_get(t, "value"), f, e) < 0 ||
            dup_str(&tl->effect, json_object_get(t, "effect"), f, e) < 0)
            return -GS_EINVAL;
        json_t *jop = json_object_get(t, "operator");
        if (jop && !json_is_null(jop) && !json_is_string(jop))
            return gs_errf(e, GS_EINVAL, "%s.operator: must be a string", f);
        op = jop ? json_string_value(jop) : NULL;
        if (!op || !*op || strcmp(op, "Equal") == 0)
            tl->op_exists = 0;
        else if (strcmp(op, "Exists") == 0)
            tl->op_exists = 1;
        else
            return gs_errf(e, GS_EINVAL, "%s.operator: '%.64s' is not Equal or Exists", f, op);
        if (tl->op_exists && tl->value && tl->value[0])
            return gs_errf(e, GS_EINVAL, "%s.value: must be empty when operator is Exists", f);
        if (!tl->op_exists && (!tl->key || !tl->key[0]))
            return gs_errf(e, GS_EINVAL, "%s.key: an empty key needs operator Exists", f);
        if (tl->effect && tl->effect[0] && strcmp(tl->effect, "NoSchedule") != 0 &&
            strcmp(tl->effect, "PreferNoSchedule") != 0 && strcmp(tl->effect, "NoExecute") != 0)
            return gs_errf(e, GS_EINVAL, "%s.effect: '%.64s' is not NoSchedule, "
                                         "PreferNoSchedule or NoExecute", f, tl->effect);
    }
    return 0;
}

/* ---- the pod --------------------------------------------------------------- */

/* The pod's name, namespace ("default" when none) and UID, and its
 * metadata into *meta. */
static int parse_identity(json_t *p, struct core_pod *pod, json_t **meta, struct gs_err *e)
{
    if (!json_is_object(p))
        return gs_errf(e, GS_EINVAL, "pod: must be a JSON object");
    if (get_obj(p, "metadata", "metadata", meta, e) < 0 ||
        copy_str(pod->name, sizeof pod->name, json_object_get(*meta, "name"), "metadata.name",
                 e) < 0 ||
        copy_str(pod->ns, sizeof pod->ns, json_object_get(*meta, "namespace"),
                 "metadata.namespace", e) < 0 ||
        copy_str(pod->uid, sizeof pod->uid, json_object_get(*meta, "uid"), "metadata.uid", e) < 0)
        return -GS_EINVAL;
    if (!pod->ns[0])
        strcpy(pod->ns, "default");
    return 0;
}

int core_pod_parse(const json_t *jpod, const struct core_names *names, struct core_pod *pod,
                   struct gs_err *e)
{
    json_t *p = (json_t *)jpod, *meta, *spec, *prio;

    memset(pod, 0, sizeof *pod);
    if (!names)
        names = core_names_default();
    if (parse_identity(p, pod, &meta, e) < 0 || get_obj(p, "spec", "spec", &spec, e) < 0)
        goto fail;
    if (!spec) {
        gs_errf(e, GS_EINVAL, "spec: missing");
        goto fail;
    }
    prio = json_object_get(spec, "priority");
    if (prio && !json_is_null(prio)) {
        if (!json_is_integer(prio) || json_integer_value(prio) < INT32_MIN ||
            json_integer_value(prio) > INT32_MAX) {
            gs_errf(e, GS_EINVAL, "spec.priority: must be a 32-bit integer");
            goto fail;
        }
        pod->priority = (int32_t)json_integer_value(prio);
    }
    if (parse_containers(spec, names, &pod->req, e) < 0 ||
        parse_annotations(meta, names, pod, e) < 0 || parse_selector(spec, pod, e) < 0 ||
        parse_affinity(spec, pod, e) < 0 || parse_spread(spec, pod, e) < 0 ||
        parse_tolerations(spec, pod, e) < 0)
        goto fail;
    return 0;
fail:
    core_pod_clear(pod);
    return -(e && e->code ? e->code : GS_EINVAL);
}

int core_pod_affinity_parse(const json_t *jpod, int hard_weight, struct core_pod *pod,
                            struct gs_err *e)
{
    json_t *p = (json_t *)jpod, *meta, *spec, *aff, *pa, *panti;

    memset(pod, 0, sizeof *pod);
    if (parse_identity(p, pod, &meta, e) < 0 || get_obj(p, "spec", "spec", &spec, e) < 0 ||
        get_obj(spec, "affinity", "spec.affinity", &aff, e) < 0 ||
        get_obj(aff, "podAffinity", "spec.affinity.podAffinity", &pa, e) < 0 ||
        get_obj(aff, "podAntiAffinity", "spec.affinity.podAntiAffinity", &panti, e) < 0 ||
        parse_pod_terms(pa, "spec.affinity.podAffinity", 1, hard_weight, pod, e) < 0 ||
        parse_pod_terms(panti, "spec.affinity.podAntiAffinity", -1, 0, pod, e) < 0)
        goto fail;
    return pod->n_pod_terms;
fail:
    core_pod_clear(pod);
    return -(e && e->code ? e->code : GS_EINVAL);
}

static void free_reqs(struct core_term *term)
{
    for (int r = 0; r < term->n_reqs; r++) {
        struct core_requirement *q = &term->reqs[r];
        free(q->key);
        for (int v = 0; q->values && v < q->n_values; v++)
            free(q->values[v]);
        free(q->values);
    }
    free(term->reqs);
}

void core_term_clear(struct core_term *term)
{
    free_reqs(term);
    memset(term, 0, sizeof *term);
}

static void free_terms(struct core_term *terms, int n)
{
    for (int t = 0; t < n; t++)
        free_reqs(&terms[t]);
    free(terms);
}

void core_pod_clear(struct core_pod *pod)
{
    for (int i = 0; i < pod->n_selector; i++) {
        free(pod->selector_keys[i]);
        free(pod->selector_values[i]);
    }
    free(pod->selector_keys);
    free(pod->selector_values);
    free_terms(pod->terms, pod->n_terms);
    free_terms(pod->prefs, pod->n_prefs);
    free(pod->pref_weights);
    for (int i = 0; i < pod->n_tolerations; i++) {
        free(pod->tolerations[i].key);
        free(pod->tolerations[i].value);
        free(pod->tolerations[i].effect);
    }
    free(pod->tolerations);
    for (int i = 0; i < pod->n_pod_terms; i++) {
        struct core_pod_term *t = &pod->pod_terms[i];
        free(t->topology_key);
        for (int k = 0; k < t->n_namespaces; k++)
            free(t->namespaces[k]);
        free(t->namespaces);
        free_reqs(&t->selector);
    }
    free(pod->pod_terms);
    memset(pod, 0, sizeof *pod);
}

/* ---- matching -------------------------------------------------------------- */

static const char *label_get(int n, char *const *keys, char *const *values, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0)
            return values[i];
    return NULL;
}

/* Does a requirement hold for the value v of its key (NULL: no such label)? */
static int value_matches(const struct core_requirement *r, const char *v)
{
    int64_t a, b;
    switch (r->op) {
    case CORE_OP_IN:
    case CORE_OP_NOT_IN: {
        int in = 0;
        for (int i = 0; v && i < r->n_values && !in; i++)
            in = strcmp(v, r->values[i]) == 0;
        return r->op == CORE_OP_IN ? in : !in;
    }
    case CORE_OP_EXISTS: return v != NULL;
    case CORE_OP_DOES_NOT_EXIST: return v == NULL;
    case CORE_OP_GT:
    case CORE_OP_LT:
        if (!v || r->n_values != 1 || parse_int64(v, &a) < 0 || parse_int64(r->values[0], &b) < 0)
            return 0;
        return r->op == CORE_OP_GT ? a > b : a < b;
    }
    return 0;
}

static int req_matches(const struct core_requirement *r, const char *node_name, int n,
                       char *const *keys, char *const *values)
{
    const char *v = r->field ? node_name : label_get(n, keys, values, r->key);
    if (r->field && !v)
        return 1; /* node name unknown to the caller: cannot exclude */
    return value_matches(r, v);
}

int core_pod_term_picks(const struct core_pod *pod, const struct core_pod_term *t,
                        const json_t *other)
{
    const json_t *md = json_object_get(other, "metadata");
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    const json_t *labels = json_object_get(md, "labels");
    int in = t->all_namespaces;
    if (!t->selects)
        return 0;
    ns = ns ? ns : "default";
    for (int i = 0; !in && i < t->n_namespaces; i++)
        in = strcmp(t->namespaces[i], ns) == 0;
    if (!in && (t->n_namespaces || strcmp(pod->ns, ns) != 0))
        return 0;
    return core_label_selector_matches(&t->selector, labels); /* empty: every pod */
}

int core_label_selector_matches(const struct core_term *sel, const json_t *labels)
{
    for (int r = 0; r < sel->n_reqs; r++) {
        const struct core_requirement *q = &sel->reqs[r];
        if (!value_matches(q, json_string_value(json_object_get(labels, q->key))))
            return 0;
    }
    return 1;
}

static int term_matches(const struct core_term *term, const char *node_name, int n,
                        char *const *keys, char *const *values)
{
    int ok = term->n_reqs > 0; /* an empty term matches no node */
    for (int r = 0; ok && r < term->n_reqs; r++)
        ok = req_matches(&term->reqs[r], node_name, n, keys, values);
    return ok;
}

static int tolerates(const struct core_pod *pod, const char *key, const char *value,
                     const char *effect);

int core_pod_matches_node(const struct core_pod *pod, const char *node_name, int n,
                          char *const *keys, char *const *values)
{
    for (int i = 0; i < pod->n_selector; i++) {
        const char *v = label_get(n, keys, values, pod->selector_keys[i]);
        if (!v || strcmp(v, pod->selector_values[i]) != 0)
            return 0;
    }
    if (pod->n_terms == 0)
        return 1;
    for (int t = 0; t < pod->n_terms; t++)
        if (term_matches(&pod->terms[t], node_name, n, keys, values))
            return 1;
    return 0;
}

void core_pod_soft_counts(const struct core_pod *pod, const char *node_name, int n_labels,
                          char *const *keys, char *const *values, int n_taints,
                          const struct core_taint *taints, int *affinity, int *intolerable)
{
    *affinity = *intolerable = 0;
    for (int t = 0; t < pod->n_prefs; t++)
        if (term_matches(&pod->prefs[t], node_name, n_labels, keys, values))
            *affinity += pod->pref_weights[t];
    for (int i = 0; i < n_taints; i++) {
        const struct core_taint *x = &taints[i];
        if (x->effect && strcmp(x->effect, "PreferNoSchedule") == 0 &&
            !tolerates(pod, x->key, x->value, x->effect))
            ++*intolerable;
    }
}

int core_pod_matches_labels(const struct core_pod *pod, int n, char *const *keys,
                            char *const *values)
{
    return core_pod_matches_node(pod, NULL, n, keys, values);
}

int core_pod_tolerates(const struct core_pod *pod, const char *key, const char *value,
                       const char *effect)
{
    if (effect && strcmp(effect, "PreferNoSchedule") == 0)
        return 1; /* a preference, never a reason to refuse (core_pod_soft_counts) */
    return tolerates(pod, key, value, effect);
}

static int tolerates(const struct core_pod *pod, const char *key, const char *value,
                     const char *effect)
{
    for (int i = 0; i < pod->n_tolerations; i++) {
        const struct core_toleration *t = &pod->tolerations[i];
        if (t->effect && t->effect[0] && (!effect || strcmp(t->effect, effect) != 0))
            continue;
        if (!t->key || !t->key[0]) {
            if (t->op_exists)
                return 1;
            continue;
        }
        if (!key || strcmp(t->key, key) != 0)
            continue;
        if (t->op_exists || strcmp(t->value ? t->value : "", value ? value : "") == 0)
            return 1;
    }
    return 0;
}

int core_request_model_ok(const struct core_request *req, const char *model)
{
    if (!model)
        model = "";
    for (int i = 0; i < req->n_types_exclude; i++)
        if (strcasestr(model, req->types_exclude[i]))
            return 0;
    if (req->n_types == 0)
        return 1;
    for (int i = 0; i < req->n_types; i++)
        if (strcasestr(model, req->types[i]))
            return 1;
    return 0;
}
