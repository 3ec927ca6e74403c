/* tests/fuzz/fuzz_ext_names.c - the NodeNames cache (ext/namelist.h) on
 * arbitrary ExtenderArgs: a body parsed through the cache, twice (the second
 * time from the cache when it was accepted), must give exactly what a fresh
 * parse gives: the same verdict, the same names, and reply text that lists
 * those names. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ext/namelist.h"
#include "ext/proto.h"

static void same(const struct ext_args *a, const struct ext_args *b)
{
    if (a->n != b->n || a->from_nodes != b->from_nodes)
        abort();
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->names[i], b->names[i]) != 0)
            abort();
    if (b->list) {
        const struct ext_namelist *l = b->list;
        for (int i = 0; i < l->n; i++)
            if (l->len[i] != strlen(l->names[i]) || l->quoted[l->qoff[i]] != '"' ||
                memcmp(l->quoted + l->qoff[i] + 1, l->names[i], l->len[i]) != 0)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_namecache *c = ext_namecache_new(2);
    const char *body = (const char *)data;
    struct ext_args fresh, a;
    if (!c)
        return 0;
    int rc = ext_args_parse(body, size, &fresh, &e);
    for (int round = 0; round < 2; round++) {
        int rc2 = ext_args_parse_cached(c, body, size, &a, &e);
        if ((rc < 0) != (rc2 < 0))
            abort();
        if (rc2 == 0) {
            same(&fresh, &a);
            ext_args_clear(&a);
        }
    }
    if (rc == 0)
        ext_args_clear(&fresh);
    ext_namecache_free(c);
    return 0;
}
