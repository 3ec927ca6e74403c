/* ext/namelist.c - see namelist.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ext/namelist.h"

struct ext_namecache {
    pthread_mutex_t mu;
    int slots, n;
    struct ext_namelist **l; /* most recently used first */
};

struct ext_namelist *ext_namelist_new(const char *raw, size_t raw_len, const char *const *names,
                                      int n)
{
    struct ext_namelist *l = calloc(1, sizeof *l);
    unsigned char *len = malloc((size_t)n + 1);
    size_t text = 0;
    if (!l || !len) {
        free(l);
        free(len);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        size_t k = strlen(names[i]);
        len[i] = (unsigned char)(k < 255 ? k : 255); /* names are at most 253 bytes */
        text += k + 3; /* "name", */
    }
    char *arena = malloc(text + 1), *quoted = malloc(text + 1);
    const char **nv = malloc(((size_t)n + 1) * sizeof *nv);
    size_t *qoff = malloc(((size_t)n + 1) * sizeof *qoff);
    l->pos = malloc(((size_t)n + 1) * sizeof *l->pos);
    l->raw = malloc(raw_len + 1);
    if (!arena || !quoted || !nv || !len || !qoff || !l->pos || !l->raw) {
        free(arena), free(quoted), free(nv), free(len), free(qoff), free(l->pos), free(l->raw);
        free(l);
        return NULL;
    }
    size_t a = 0, q = 0;
    for (int i = 0; i < n; i++) {
        size_t k = len[i] < 255 ? len[i] : strlen(names[i]);
        memcpy(arena + a, names[i], k + 1);
        nv[i] = arena + a;
        a += k + 1;
        qoff[i] = q;
        quoted[q++] = '"';
        memcpy(quoted + q, names[i], k);
        q += k;
        quoted[q++] = '"';
        quoted[q++] = ',';
    }
    qoff[n] = q;  /* one past the last comma: length of the list + 1 */
    quoted[q] = '\0';
    memcpy(l->raw, raw, raw_len);
    l->raw[raw_len] = '\0';
    l->raw_len = raw_len;
    l->n = n;
    l->names = nv;
    l->arena = arena;
    l->len = len;
    l->quoted = quoted;
    l->qoff = qoff;
    l->refs = 1;
    return l;
}

struct ext_namelist *ext_namelist_ref(struct ext_namelist *l)
{
    __atomic_add_fetch(&l->refs, 1, __ATOMIC_ACQ_REL);
    return l;
}

void ext_namelist_put(struct ext_namelist *l)
{
    if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    free(l->arena);
    free((void *)l->names);
    free((void *)l->len);
    free((void *)l->quoted);
    free((void *)l->qoff);
    free(l->pos);
    free(l->raw);
    free(l);
}

int ext_namelist_walk(struct ext_namelist *l, const struct ext_namelist *base)
{
    int j = 0, misses = 0;
    for (int i = 0; i < l->n; i++) {
        unsigned char len = l->len[i];
        const char *name = l->names[i];
        int k = j;
        /* names of one cluster mostly share their length and prefix: the
         * last byte tells most apart before memcmp */
        while (k < base->n &&
               (base->len[k] != len || (len && base->names[k][len - 1] != name[len - 1]) ||
                memcmp(base->names[k], name, len) != 0))
            k++;
        if (k == base->n) {
            if (++misses > EXT_NAMELIST_WALK_MISSES)
                return -1;
            l->pos[i] = -2; /* not in base after j: the walk goes on from j */
            continue;
        }
        l->pos[i] = base->pos[k];
        j = k + 1;
    }
    return misses;
}

struct ext_namecache *ext_namecache_new(int slots)
{
    struct ext_namecache *c = calloc(1, sizeof *c);
    if (!c || !(c->l = calloc((size_t)slots, sizeof *c->l))) {
        free(c);
        return NULL;
    }
    c->slots = slots;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void ext_namecache_free(struct ext_namecache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        ext_namelist_put(c->l[i]);
    pthread_mutex_destroy(&c->mu);
    free(c->l);
    free(c);
}

/* Moves slot i to the front. Lock held. */
static void to_front(struct ext_namecache *c, int i)
{
    struct ext_namelist *l = c->l[i];
    memmove(c->l + 1, c->l, (size_t)i * sizeof *c->l);
    c->l[0] = l;
}

struct ext_namelist *ext_namecache_match(struct ext_namecache *c, const char *p, size_t avail,
                                         size_t *span)
{
    struct ext_namelist *hit = NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n && !hit; i++) {
        const struct ext_namelist *l = c->l[i];
        size_t k = l->raw_len, tail = k < 32 ? k : 32;
        /* the tail first: a different list usually differs there */
        if (k > avail || memcmp(p + k - tail, l->raw + k - tail, tail) != 0 ||
            memcmp(p, l->raw, k) != 0)
            continue;
        hit = c->l[i];
        __atomic_add_fetch(&hit->refs, 1, __ATOMIC_ACQ_REL);
        *span = k;
        to_front(c, i);
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

void ext_namecache_add(struct ext_namecache *c, struct ext_namelist *l)
{
    struct ext_namelist *drop = NULL;
    ext_namelist_ref(l);
    pthread_mutex_lock(&c->mu);
    if (c->n == c->slots)
        drop = c->l[--c->n];
    c->l[c->n++] = l;
    to_front(c, c->n - 1);
    pthread_mutex_unlock(&c->mu);
    ext_namelist_put(drop);
}
