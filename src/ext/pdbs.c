/* ext/pdbs.c - see pdbs.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/request.h"
#include "ext/pdbs.h"
#include "util/log.h"

#define MAX_PDBS 100000

struct pdb {
    char ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
    int selects;           /* a selector with requirements (an empty one picks no pod) */
    struct core_term sel;
    int64_t allowed;       /* status.disruptionsAllowed (0 until the controller sets it) */
    json_t *disrupted;     /* status.disruptedPods (a reference), or NULL */
};

struct ext_pdbs {
    struct pdb *v;             /* sorted by namespace, then name */
    int n, cap;
    /* ext_pdbs_mark's disruptions left per budget: left[i] holds for the
     * call numbered calls when stamp[i] says so (set when first touched,
     * so a call costs only the budgets of the pods' namespaces) */
    int64_t *left;
    unsigned long *stamp, calls;
};

struct ext_pdbs *ext_pdbs_new(void) { return calloc(1, sizeof(struct ext_pdbs)); }

static void pdb_clear(struct pdb *p)
{
    core_term_clear(&p->sel);
    json_decref(p->disrupted);
    memset(p, 0, sizeof *p);
}

static void clear_all(struct ext_pdbs *b)
{
    for (int i = 0; i < b->n; i++)
        pdb_clear(&b->v[i]);
    b->n = 0;
}

void ext_pdbs_free(struct ext_pdbs *b)
{
    if (!b)
        return;
    clear_all(b);
    free(b->v);
    free(b->left);
    free(b->stamp);
    free(b);
}

int ext_pdbs_count(const struct ext_pdbs *b) { return b ? b->n : 0; }

/* The first position whose key is not below (ns, name; NULL: the first of
 * ns); *hit when it is that key. */
static int lower(const struct ext_pdbs *b, const char *ns, const char *name, int *hit)
{
    int lo = 0, hi = b->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(b->v[mid].ns, ns);
        if (c == 0 && name)
            c = strcmp(b->v[mid].name, name);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (hit)
        *hit = lo < b->n && name && strcmp(b->v[lo].ns, ns) == 0 &&
               strcmp(b->v[lo].name, name) == 0;
    return lo;
}

void ext_pdbs_remove(struct ext_pdbs *b, const char *ns, const char *name)
{
    int hit, i = ns && name ? lower(b, ns, name, &hit) : 0;
    if (!ns || !name || !hit)
        return;
    pdb_clear(&b->v[i]);
    memmove(&b->v[i], &b->v[i + 1], (size_t)(b->n - i - 1) * sizeof *b->v);
    b->n--;
}

