/* ext/memo.c - see memo.h. */
#include <stdlib.h>
#include <string.h>

#include "ext/memo.h"
#include "util/buf.h"

struct ext_text *ext_text_wrap(char *buf, size_t len)
{
    struct ext_text *t = malloc(sizeof *t);
    if (!t) {
        free(buf);
        return NULL;
    }
    t->refs = 1;
    t->len = len;
    t->buf = buf;
    return t;
}

struct ext_text *ext_text_ref(struct ext_text *t)
{
    if (t)
        __atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
    return t;
}

void ext_text_put(struct ext_text *t)
{
    if (t && __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(t->buf);
        free(t);
    }
}

struct ext_memo {
    int slots;
    uint64_t tick;
    unsigned long epochs;
    struct ext_memo_entry *e;
    struct ext_memo_col cols[EXT_MEMO_COLS];
};

struct ext_memo *ext_memo_new(int slots)
{
    struct ext_memo *m = calloc(1, sizeof *m);
    if (!m || !(m->e = calloc((size_t)slots, sizeof *m->e))) {
        free(m);
        return NULL;
    }
    m->slots = slots;
    return m;
}

void ext_memo_entry_clear(struct ext_memo_entry *en)
{
    if (en->reason)
        for (int i = 0; i < en->n; i++)
            free(en->reason[i]);
    free(en->fit);
    free(en->stamp);
    free(en->reason);
    ext_text_put(en->reply);
    ext_namelist_put(en->list);
    free(en->key);
    memset(en, 0, sizeof *en);
}

void ext_memo_free(struct ext_memo *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->slots; i++)
        ext_memo_entry_clear(&m->e[i]);
    for (int i = 0; i < EXT_MEMO_COLS; i++) {
        free(m->cols[i].fit);
        free(m->cols[i].stamp);
        free(m->cols[i].key);
    }
    free(m->e);
    free(m);
}

/* ---- the pod key ---------------------------------------------------------- */

static void put_i64(struct gs_buf *b, int64_t v) { gs_buf_put(b, &v, sizeof v); }

/* Length-prefixed, so that no two different lists of strings write the
 * same bytes; NULL is told apart from "". */
static void put_str(struct gs_buf *b, const char *s)
{
    put_i64(b, s ? (int64_t)strlen(s) : -1);
    if (s)
        gs_buf_str(b, s);
}

static void put_term(struct gs_buf *b, const struct core_term *term)
{
    put_i64(b, term->n_reqs);
    for (int i = 0; i < term->n_reqs; i++) {
        const struct core_requirement *q = &term->reqs[i];
        put_str(b, q->key);
        put_i64(b, q->field);
        put_i64(b, q->op);
        put_i64(b, q->n_values);
        for (int v = 0; v < q->n_values; v++)
            put_str(b, q->values[v]);
    }
}

