/*
 * core/cluster.c - the cluster model: nodes by name, allocations by pod UID,
 * and the exact free-capacity bookkeeping of reserve/unreserve.
 *
 * Both indexes are open-addressing hash tables of positions into dense
 * arrays; removal swaps the last element into the hole and rebuilds the
 * index (removals are rare next to lookups). Every change to a node goes
 * through core_node_refresh(), which recomputes the cached per-GPU shares,
 * the scoring key and the node's fragmentation, and renews its state stamp.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* ---- small helpers ---------------------------------------------------- */

uint64_t core_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static char *dup_str(const char *s)
{
    return strdup(s ? s : "");
}

static int grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* ---- hash indexes ----------------------------------------------------- */

typedef const char *(*key_fn)(const void *elem);

static const char *node_key(const void *p) { return ((const struct core_node *)p)->name; }
static const char *alloc_key(const void *p) { return ((const struct core_alloc *)p)->pod_uid; }

/* Rebuilds an index of `n` elements so that it is at most half full. */
static int index_rebuild(int **idx, int *cap, void *const *elems, int n, key_fn key)
{
    int ncap = 64;
    while (ncap < 2 * n + 2)
        ncap *= 2;
    int *t = calloc((size_t)ncap, sizeof *t);
    if (!t)
        return -1;
    for (int i = 0; i < n; i++) {
        uint64_t h = core_hash_str(key(elems[i]));
        size_t s = h & (size_t)(ncap - 1);
        while (t[s])
            s = (s + 1) & (size_t)(ncap - 1);
        t[s] = i + 1;
    }
    free(*idx);
    *idx = t;
    *cap = ncap;
    return 0;
}

static int index_find(const int *idx, int cap, void *const *elems, const char *name, key_fn key)
{
    if (!idx)
        return -1;
    size_t s = core_hash_str(name) & (size_t)(cap - 1);
    while (idx[s]) {
        if (strcmp(key(elems[idx[s] - 1]), name) == 0)
            return idx[s] - 1;
        s = (s + 1) & (size_t)(cap - 1);
    }
    return -1;
}

/* Inserts position `pos` (already stored in elems), growing when half full. */
static int index_add(int **idx, int *cap, void *const *elems, int n, int pos, key_fn key)
{
    if (!*idx || 2 * n + 2 > *cap)
        return index_rebuild(idx, cap, elems, n, key);
    size_t s = core_hash_str(key(elems[pos])) & (size_t)(*cap - 1);
    while ((*idx)[s])
        s = (s + 1) & (size_t)(*cap - 1);
    (*idx)[s] = pos + 1;
    return 0;
}

/* Removes the element at position `pos` from the index, where the caller
 * will move the last element (position `last`) into `pos`. Linear probing
 * with backward-shift deletion, so no tombstones accumulate. */
static void index_del(int *idx, int cap, void *const *elems, int pos, int last, key_fn key)
{
    size_t mask = (size_t)cap - 1;
    size_t s = core_hash_str(key(elems[pos])) & mask;
    while (idx[s] != pos + 1)
        s = (s + 1) & mask;
    size_t hole = s;
    for (size_t j = (hole + 1) & mask; idx[j]; j = (j + 1) & mask) {
        size_t home = core_hash_str(key(elems[idx[j] - 1])) & mask;
        /* move j back into the hole unless its home lies in (hole, j] */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            idx[hole] = idx[j];
            hole = j;
        }
    }
    idx[hole] = 0;
    if (last != pos) { /* the last element will live at pos */
        s = core_hash_str(key(elems[last])) & mask;
        while (idx[s] != last + 1)
            s = (s + 1) & mask;
        idx[s] = pos + 1;
    }
}

/* ---- lifecycle -------------------------------------------------------- */

struct core_cluster *core_cluster_new(void)
{
    struct core_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->wver = 1;
    core_cluster_set_seed(c, 0);
    return c;
}

static void node_free(struct core_node *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->n_labels; i++) {
        free(n->label_keys[i]);
        free(n->label_values[i]);
    }
    free(n->label_keys);
    free(n->label_values);
    for (int i = 0; i < n->n_taints; i++) {
        free((char *)n->taints[i].key);
        free((char *)n->taints[i].value);
        free((char *)n->taints[i].effect);
    }
    free(n->taints);
    for (int i = 0; i < n->n_gpus; i++)
        free(n->gpus[i].mig);
    free(n->gpus);
    free(n->priv->fc_cnt);
    free(n->priv->fc_small);
    free(n->name);
    free(n);
}

void core_cluster_free(struct core_cluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_nodes; i++)
        node_free(c->nodes[i]);
    for (int i = 0; i < c->n_allocs; i++)
        free(c->allocs[i]);
    free(c->nodes);
    free(c->node_index);
    free(c->allocs);
    free(c->alloc_index);
    core_workload_free(c);
    free(c->hot);
    free(c->ranks);
    free(c->feasible);
    free(c->scores);
    free(c->memo);
    free(c->keys);
    for (int i = 0; c->cols && i < CORE_COLS; i++)
        free(c->cols[i].e);
    free(c->cols);
    free(c->stamps);
    free(c->link_memo);
    free(c);
}

static uint32_t node_rank(uint64_t seed, const char *name)
{
    return (uint32_t)(core_mix64(seed ^ core_hash_str(name)) >> 32);
}

void core_cluster_set_seed(struct core_cluster *c, uint64_t seed)
{
    c->seed = seed;
    c->rng = core_mix64(seed ^ 0x5eed5eed5eedULL);
    for (int i = 0; i < c->n_nodes; i++) {
        c->nodes[i]->priv->rank = node_rank(seed, c->nodes[i]->name);
        c->hot[i].rank = c->nodes[i]->priv->rank;
    }
}

/* ---- models ----------------------------------------------------------- */

