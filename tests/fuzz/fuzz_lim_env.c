/*
 * tests/fuzz/fuzz_lim_env.c - the limiter's environment parser and the
 * ledger header check on arbitrary bytes.
 *
 * Even first byte: the rest is "NAME=VALUE" lines, handed to
 * lim_env_parse() as the environment (the variables the limiter reads,
 * and anything else). Odd: the rest is a ledger file's contents, checked
 * as a header with the file size it came with. Errors are expected; any
 * crash or sanitizer report is a bug, and so is a result outside the
 * bounds the parser promises.
 */
#include <stdlib.h>
#include <string.h>

#include "limiter/lim_env.h"
#include "limiter/lim_ledger.h"

struct env {
    char *names[32], *values[32];
    int n;
};

static const char *get(const char *name, void *arg)
{
    const struct env *e = arg;
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->names[i], name) == 0)
            return e->values[i];
    return NULL;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1) {
        struct lim_ledger_hdr *h = calloc(1, size > sizeof *h ? size : sizeof *h);
        char err[300];
        if (!h)
            return 0;
        memcpy(h, data + 1, size - 1);
        if (lim_ledger_check(h, size - 1, err, sizeof err) == 0 &&
            (size - 1 < sizeof *h || h->n_slots < 1 || h->n_slots > 4096))
            abort();
        free(h);
        return 0;
    }
    char *buf = malloc(size);
    struct env e = {.n = 0};
    struct lim_cfg c;
    char err[200];
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    for (char *line = buf, *next; line && e.n < 32; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        e.names[e.n] = line;
        e.values[e.n++] = eq + 1;
    }
    if (lim_env_parse(&c, get, &e, err, sizeof err) == 0) {
        if (c.milli < 0 || c.milli >= 1000 || ((c.mem_on || c.milli) && c.dir[0] != '/'))
            abort();
        for (int i = 0; i < LIM_MAX_DEV; i++)
            if (c.mem_limit[i] > LIM_MAX_BYTES)
                abort();
    } else if (!err[0] || c.mem_on) {
        abort();
    }
    free(buf);
    return 0;
}
