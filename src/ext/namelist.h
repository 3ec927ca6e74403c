/*
 * ext/namelist.h - NodeNames arrays remembered between requests.
 *
 * kube-scheduler (nodeCacheCapable) sends the same NodeNames array, every
 * node that passed its own filters, with one /filter after another, and
 * /prioritize gets /filter's answer back: the same bytes again and again.
 * At 5,000 nodes scanning, checking and looking up those names costs more
 * than the decision, so the ExtenderArgs parser keeps the last few arrays
 * it scanned as immutable, reference-counted lists. A request whose bytes
 * at the NodeNames value equal a kept array's bytes takes that list instead
 * of scanning: a JSON array is self-delimiting, so the same bytes are the
 * same names with the same end, and the scanner would have accepted them.
 *
 * A list also carries its names pre-written as reply text and, for the
 * scheduler, their positions in the core's node array (`pos`, stamped with
 * the scheduler's node-set generation `gen`). pos/gen are not covered by
 * the cache's lock: only the scheduler reads and writes them, under its own
 * lock, so a request re-resolves a list only when nodes came or went.
 *
 * Ownership: the cache holds one reference to each list it keeps;
 * ext_namecache_match() and ext_namelist_new() return a reference the
 * caller drops with ext_namelist_put(). The cache is thread-safe.
 */
#ifndef GPUSCHED_EXT_NAMELIST_H
#define GPUSCHED_EXT_NAMELIST_H

#include <stddef.h>

struct ext_namelist {
    int n;
    const char **names;         /* n names, NUL-terminated */
    const unsigned char *len;   /* their lengths (names are at most 253 bytes) */
    /* "n0","n1",...,"nk": qoff[i] is where "ni" starts, qoff[n] = length + 1,
     * so the names i..j-1 as a JSON list are quoted + qoff[i], length
     * qoff[j] - qoff[i] - 1 */
    const char *quoted;
    const size_t *qoff;
    /* the scheduler's resolution, under its lock: node positions (-1:
     * unknown node) valid while its node-set generation equals gen
     * (0: not resolved yet) */
    unsigned long gen;
    int *pos;
    /* private */
    int refs;
    size_t raw_len;
    char *raw, *arena;
};

/* A list of the n names given, whose JSON text in the request was
 * raw[0..raw_len) ('[' to ']'). NULL when out of memory. */
struct ext_namelist *ext_namelist_new(const char *raw, size_t raw_len, const char *const *names,
                                      int n);
/* Another reference to l (returned). */
struct ext_namelist *ext_namelist_ref(struct ext_namelist *l);
void ext_namelist_put(struct ext_namelist *l);

/* Fills l->pos from base->pos for the names of l that base holds in the
 * same order (l a subsequence of base, as /prioritize's array is of the
 * /filter array it answered): a walk along both lists comparing names,
 * instead of a lookup per name. Names not found get -2 (the caller looks
 * them up). Returns how many got -2, or -1 when more than
 * EXT_NAMELIST_WALK_MISSES were missing (l is not base's subsequence:
 * nothing usable written). base->pos must be valid. */
#define EXT_NAMELIST_WALK_MISSES 8
int ext_namelist_walk(struct ext_namelist *l, const struct ext_namelist *base);

/* Arrays longer than this (in request bytes) are not kept: 5,000 node
 * names take ~70-150 KB, and a few hostile 8 MiB bodies must not pin
 * several times their size in the cache. */
#define EXT_NAMELIST_KEEP_MAX (2u << 20)
/* Is l short enough to be kept (and so to come back)? */
static inline int ext_namelist_keepable(const struct ext_namelist *l)
{
    return l->raw_len <= EXT_NAMELIST_KEEP_MAX;
}

struct ext_namecache;
/* A cache of up to `slots` lists (the least recently used goes first). */
struct ext_namecache *ext_namecache_new(int slots);
void ext_namecache_free(struct ext_namecache *c);
/* The kept list whose JSON text is the prefix of p[0..avail), or NULL;
 * *span gets its length. */
struct ext_namelist *ext_namecache_match(struct ext_namecache *c, const char *p, size_t avail,
                                         size_t *span);
/* Keeps l (takes a reference of its own). */
void ext_namecache_add(struct ext_namecache *c, struct ext_namelist *l);

#endif