int core_model_id(struct core_cluster *c, const char *model, int add)
{
    for (int i = 0; i < c->n_models; i++)
        if (strcmp(c->models[i], model) == 0)
            return i;
    if (!add || c->n_models >= CORE_MAX_MODELS)
        return -1;
    snprintf(c->models[c->n_models], CORE_MODEL_MAX, "%s", model);
    c->wver++; /* class model masks must be re-resolved */
    c->wdirty = 1;
    return c->n_models++;
}

const char *core_cluster_model(const struct core_cluster *c, int model_id)
{
    return model_id >= 0 && model_id < c->n_models ? c->models[model_id] : NULL;
}

int core_cluster_model_gpus(const struct core_cluster *c, int model_id)
{
    return model_id >= 0 && model_id < c->n_models ? c->model_gpus[model_id] : 0;
}

uint64_t core_models_norm(const struct core_cluster *c, uint64_t mask)
{
    uint64_t all = c->n_models >= 64 ? ~0ULL : (1ULL << c->n_models) - 1;
    return !mask || (mask & all) == all ? ~0ULL : mask;
}

/* Adds (sign +1) or takes away (-1) a node's GPUs in the per-model counts. */
static void count_models(struct core_cluster *c, const struct core_node *n, int sign)
{
    for (int i = 0; i < n->n_gpus; i++)
        c->model_gpus[n->gpus[i].model_id] += sign;
    c->link_nodes[n->priv->link_best] += sign;
    if (n->n_gpus)
        c->cap_ver++;
}

int core_cluster_model_count(const struct core_cluster *c)
{
    return c->n_models;
}

/* ---- node state cache ------------------------------------------------- */

int64_t core_gpu_mem_used(const struct core_gpu *g)
{
    int64_t m = g->mem_mib - g->free_mem_mib;
    for (int i = 0; g->mig_enabled && i < g->n_mig; i++)
        m += g->mig[i].used ? g->mig[i].mem_mib : 0;
    return m;
}

int core_gpu_milli_used(const struct core_gpu *g)
{
    int milli = CORE_MILLI - g->free_milli;
    if (g->mig_enabled && g->mem_mib > 0) { /* MIG pods take no share: their slices do */
        int64_t mig = 0;
        for (int i = 0; i < g->n_mig; i++)
            mig += g->mig[i].used ? g->mig[i].mem_mib : 0;
        milli += (int)(mig * CORE_MILLI / g->mem_mib);
    }
    return milli;
}

int core_gpu_held_whole(const struct core_gpu *g)
{
    int used = 0;
    for (int m = 0; m < g->n_mig; m++)
        used += g->mig[m].used;
    return g->n_pods > used;
}