int ext_memo_key(const struct core_pod *pod, const char *policy, char **key, size_t *len)
{
    struct gs_buf b = {0};
    const struct core_request *r = &pod->req;
    put_str(&b, policy);
    put_i64(&b, r->kind);
    put_i64(&b, r->num_gpu);
    put_i64(&b, r->mem_mib);
    put_i64(&b, r->milli);
    put_str(&b, r->mig_profile);
    put_i64(&b, r->mig_count);
    put_i64(&b, r->cpu_milli);
    put_i64(&b, r->mem_bytes);
    put_i64(&b, r->n_types);
    for (int i = 0; i < r->n_types; i++)
        put_str(&b, r->types[i]);
    put_i64(&b, r->n_types_exclude);
    for (int i = 0; i < r->n_types_exclude; i++)
        put_str(&b, r->types_exclude[i]);
    put_i64(&b, pod->n_selector);
    for (int i = 0; i < pod->n_selector; i++) {
        put_str(&b, pod->selector_keys[i]);
        put_str(&b, pod->selector_values[i]);
    }
    put_i64(&b, pod->n_terms);
    for (int t = 0; t < pod->n_terms; t++)
        put_term(&b, &pod->terms[t]);
    put_i64(&b, pod->n_prefs); /* they decide the choice too (core_soft_at) */
    for (int t = 0; t < pod->n_prefs; t++) {
        put_i64(&b, pod->pref_weights[t]);
        put_term(&b, &pod->prefs[t]);
    }
    /* pod (anti-)affinity and spread decide the choice too; their picks
     * depend on the pod's namespace and on the other pods, whose changes
     * move the cluster version or the labels generation */
    put_i64(&b, pod->n_pod_terms);
    for (int t = 0; t < pod->n_pod_terms; t++) {
        const struct core_pod_term *pt = &pod->pod_terms[t];
        put_i64(&b, pt->weight);
        put_i64(&b, pt->max_skew);
        put_str(&b, pt->topology_key);
        put_i64(&b, pt->all_namespaces);
        put_i64(&b, pt->n_namespaces);
        for (int k = 0; k < pt->n_namespaces; k++)
            put_str(&b, pt->namespaces[k]);
        put_i64(&b, pt->selects);
        put_term(&b, &pt->selector);
    }
    if (pod->n_pod_terms || pod->pod_terms_obj)
        put_str(&b, pod->ns);
    /* placed pods' terms pick the pod by its labels (pod_terms_obj is set
     * while any placed pod has terms): pods of one shape differ in them */
    if (pod->pod_terms_obj) {
        const json_t *labels =
            json_object_get(json_object_get(pod->pod_terms_obj, "metadata"), "labels");
        char *l = labels ? json_dumps(labels, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
                         : NULL;
        b.oom |= labels && !l;
        put_str(&b, l ? l : "");
        free(l);
    }
    put_i64(&b, pod->n_tolerations);
    for (int i = 0; i < pod->n_tolerations; i++) {
        const struct core_toleration *t = &pod->tolerations[i];
        put_str(&b, t->key);
        put_str(&b, t->value);
        put_i64(&b, t->op_exists);
        put_str(&b, t->effect);
    }
    if (b.oom || b.len > EXT_MEMO_KEY_MAX) {
        gs_buf_free(&b);
        return -1;
    }
    *key = b.buf;
    *len = b.len;
    return 0;
}

/* ---- entries -------------------------------------------------------------- */

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

struct ext_memo_entry *ext_memo_get(struct ext_memo *m, struct ext_namelist *list, int verb,
                                    char *key, size_t key_len)
{
    uint64_t h = hash_bytes(key, key_len) ^ (uint64_t)verb;
    struct ext_memo_entry *lru = &m->e[0];
    m->tick++;
    for (int i = 0; i < m->slots; i++) {
        struct ext_memo_entry *en = &m->e[i];
        if (en->list == list && en->verb == verb && en->key_hash == h &&
            en->key_len == key_len && memcmp(en->key, key, key_len) == 0) {
            en->used = m->tick;
            free(key);
            return en;
        }
        if (en->used < lru->used)
            lru = en;
    }
    ext_memo_entry_clear(lru);
    if (verb == EXT_MEMO_FILTER && ext_memo_entry_init(lru, list->n) < 0) {
        free(key);
        return NULL;
    }
    lru->list = ext_namelist_ref(list);
    lru->verb = verb;
    lru->key = key;
    lru->key_len = key_len;
    lru->key_hash = h;
    lru->used = m->tick;
    lru->epoch = ++m->epochs;
    return lru;
}

int ext_memo_entry_init(struct ext_memo_entry *en, int nodes)
{
    size_t n = (size_t)nodes + 1;
    en->n = nodes;
    en->fit = calloc(n, 1);
    en->stamp = calloc(n, sizeof *en->stamp);
    en->reason = calloc(n, sizeof *en->reason);
    if (!en->fit || !en->stamp || !en->reason) {
        free(en->fit);
        free(en->stamp);
        free(en->reason);
        en->fit = NULL;
        en->stamp = NULL;
        en->reason = NULL;
        return -1;
    }
    return 0;
}

void ext_memo_set_reply(struct ext_memo_entry *en, struct ext_text *t)
{
    ext_text_put(en->reply);
    en->reply = t;
}

/* ---- verdict columns ------------------------------------------------------ */

struct ext_memo_col *ext_memo_col_get(struct ext_memo *m, const char *key, size_t key_len,
                                      int nodes)
{
    uint64_t h = hash_bytes(key, key_len);
    struct ext_memo_col *col = NULL, *lru = &m->cols[0];
    m->tick++;
    for (int i = 0; i < EXT_MEMO_COLS && !col; i++) {
        struct ext_memo_col *c = &m->cols[i];
        if (c->key && c->key_hash == h && c->key_len == key_len &&
            memcmp(c->key, key, key_len) == 0)
            col = c;
        else if (c->used < lru->used)
            lru = c;
    }
    if (!col) {
        char *k = malloc(key_len + 1);
        if (!k)
            return NULL;
        memcpy(k, key, key_len);
        col = lru;
        free(col->key);
        col->key = k;
        col->key_len = key_len;
        col->key_hash = h;
        if (col->cap) {
            memset(col->fit, 0, (size_t)col->cap);
            memset(col->stamp, 0, (size_t)col->cap * sizeof *col->stamp);
        }
        col->epoch = ++m->epochs;
    }
    col->used = m->tick;
    if (nodes > col->cap) {
        unsigned char *f = realloc(col->fit, (size_t)nodes);
        if (f)
            col->fit = f;
        uint64_t *st = f ? realloc(col->stamp, (size_t)nodes * sizeof *st) : NULL;
        if (!st) {
            /* emptied and un-keyed: asked again, it starts afresh */
            free(col->key);
            col->key = NULL;
            col->used = 0;
            return NULL;
        }
        col->stamp = st;
        memset(col->fit + col->cap, 0, (size_t)(nodes - col->cap));
        memset(col->stamp + col->cap, 0, (size_t)(nodes - col->cap) * sizeof *st);
        col->cap = nodes;
    }
    return col;
}