static int name_of(const json_t *md, const char *k, char *dst, struct gs_err *e)
{
    const char *v = json_string_value(json_object_get(md, k));
    if (!v || !v[0] || strlen(v) >= CORE_NAME_MAX)
        return gs_errf(e, GS_EINVAL, "poddisruptionbudget: metadata.%s: missing, or not a "
                       "string of 1 to %d characters", k, CORE_NAME_MAX - 1);
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* The budget of obj into *p (cleared first); its key is set even when a
 * later field is broken. */
static int parse(const json_t *obj, struct pdb *p, struct gs_err *e)
{
    const json_t *md = json_object_get(obj, "metadata");
    memset(p, 0, sizeof *p);
    if (name_of(md, "namespace", p->ns, e) < 0 || name_of(md, "name", p->name, e) < 0)
        return -GS_EINVAL;
    char where[2 * CORE_NAME_MAX + 40];
    snprintf(where, sizeof where, "poddisruptionbudget %s/%s", p->ns, p->name);
    const json_t *spec = json_object_get(obj, "spec"), *status = json_object_get(obj, "status");
    if (spec && !json_is_null(spec) && !json_is_object(spec))
        return gs_errf(e, GS_EINVAL, "%s: spec: must be an object", where);
    if (status && !json_is_null(status) && !json_is_object(status))
        return gs_errf(e, GS_EINVAL, "%s: status: must be an object", where);
    const json_t *sel = json_object_get(spec, "selector");
    if (sel && !json_is_null(sel)) {
        struct gs_err se = GS_ERR_INIT;
        if (core_label_selector_parse(sel, "spec.selector", &p->sel, &se) < 0)
            return gs_errf(e, GS_EINVAL, "%s: %s", where, se.msg);
        p->selects = p->sel.n_reqs > 0;
    }
    const json_t *a = json_object_get(status, "disruptionsAllowed");
    if (a && !json_is_null(a)) {
        if (!json_is_integer(a) || json_integer_value(a) < 0 ||
            json_integer_value(a) > INT32_MAX)
            return gs_errf(e, GS_EINVAL, "%s: status.disruptionsAllowed: not an integer in "
                           "0..%d", where, INT32_MAX);
        p->allowed = json_integer_value(a);
    }
    const json_t *d = json_object_get(status, "disruptedPods");
    if (d && !json_is_null(d)) {
        if (!json_is_object(d) || json_object_size(d) > MAX_PDBS)
            return gs_errf(e, GS_EINVAL, "%s: status.disruptedPods: not an object of at most "
                           "%d pods", where, MAX_PDBS);
        if (json_object_size(d))
            p->disrupted = json_incref((json_t *)d);
    }
    return 0;
}

int ext_pdbs_upsert(struct ext_pdbs *b, const json_t *obj, struct gs_err *e)
{
    struct pdb p;
    int rc = parse(obj, &p, e);
    if (rc < 0) {
        if (p.ns[0] && p.name[0])
            ext_pdbs_remove(b, p.ns, p.name);
        pdb_clear(&p);
        return rc;
    }
    int hit, i = lower(b, p.ns, p.name, &hit);
    if (hit) {
        pdb_clear(&b->v[i]);
        b->v[i] = p;
        return 0;
    }
    if (b->n == b->cap) {
        int cap = b->cap ? (b->cap > MAX_PDBS / 2 ? MAX_PDBS : 2 * b->cap) : 16;
        struct pdb *v = b->n < MAX_PDBS ? realloc(b->v, (size_t)cap * sizeof *v) : NULL;
        int64_t *left = v ? realloc(b->left, (size_t)cap * sizeof *left) : NULL;
        unsigned long *stamp = left ? realloc(b->stamp, (size_t)cap * sizeof *stamp) : NULL;
        if (v)
            b->v = v;
        if (left)
            b->left = left;
        if (!stamp) {
            char key[2 * CORE_NAME_MAX + 2];
            snprintf(key, sizeof key, "%s/%s", p.ns, p.name);
            pdb_clear(&p);
            return gs_errf(e, GS_ENOMEM, "poddisruptionbudget %s: no room (at most %d)", key,
                           MAX_PDBS);
        }
        b->stamp = stamp;
        memset(stamp + b->cap, 0, (size_t)(cap - b->cap) * sizeof *stamp);
        b->cap = cap;
    }
    memmove(&b->v[i + 1], &b->v[i], (size_t)(b->n - i) * sizeof *b->v);
    b->v[i] = p;
    b->n++;
    return 0;
}

int ext_pdbs_replace(struct ext_pdbs *b, const json_t *items)
{
    size_t i;
    const json_t *it;
    int bad = 0;
    clear_all(b);
    json_array_foreach(items, i, it) {
        struct gs_err e = GS_ERR_INIT;
        if (ext_pdbs_upsert(b, it, &e) < 0) {
            log_warn("extender", "%s", e.msg);
            bad++;
        }
    }
    return bad;
}

/* Takes pod's disruptions from the budgets (b->left); 1 when one went below
 * zero. */
static int take(struct ext_pdbs *b, const json_t *pod)
{
    const json_t *md = json_object_get(pod, "metadata");
    const json_t *labels = json_object_get(md, "labels");
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    const char *name = json_string_value(json_object_get(md, "name"));
    int viol = 0;
    if (!json_object_size(labels)) /* a pod without labels matches no budget */
        return 0;
    ns = ns ? ns : "default";
    for (int i = lower(b, ns, NULL, NULL); i < b->n && strcmp(b->v[i].ns, ns) == 0; i++) {
        const struct pdb *p = &b->v[i];
        if (!p->selects || !core_label_selector_matches(&p->sel, labels) ||
            (name && json_object_get(p->disrupted, name)))
            continue;
        if (b->stamp[i] != b->calls) {
            b->stamp[i] = b->calls;
            b->left[i] = p->allowed;
        }
        if (--b->left[i] < 0)
            viol = 1;
    }
    return viol;
}

void ext_pdbs_mark(struct ext_pdbs *b, const json_t *const *gone, int ngone,
                   const json_t *const *pods, int n, unsigned char *viol)
{
    if (!b || !b->n)
        return;
    if (++b->calls == 0) { /* wrapped: no stamp may match a new call */
        memset(b->stamp, 0, (size_t)b->cap * sizeof *b->stamp);
        b->calls = 1;
    }
    for (int k = 0; k < ngone; k++)
        if (gone[k])
            take(b, gone[k]);
    for (int k = 0; k < n; k++)
        if (pods[k] && take(b, pods[k]))
            viol[k] = 1;
}