int core_gpu_free_share(const struct core_gpu *g)
{
    int64_t m = g->mem_mib > 0 ? g->free_mem_mib * CORE_MILLI / g->mem_mib : g->free_milli;
    m = m < g->free_milli ? m : g->free_milli;
    return m > 0 ? (int)m : 0; /* overcommitted (core_cluster_upsert_node): none */
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void hot_update(struct core_cluster *c, const struct core_node *n)
{
    const struct core_node_priv *p = n->priv;
    struct core_node_hot *h = &c->hot[p->pos];
    h->free_cpu = n->free_cpu_milli;
    h->free_mem = n->free_mem_bytes;
    h->model_mask = p->model_mask;
    h->pods_left = n->max_pods ? n->max_pods - n->n_pods : INT32_MAX;
    h->free_share = p->free_share;
    h->rank = p->rank;
    h->n_usable = (int16_t)p->n_usable;
    h->n_whole = (int16_t)p->n_whole;
    h->max_free_milli = (int16_t)p->max_free_milli;
    h->available = (uint8_t)n->available;
    h->tainted = n->n_taints > 0;
    h->key_serial = p->key_serial;
    c->stamps[p->pos] = ++c->stamp_seq;
}

/* The serial of node key k (hash h): see core_key_slot. 0 when out of
 * memory (the node is then scored without the score cache). */
static uint64_t key_serial(struct core_cluster *c, const struct core_node_key *k, uint64_t h)
{
    if (!c->keys && !(c->keys = calloc(CORE_KEY_SLOTS, sizeof *c->keys)))
        return 0;
    struct core_key_slot *s = &c->keys[h & (CORE_KEY_SLOTS - 1)];
    if (s->serial && memcmp(&s->key, k, sizeof *k) == 0)
        return s->serial;
    s->key = *k;
    s->serial = ++c->key_seq;
    return s->serial;
}

/* Recomputes the node's cached state after any change and keeps the
 * cluster's fragmentation sum in step. */
void core_node_refresh(struct core_cluster *c, struct core_node *n)
{
    struct core_node_priv *p = n->priv;
    struct core_node_key *k = &p->key;
    double old_frag = p->frag;
    int had_frag = p->frag_wver == c->wver && c->frag_sum_wver == c->wver;

    n->generation++;
    memset(k, 0, sizeof *k);
    p->free_share = 0;
    p->n_usable = p->n_whole = p->max_free_milli = 0;
    p->whole_mask = 0;
    p->model_mask = 0;
    p->homogeneous = 1;
    int first_model = -1;
    for (int i = 0; i < n->n_gpus; i++) {
        const struct core_gpu *g = &n->gpus[i];
        p->usable[i] = g->healthy && !g->mig_enabled;
        p->share[i] = p->usable[i] ? core_gpu_free_share(g) : 0;
        p->gfree[i] = (int16_t)g->free_milli;
        p->gwhole[i] = g->n_pods == 0 && g->free_milli == CORE_MILLI && g->free_mem_mib == g->mem_mib;
        p->gmodel[i] = (uint8_t)g->model_id;
        if (!p->usable[i])
            continue;
        p->free_share += p->share[i];
        p->n_usable++;
        p->n_whole += p->gwhole[i];
        p->whole_mask |= (uint32_t)p->gwhole[i] << i;
        if (g->free_milli > p->max_free_milli)
            p->max_free_milli = g->free_milli;
        p->model_mask |= 1ULL << g->model_id;
        if (first_model < 0)
            first_model = g->model_id;
        else if (g->model_id != first_model)
            p->homogeneous = 0;
        int64_t ms = g->mem_mib > 0 ? g->free_mem_mib * CORE_MILLI / g->mem_mib : CORE_MILLI;
        int fm = g->free_milli;
        ms = ms < 0 ? 0 : ms > CORE_MILLI ? CORE_MILLI : ms;
        fm = fm < 0 ? 0 : fm > CORE_MILLI ? CORE_MILLI : fm;
        k->split[k->n_usable] = fm << 11 | (int)ms;
        k->share[k->n_usable++] = p->share[i];
    }
    qsort(k->share, (size_t)k->n_usable, sizeof k->share[0], cmp_int);
    qsort(k->split, (size_t)k->n_usable, sizeof k->split[0], cmp_int);
    k->free_cpu = n->free_cpu_milli;
    k->model_mask = p->model_mask;
    for (int i = 0; i < n->n_gpus && !k->gpu_mem; i++)
        if (p->usable[i])
            k->gpu_mem = n->gpus[i].mem_mib;
    for (int t = 0; t < CORE_NTAGS; t++)
        if (p->tag_count[t])
            k->tags |= 1u << t;
    uint64_t h = core_mix64((uint64_t)k->free_cpu) ^ core_mix64(k->model_mask + 7) ^
                 core_mix64((uint64_t)k->gpu_mem + 13);
    h = core_mix64(h ^ k->tags ^ ((uint64_t)k->n_usable << 40));
    for (int i = 0; i < k->n_usable; i++)
        h = core_mix64(h ^ (uint64_t)k->share[i] ^ ((uint64_t)k->split[i] << 20));
    p->key_hash = h;
    p->key_serial = p->homogeneous ? key_serial(c, k, h) : 0;
    hot_update(c, n);

    /* fragmentation, only when a workload is in force and the sum is live */
    p->frag_wver = 0;
    if (c->frag_sum_wver == c->wver && !c->wdirty) {
        double f = core_node_frag(c, n);
        c->frag_sum += f - (had_frag ? old_frag : 0);
    }
}

/* ---- nodes ------------------------------------------------------------ */

static int check_str(const char *s, size_t max, const char *field, struct gs_err *e)
{
    if (!s || !*s)
        return gs_errf(e, GS_EINVAL, "%s: empty", field);
    if (strlen(s) >= max)
        return gs_errf(e, GS_EINVAL, "%s: longer than %zu bytes", field, max - 1);
    return 0;
}

static int validate_spec(const struct core_node_spec *s, struct gs_err *e)
{
    char f[96];
    int rc;

    if ((rc = check_str(s->name, CORE_NAME_MAX, "name", e)) < 0)
        return rc;
    if (s->cpu_milli < 0)
        return gs_errf(e, GS_EINVAL, "node %s: cpu_milli: %lld is negative", s->name,
                       (long long)s->cpu_milli);
    if (s->mem_bytes < 0)
        return gs_errf(e, GS_EINVAL, "node %s: memory: %lld is negative", s->name,
                       (long long)s->mem_bytes);
    if (s->max_pods < 0)
        return gs_errf(e, GS_EINVAL, "node %s: max_pods: %d is negative", s->name, s->max_pods);
    if (s->n_gpus < 0 || s->n_gpus > CORE_MAX_GPUS)
        return gs_errf(e, GS_EINVAL, "node %s: gpus: %d GPUs, at most %d supported", s->name,
                       s->n_gpus, CORE_MAX_GPUS);
    if (s->n_labels < 0 || s->n_taints < 0 || (s->n_labels && (!s->label_keys || !s->label_values)) ||
        (s->n_taints && !s->taints))
        return gs_errf(e, GS_EINVAL, "node %s: labels/taints: bad arrays", s->name);
    for (int i = 0; i < s->n_labels; i++)
        if (!s->label_keys[i] || !s->label_values[i])
            return gs_errf(e, GS_EINVAL, "node %s: labels[%d]: missing key or value", s->name, i);
    for (int i = 0; i < s->n_taints; i++)
        if (!s->taints[i].key)
            return gs_errf(e, GS_EINVAL, "node %s: taints[%d].key: missing", s->name, i);
    uint32_t seen = 0;
    for (int i = 0; i < s->n_gpus; i++) {
        const struct core_gpu_spec *g = &s->gpus[i];
        if (g->index < 0 || g->index >= CORE_MAX_GPUS)
            return gs_errf(e, GS_EINVAL, "node %s: gpus[%d].index: %d is out of range 0..%d",
                           s->name, i, g->index, CORE_MAX_GPUS - 1);
        if (seen & (1u << g->index))
            return gs_errf(e, GS_EINVAL, "node %s: gpus[%d].index: %d appears twice", s->name, i,
                           g->index);
        seen |= 1u << g->index;
        snprintf(f, sizeof f, "node %s: gpus[%d].model", s->name, i);
        if (!memchr(g->model, 0, sizeof g->model) || !g->model[0])
            return gs_errf(e, GS_EINVAL, "%s: empty", f);
        if (!memchr(g->uuid, 0, sizeof g->uuid))
            return gs_errf(e, GS_EINVAL, "node %s: gpus[%d].uuid: not terminated", s->name, i);
        if (g->mem_mib < 0)
            return gs_errf(e, GS_EINVAL, "node %s: gpus[%d].memory_mib: %lld is negative",
                           s->name, i, (long long)g->mem_mib);
        if (g->n_mig < 0 || g->n_mig > CORE_MAX_MIG)
            return gs_errf(e, GS_EINVAL, "node %s: gpus[%d].mig: %d instances, at most %d",
                           s->name, i, g->n_mig, CORE_MAX_MIG);
        for (int m = 0; m < g->n_mig; m++) {
            if (!memchr(g->mig[m].profile, 0, sizeof g->mig[m].profile) || !g->mig[m].profile[0])
                return gs_errf(e, GS_EINVAL, "node %s: gpus[%d].mig[%d].profile: empty", s->name,
                               i, m);
            if (!memchr(g->mig[m].uuid, 0, sizeof g->mig[m].uuid) || g->mig[m].mem_mib < 0)
                return gs_errf(e, GS_EINVAL, "node %s: gpus[%d].mig[%d]: bad uuid or memory",
                               s->name, i, m);
        }
        for (int j = 0; j < CORE_MAX_GPUS; j++)
            if ((int)g->link[j] < 0 || g->link[j] > CORE_LINK_NVLINK)
                return gs_errf(e, GS_EINVAL, "node %s: gpus[%d].link[%d]: bad link type %d",
                               s->name, i, j, (int)g->link[j]);
    }
    return 0;
}

static int cmp_gpu_spec(const void *a, const void *b)
{
    const struct core_gpu_spec *x = *(const struct core_gpu_spec *const *)a;
    const struct core_gpu_spec *y = *(const struct core_gpu_spec *const *)b;
    return (x->index > y->index) - (x->index < y->index);
}

/* Builds a fresh node (no allocations) from a validated spec. */
static struct core_node *node_build(struct core_cluster *c, const struct core_node_spec *s)
{
    /* the node and its private cache in one block, for locality */
    struct core_node *n = calloc(1, sizeof *n + sizeof *n->priv);
    if (!n)
        return NULL;
    n->priv = (struct core_node_priv *)(n + 1);
    n->name = dup_str(s->name);
    n->label_keys = calloc((size_t)s->n_labels + 1, sizeof *n->label_keys);
    n->label_values = calloc((size_t)s->n_labels + 1, sizeof *n->label_values);
    n->taints = calloc((size_t)s->n_taints + 1, sizeof *n->taints);
    n->gpus = calloc((size_t)s->n_gpus + 1, sizeof *n->gpus);
    if (!n->name || !n->label_keys || !n->label_values || !n->taints || !n->gpus)
        goto fail;
    for (; n->n_labels < s->n_labels; n->n_labels++) {
        n->label_keys[n->n_labels] = dup_str(s->label_keys[n->n_labels]);
        n->label_values[n->n_labels] = dup_str(s->label_values[n->n_labels]);
        if (!n->label_keys[n->n_labels] || !n->label_values[n->n_labels]) {
            n->n_labels++;
            goto fail;
        }
    }
    for (; n->n_taints < s->n_taints; n->n_taints++) {
        struct core_taint *t = &n->taints[n->n_taints];
        t->key = dup_str(s->taints[n->n_taints].key);
        t->value = dup_str(s->taints[n->n_taints].value);
        t->effect = dup_str(s->taints[n->n_taints].effect);
        if (!t->key || !t->value || !t->effect) {
            n->n_taints++;
            goto fail;
        }
    }
    n->cpu_milli = n->free_cpu_milli = s->cpu_milli;
    n->mem_bytes = n->free_mem_bytes = s->mem_bytes;
    n->max_pods = s->max_pods;
    n->available = 1;

    const struct core_gpu_spec *order[CORE_MAX_GPUS];
    for (int i = 0; i < s->n_gpus; i++)
        order[i] = &s->gpus[i];
    qsort(order, (size_t)s->n_gpus, sizeof order[0], cmp_gpu_spec);
    for (int i = 0; i < s->n_gpus; i++) {
        const struct core_gpu_spec *gs = order[i];
        struct core_gpu *g = &n->gpus[i];
        n->n_gpus = i + 1;
        g->index = gs->index;
        memcpy(g->uuid, gs->uuid, sizeof g->uuid);
        memcpy(g->model, gs->model, sizeof g->model);
        g->model_id = core_model_id(c, gs->model, 1);
        if (g->model_id < 0)
            goto fail;
        g->mem_mib = g->free_mem_mib = gs->mem_mib;
        g->free_milli = CORE_MILLI;
        g->healthy = gs->healthy;
        g->numa = gs->numa;
        g->mig_enabled = gs->mig_enabled;
        if (gs->n_mig) {
            g->mig = calloc((size_t)gs->n_mig, sizeof *g->mig);
            if (!g->mig)
                goto fail;
            g->n_mig = gs->n_mig;
            for (int m = 0; m < gs->n_mig; m++) {
                memcpy(g->mig[m].uuid, gs->mig[m].uuid, sizeof g->mig[m].uuid);
                memcpy(g->mig[m].profile, gs->mig[m].profile, sizeof g->mig[m].profile);
                g->mig[m].mem_mib = gs->mig[m].mem_mib;
                g->mig[m].unhealthy = gs->mig[m].unhealthy;
            }
        }
    }
    for (int a = 0; a < n->n_gpus; a++)
        for (int b = 0; b < n->n_gpus; b++) {
            enum core_link l = order[a]->link[order[b]->index];
            if (l == CORE_LINK_UNKNOWN && a != b && order[a]->numa >= 0 && order[b]->numa >= 0)
                l = order[a]->numa == order[b]->numa ? CORE_LINK_NODE : CORE_LINK_SYS;
            n->gpus[a].link[b] = (uint8_t)(a == b ? CORE_LINK_NVLINK : l);
        }
    n->priv->link_alike = n->n_gpus > 1 ? n->gpus[0].link[1] : CORE_LINK_NVLINK;
    n->priv->link_hash = core_mix64((uint64_t)n->n_gpus);
    for (int a = 0; a < n->n_gpus; a++)
        for (int b = a + 1; b < n->n_gpus; b++) {
            if (n->gpus[a].link[b] != n->priv->link_alike)
                n->priv->link_alike = -1;
            if (n->gpus[a].link[b] > n->priv->link_best)
                n->priv->link_best = n->gpus[a].link[b];
            n->priv->link_hash = core_mix64(n->priv->link_hash ^ n->gpus[a].link[b]);
        }
    n->priv->link_hash |= 1; /* 0 marks an empty memo slot */
    n->priv->rank = node_rank(c->seed, n->name);
    return n;
fail:
    node_free(n);
    return NULL;
}

/* Applies an allocation's resources to a node: sign +1 takes, -1 gives back.
 * With check set, only verifies that taking would not oversubscribe and
 * fills *e; nothing changes. */
int core_alloc_apply(struct core_node *n, const struct core_alloc *a, int sign, int check,
                     struct gs_err *e)
{
    if (check) {
        /* against the allocations alone (core_cluster_set_others) */
        int64_t cpu = n->free_cpu_milli + n->others_cpu_milli;
        int64_t mem = n->free_mem_bytes + n->others_mem_bytes;
        int pods = n->n_pods - n->others_pods;
        int room = check != CORE_CHECK_SHAPE; /* and whether it fits */
        if (room && a->cpu_milli > cpu)
            return gs_errf(e, GS_ENOFIT, "node %s has %lldm CPU free, pod %s needs %lldm",
                           n->name, (long long)cpu, a->pod_name, (long long)a->cpu_milli);
        if (room && a->mem_bytes > mem)
            return gs_errf(e, GS_ENOFIT, "node %s has %lld MiB memory free, pod %s needs %lld MiB",
                           n->name, (long long)(mem >> 20), a->pod_name,
                           (long long)((a->mem_bytes + (1 << 20) - 1) >> 20));
        if (room && n->max_pods && pods >= n->max_pods)
            return gs_errf(e, GS_ENOFIT, "node %s already runs %d of %d pods", n->name, pods,
                           n->max_pods);
        for (int i = 0; i < a->n; i++) {
            if (a->gpu[i] < 0 || a->gpu[i] >= n->n_gpus)
                return gs_errf(e, GS_EINVAL, "pod %s: gpu[%d]: position %d not on node %s (%d GPUs)",
                               a->pod_name, i, a->gpu[i], n->name, n->n_gpus);
            const struct core_gpu *g = &n->gpus[a->gpu[i]];
            for (int j = 0; j < i; j++)
                if (a->gpu[j] == a->gpu[i] && (a->kind != CORE_REQ_MIG || a->mig[j] == a->mig[i]))
                    return gs_errf(e, GS_EINVAL, "pod %s: GPU %d listed twice", a->pod_name,
                                   g->index);
            if (a->kind == CORE_REQ_MIG) {
                if (!g->mig_enabled || a->mig[i] < 0 || a->mig[i] >= g->n_mig)
                    return gs_errf(e, GS_EINVAL, "pod %s: GPU %d has no MIG instance %d",
                                   a->pod_name, g->index, a->mig[i]);
                if (g->mig[a->mig[i]].used)
                    return gs_errf(e, GS_ENOFIT, "MIG instance %s on GPU %d is already in use",
                                   g->mig[a->mig[i]].uuid, g->index);
                if (room && core_gpu_held_whole(g))
                    return gs_errf(e, GS_ENOFIT, "GPU %d is in MIG mode but still held by a "
                                   "pod that took it before", g->index);
                continue;
            }
            if (room && g->mig_enabled)
                return gs_errf(e, GS_ENOFIT, "GPU %d is in MIG mode", g->index);
            if (a->milli[i] < 0 || a->milli[i] > CORE_MILLI || a->mem_mib[i] < 0)
                return gs_errf(e, GS_EINVAL, "pod %s: GPU %d: bad share (%d thousandths, %lld MiB)",
                               a->pod_name, g->index, a->milli[i], (long long)a->mem_mib[i]);
            if (a->kind == CORE_REQ_WHOLE) {
                if (a->milli[i] != CORE_MILLI || a->mem_mib[i] != g->mem_mib)
                    return gs_errf(e, GS_EINVAL, "pod %s: whole GPU %d must hold 1000 thousandths "
                                   "and all %lld MiB", a->pod_name, g->index,
                                   (long long)g->mem_mib);
                if (room && g->n_pods)
                    return gs_errf(e, GS_ENOFIT, "GPU %d is in use by %d pod(s), pod %s needs it "
                                   "whole", g->index, g->n_pods, a->pod_name);
            }
            if (room && a->mem_mib[i] > g->free_mem_mib)
                return gs_errf(e, GS_ENOFIT, "GPU %d has %lld MiB free, pod %s needs %lld MiB",
                               g->index, (long long)g->free_mem_mib, a->pod_name,
                               (long long)a->mem_mib[i]);
            if (room && a->milli[i] > g->free_milli)
                return gs_errf(e, GS_ENOFIT, "GPU %d has %d thousandths of compute free, pod %s "
                               "needs %d", g->index, g->free_milli, a->pod_name, a->milli[i]);
        }
        return 0;
    }
    n->free_cpu_milli -= sign * a->cpu_milli;
    n->free_mem_bytes -= sign * a->mem_bytes;
    n->n_pods += sign;
    for (int i = 0; i < a->n; i++) {
        struct core_gpu *g = &n->gpus[a->gpu[i]];
        g->n_pods += sign;
        if (a->kind == CORE_REQ_MIG) {
            g->mig[a->mig[i]].used = sign > 0;
            continue;
        }
        g->free_mem_mib -= sign * a->mem_mib[i];
        g->free_milli -= sign * a->milli[i];
    }
    n->priv->tag_count[core_alloc_tag(a)] += sign;
    return 0;
}

/* Replaces what the pods without an allocation take from n. */
static void others_apply(struct core_node *n, int64_t cpu_milli, int64_t mem_bytes, int pods)
{
    n->free_cpu_milli += n->others_cpu_milli - cpu_milli;
    n->free_mem_bytes += n->others_mem_bytes - mem_bytes;
    n->n_pods += pods - n->others_pods;
    n->others_cpu_milli = cpu_milli;
    n->others_mem_bytes = mem_bytes;
    n->others_pods = pods;
}

static int64_t alloc_milli(const struct core_alloc *a)
{
    int64_t m = 0;
    if (a->kind == CORE_REQ_MIG)
        return 0;
    for (int i = 0; i < a->n; i++)
        m += a->milli[i];
    return m;
}

static int ensure_scratch(struct core_cluster *c)
{
    int cap = c->cap_nodes;
    struct core_node **f = realloc(c->feasible, (size_t)cap * sizeof *f);
    if (!f)
        return -1;
    c->feasible = f;
    int *s = realloc(c->scores, (size_t)cap * sizeof *s);
    if (!s)
        return -1;
    c->scores = s;
    struct core_node_hot *h = realloc(c->hot, (size_t)cap * sizeof *h);
    if (!h)
        return -1;
    c->hot = h;
    uint32_t *r = realloc(c->ranks, (size_t)cap * sizeof *r);
    if (!r)
        return -1;
    c->ranks = r;
    uint64_t *st = realloc(c->stamps, (size_t)cap * sizeof *st);
    if (!st)
        return -1;
    c->stamps = st;
    return 0;
}

/* a's positions on old as positions on n, found by UUID (GPUs and MIG
 * instances; a GPU without one by its NVML index, an instance without one
 * at its place): the GPU list may change under allocations (a GPU gone from
 * the bus, NVML's indices renumbered, a MIG instance made or destroyed), and
 * a position kept as it was would point at another GPU. -1 when a GPU or
 * instance a holds is not on n. */
static int alloc_remap(const struct core_node *old, const struct core_node *n,
                       const struct core_alloc *a, struct core_alloc *out)
{
    *out = *a;
    for (int i = 0; i < a->n; i++) {
        const struct core_gpu *g = &old->gpus[a->gpu[i]];
        int j = 0;
        while (j < n->n_gpus && (g->uuid[0] ? strcmp(n->gpus[j].uuid, g->uuid) != 0
                                            : n->gpus[j].index != g->index))
            j++;
        if (j == n->n_gpus)
            return -1;
        out->gpu[i] = j;
        if (a->kind == CORE_REQ_WHOLE) /* the whole GPU, whatever its size now */
            out->mem_mib[i] = n->gpus[j].mem_mib;
        if (a->mig[i] < 0)
            continue;
        const char *mu = g->mig[a->mig[i]].uuid;
        int k = mu[0] ? 0 : a->mig[i];
        while (mu[0] && k < n->gpus[j].n_mig && strcmp(n->gpus[j].mig[k].uuid, mu) != 0)
            k++;
        if (k >= n->gpus[j].n_mig)
            return -1;
        out->mig[i] = k;
    }
    /* a whole allocation keeps its positions ascending (the order of
     * n->gpus, which a renumbering may change) */
    for (int i = 1; a->kind == CORE_REQ_WHOLE && i < out->n; i++)
        for (int k = i; k > 0 && out->gpu[k - 1] > out->gpu[k]; k--) {
            int tg = out->gpu[k], tm = out->milli[k], tx = out->mig[k];
            int64_t tb = out->mem_mib[k];
            out->gpu[k] = out->gpu[k - 1], out->gpu[k - 1] = tg;
            out->milli[k] = out->milli[k - 1], out->milli[k - 1] = tm;
            out->mig[k] = out->mig[k - 1], out->mig[k - 1] = tx;
            out->mem_mib[k] = out->mem_mib[k - 1], out->mem_mib[k - 1] = tb;
        }
    return 0;
}

int core_cluster_upsert_node(struct core_cluster *c, const struct core_node_spec *spec,
                             struct gs_err *e)
{
    int rc = validate_spec(spec, e);
    if (rc < 0)
        return rc;
    struct core_node *n = node_build(c, spec);
    if (!n)
        return gs_errf(e, GS_ENOMEM, "node %s: out of memory (or more than %d GPU models)",
                       spec->name, CORE_MAX_MODELS);
    int pos = index_find(c->node_index, c->node_index_cap, (void *const *)c->nodes, spec->name,
                         node_key);
    if (pos >= 0) {
        /* keep the allocations on the same GPUs (by UUID). One whose GPU
         * or MIG instance is gone leaves; the others stay even where the
         * node now has less than they hold (its free amounts go below
         * zero and nothing more fits): the pods run there whatever the
         * node says, and refusing the update would freeze the node */
        struct core_node *old = c->nodes[pos];
        n->available = old->available;
        n->generation = old->generation;
        int k = 0;
        for (const struct core_alloc *a = core_node_alloc_next(old, NULL), *next; a; a = next) {
            struct core_alloc tmp;
            next = core_node_alloc_next(old, a);
            if (alloc_remap(old, n, a, &tmp) < 0)
                core_unreserve(c, a->pod_uid, NULL);
            else
                k++;
        }
        struct core_alloc *moved = malloc(((size_t)k + 1) * sizeof *moved);
        if (!moved) {
            node_free(n);
            return gs_errf(e, GS_ENOMEM, "node %s: out of memory", spec->name);
        }
        k = 0;
        for (const struct core_alloc *a = core_node_alloc_next(old, NULL); a;
             a = core_node_alloc_next(old, a), k++) {
            alloc_remap(old, n, a, &moved[k]);
            core_alloc_apply(n, &moved[k], 1, 0, NULL);
        }
        k = 0; /* the records take their new positions */
        for (struct core_alloc_rec *r = old->priv->allocs; r; r = r->next)
            r->a = moved[k++];
        free(moved);
        others_apply(n, old->others_cpu_milli, old->others_mem_bytes, old->others_pods);
        n->priv->allocs = old->priv->allocs;
        if (c->frag_sum_wver == c->wver && old->priv->frag_wver == c->wver)
            c->frag_sum -= old->priv->frag;
        c->nodes[pos] = n;
        n->priv->pos = pos;
        count_models(c, old, -1);
        count_models(c, n, 1);
        node_free(old);
        core_node_refresh(c, n);
        return 0;
    }
    if (grow((void **)&c->nodes, &c->cap_nodes, c->n_nodes + 1, sizeof *c->nodes) < 0) {
        node_free(n);
        return gs_errf(e, GS_ENOMEM, "node %s: out of memory", spec->name);
    }
    n->priv->pos = c->n_nodes;
    c->nodes[c->n_nodes++] = n;
    if (index_add(&c->node_index, &c->node_index_cap, (void *const *)c->nodes, c->n_nodes,
                  c->n_nodes - 1, node_key) < 0 || ensure_scratch(c) < 0) {
        c->n_nodes--;
        node_free(n);
        return gs_errf(e, GS_ENOMEM, "node %s: out of memory", spec->name);
    }
    count_models(c, n, 1);
    core_node_refresh(c, n);
    return 0;
}

static void alloc_remove_at(struct core_cluster *c, struct core_node *n, int i)
{
    int last = c->n_allocs - 1;
    struct core_alloc_rec *r = (struct core_alloc_rec *)c->allocs[i];
    if (r->prev)
        r->prev->next = r->next;
    else
        n->priv->allocs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    index_del(c->alloc_index, c->alloc_index_cap, (void *const *)c->allocs, i, last, alloc_key);
    free(r);
    c->allocs[i] = c->allocs[last];
    c->n_allocs--;
}

int core_cluster_remove_node(struct core_cluster *c, const char *name, struct gs_err *e)
{
    int pos = index_find(c->node_index, c->node_index_cap, (void *const *)c->nodes, name,
                         node_key);
    if (pos < 0)
        return gs_errf(e, GS_ENOENT, "node %s: not in the cluster", name);
    struct core_node *n = c->nodes[pos];
    while (n->priv->allocs) {
        const struct core_alloc *a = &n->priv->allocs->a;
        c->milli_alloc -= alloc_milli(a);
        alloc_remove_at(c, n, index_find(c->alloc_index, c->alloc_index_cap,
                                         (void *const *)c->allocs, a->pod_uid, alloc_key));
    }
    if (c->frag_sum_wver == c->wver && n->priv->frag_wver == c->wver)
        c->frag_sum -= n->priv->frag;
    count_models(c, n, -1);
    int last = c->n_nodes - 1;
    index_del(c->node_index, c->node_index_cap, (void *const *)c->nodes, pos, last, node_key);
    node_free(n);
    c->nodes[pos] = c->nodes[last];
    c->n_nodes--;
    c->stamp_seq++; /* core_cluster_version moves: the node set changed */
    if (pos < c->n_nodes) {
        c->nodes[pos]->priv->pos = pos;
        c->hot[pos] = c->hot[c->n_nodes];
        c->stamps[pos] = c->stamps[c->n_nodes];
    }
    return 0;
}

int core_cluster_set_others(struct core_cluster *c, const char *name, int64_t cpu_milli,
                            int64_t mem_bytes, int pods, struct gs_err *e)
{
    struct core_node *n = core_cluster_find(c, name);
    if (!n)
        return gs_errf(e, GS_ENOENT, "node %s: not in the cluster", name);
    if (cpu_milli < 0 || mem_bytes < 0 || pods < 0 || cpu_milli > CORE_OTHERS_MAX ||
        mem_bytes > CORE_OTHERS_MAX)
        return gs_errf(e, GS_EINVAL, "node %s: other pods' usage %lldm CPU, %lld bytes, %d "
                       "pods is outside 0..%lld", name, (long long)cpu_milli,
                       (long long)mem_bytes, pods, (long long)CORE_OTHERS_MAX);
    if (cpu_milli == n->others_cpu_milli && mem_bytes == n->others_mem_bytes &&
        pods == n->others_pods)
        return 0;
    others_apply(n, cpu_milli, mem_bytes, pods);
    core_node_refresh(c, n);
    return 0;
}

int core_cluster_set_available(struct core_cluster *c, const char *name, int available,
                               struct gs_err *e)
{
    struct core_node *n = core_cluster_find(c, name);
    if (!n)
        return gs_errf(e, GS_ENOENT, "node %s: not in the cluster", name);
    n->available = available != 0;
    n->generation++;
    hot_update(c, n);
    return 0;
}

struct core_node *core_cluster_find(const struct core_cluster *c, const char *name)
{
    int pos = index_find(c->node_index, c->node_index_cap, (void *const *)c->nodes, name,
                         node_key);
    return pos < 0 ? NULL : c->nodes[pos];
}

int core_cluster_node_count(const struct core_cluster *c)
{
    return c->n_nodes;
}

struct core_node *core_cluster_node(const struct core_cluster *c, int i)
{
    return i >= 0 && i < c->n_nodes ? c->nodes[i] : NULL;
}

int core_node_gpu_by_uuid(const struct core_node *n, const char *uuid, int *mig)
{
    if (mig)
        *mig = -1;
    if (!uuid || !*uuid)
        return -1;
    for (int i = 0; i < n->n_gpus; i++) {
        if (strcmp(n->gpus[i].uuid, uuid) == 0)
            return i;
        for (int m = 0; m < n->gpus[i].n_mig; m++)
            if (strcmp(n->gpus[i].mig[m].uuid, uuid) == 0) {
                if (mig)
                    *mig = m;
                return i;
            }
    }
    return -1;
}

const char *core_node_label(const struct core_node *n, const char *key)
{
    for (int i = 0; i < n->n_labels; i++)
        if (strcmp(n->label_keys[i], key) == 0)
            return n->label_values[i];
    return NULL;
}

/* ---- allocations ------------------------------------------------------ */

int core_alloc_tag(const struct core_alloc *a)
{
    switch (a->kind) {
    case CORE_REQ_MIG: return CORE_TAG_MIG;
    case CORE_REQ_SHARED: return a->n == 1 ? CORE_TAG_SHARE : a->n;
    case CORE_REQ_WHOLE: return a->n;
    default: return CORE_TAG_NONE;
    }
}

static int reserve(struct core_cluster *c, const struct core_alloc *a, int learn, int check,
                   struct gs_err *e)
{
    if (!memchr(a->pod_uid, 0, sizeof a->pod_uid) || !a->pod_uid[0])
        return gs_errf(e, GS_EINVAL, "allocation: pod_uid: empty");
    if (!memchr(a->node, 0, sizeof a->node) || !memchr(a->pod_name, 0, sizeof a->pod_name))
        return gs_errf(e, GS_EINVAL, "allocation %s: node or pod name not terminated", a->pod_uid);
    if (a->n < 0 || a->n > CORE_MAX_GPUS)
        return gs_errf(e, GS_EINVAL, "allocation %s: %d GPUs, at most %d", a->pod_uid, a->n,
                       CORE_MAX_GPUS);
    if ((a->kind == CORE_REQ_NONE) != (a->n == 0) || (unsigned)a->kind > CORE_REQ_MIG)
        return gs_errf(e, GS_EINVAL, "allocation %s: kind %d does not match %d GPUs", a->pod_uid,
                       (int)a->kind, a->n);
    if (a->cpu_milli < 0 || a->mem_bytes < 0)
        return gs_errf(e, GS_EINVAL, "allocation %s: negative CPU or memory", a->pod_uid);
    if (core_alloc_find(c, a->pod_uid))
        return gs_errf(e, GS_ECONFLICT, "pod %s (uid %s) already holds an allocation",
                       a->pod_name, a->pod_uid);
    struct core_node *n = core_cluster_find(c, a->node);
    if (!n)
        return gs_errf(e, GS_ENOENT, "allocation %s: node %s: not in the cluster", a->pod_uid,
                       a->node);
    int rc = core_alloc_apply(n, a, 1, check, e);
    if (rc < 0)
        return rc;
    struct core_alloc_rec *copy = malloc(sizeof *copy);
    if (!copy || grow((void **)&c->allocs, &c->cap_allocs, c->n_allocs + 1, sizeof *c->allocs) < 0) {
        free(copy);
        return gs_errf(e, GS_ENOMEM, "allocation %s: out of memory", a->pod_uid);
    }
    copy->a = *a;
    c->allocs[c->n_allocs++] = &copy->a;
    if (index_add(&c->alloc_index, &c->alloc_index_cap, (void *const *)c->allocs, c->n_allocs,
                  c->n_allocs - 1, alloc_key) < 0) {
        free(copy);
        c->n_allocs--;
        return gs_errf(e, GS_ENOMEM, "allocation %s: out of memory", a->pod_uid);
    }
    copy->prev = NULL;
    copy->next = n->priv->allocs;
    if (copy->next)
        copy->next->prev = copy;
    n->priv->allocs = copy;
    core_alloc_apply(n, a, 1, 0, NULL);
    c->milli_alloc += alloc_milli(a);
    if (learn && !c->explicit_workload)
        core_workload_seen(c, a);
    core_node_refresh(c, n);
    return 0;
}

int core_reserve(struct core_cluster *c, const struct core_alloc *a, struct gs_err *e)
{
    return reserve(c, a, 1, 1, e);
}

int core_reserve_back(struct core_cluster *c, const struct core_alloc *a, struct gs_err *e)
{
    return reserve(c, a, 0, 1, e);
}

int core_reserve_admitted(struct core_cluster *c, const struct core_alloc *a, struct gs_err *e)
{
    return reserve(c, a, 1, CORE_CHECK_SHAPE, e);
}

int core_unreserve_undo(struct core_cluster *c, const char *pod_uid, struct gs_err *e)
{
    const struct core_alloc *held = core_alloc_find(c, pod_uid);
    if (!held)
        return core_unreserve(c, pod_uid, e);
    struct core_alloc a = *held;
    int rc = core_unreserve(c, pod_uid, e);
    if (rc == 0)
        core_workload_forget(c, &a);
    return rc;
}

void core_workload_forget(struct core_cluster *c, const struct core_alloc *a)
{
    if (!c->explicit_workload)
        core_workload_unseen(c, a);
}

int core_unreserve(struct core_cluster *c, const char *pod_uid, struct gs_err *e)
{
    int pos = index_find(c->alloc_index, c->alloc_index_cap, (void *const *)c->allocs, pod_uid,
                         alloc_key);
    if (pos < 0)
        return gs_errf(e, GS_ENOENT, "pod uid %s holds no allocation", pod_uid);
    const struct core_alloc *a = c->allocs[pos];
    struct core_node *n = core_cluster_find(c, a->node); /* always there (remove_node) */
    core_alloc_apply(n, a, -1, 0, NULL);
    core_node_refresh(c, n);
    c->milli_alloc -= alloc_milli(a);
    alloc_remove_at(c, n, pos);
    return 0;
}

const struct core_alloc *core_node_alloc_next(const struct core_node *n,
                                              const struct core_alloc *after)
{
    const struct core_alloc_rec *r = after ? ((const struct core_alloc_rec *)after)->next
                                           : n->priv->allocs;
    return r ? &r->a : NULL;
}

const struct core_alloc *core_alloc_find(const struct core_cluster *c, const char *pod_uid)
{
    int pos = index_find(c->alloc_index, c->alloc_index_cap, (void *const *)c->allocs, pod_uid,
                         alloc_key);
    return pos < 0 ? NULL : c->allocs[pos];
}

int core_cluster_alloc_count(const struct core_cluster *c)
{
    return c->n_allocs;
}

const struct core_alloc *core_cluster_alloc(const struct core_cluster *c, int i)
{
    return i >= 0 && i < c->n_allocs ? c->allocs[i] : NULL;
}

double core_cluster_frag(struct core_cluster *c)
{
    if (c->wdirty)
        core_workload_prepare(c);
    if (c->frag_sum_wver != c->wver) {
        c->frag_sum = 0;
        for (int i = 0; i < c->n_nodes; i++)
            c->frag_sum += core_node_frag(c, c->nodes[i]);
        c->frag_sum_wver = c->wver;
    }
    return c->frag_sum;
}

void core_cluster_stats(struct core_cluster *c, struct core_stats *st)
{
    memset(st, 0, sizeof *st);
    st->frag_milli = core_cluster_frag(c);
    st->nodes = c->n_nodes;
    for (int i = 0; i < c->n_nodes; i++) {
        const struct core_node *n = c->nodes[i];
        st->gpus += n->n_gpus;
        for (int g = 0; g < n->n_gpus; g++)
            if (n->gpus[g].healthy)
                st->milli_total += CORE_MILLI;
    }
    st->milli_alloc = c->milli_alloc;
    st->pods = c->n_allocs;
}
