/*
 * limiter/lim_env.c - strict parsing of the limiter's environment
 * (see lim_env.h).
 */
#include "limiter/lim_env.h"

#include <stdio.h>
#include <string.h>

#define VAL_MAX 64 /* longer values are rejected before they are looked at */

int lim_env_bytes(const char *s, uint64_t *out)
{
    uint64_t x = 0, unit = 1;
    size_t n = 0;

    *out = 0;
    while (s[n] >= '0' && s[n] <= '9') {
        if (x > LIM_MAX_BYTES)
            return -1;
        x = x * 10 + (uint64_t)(s[n] - '0');
        n++;
    }
    if (n == 0 || n > 20)
        return -1;
    switch (s[n]) {
    case '\0': break;
    case 'k': case 'K': unit = 1ULL << 10; n++; break;
    case 'm': case 'M': unit = 1ULL << 20; n++; break;
    case 'g': case 'G': unit = 1ULL << 30; n++; break;
    default: return -1;
    }
    if (s[n] != '\0' || x == 0 || x > LIM_MAX_BYTES / unit)
        return -1;
    *out = x * unit;
    return 0;
}

/* Parses a decimal integer in lo..hi; 0 or -1. */
static int parse_int(const char *s, int lo, int hi, int *out)
{
    long x = 0;
    size_t n = 0;

    while (s[n] >= '0' && s[n] <= '9' && n < 8)
        x = x * 10 + (s[n++] - '0');
    if (n == 0 || s[n] != '\0' || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 0;
}

static int bad(struct lim_cfg *c, char *err, size_t errlen, const char *name, const char *v,
               const char *what)
{
    memset(c, 0, sizeof *c);
    snprintf(err, errlen, "%s: '%.40s%s' %s", name, v, strlen(v) > 40 ? "..." : "", what);
    return -1;
}

/* The value of `name`, or NULL; a value too long to be sane is reported as
 * such (*toolong = 1) rather than read. */
static const char *get_bounded(lim_getenv_fn get, void *arg, const char *name, int *toolong)
{
    const char *v = get(name, arg);
    *toolong = v && strnlen(v, VAL_MAX + 1) > VAL_MAX;
    return v;
}

int lim_env_parse(struct lim_cfg *c, lim_getenv_fn get, void *arg, char *err, size_t errlen)
{
    static const char mem_what[] = "is not a memory amount (digits with an optional k, m or g "
                                   "suffix, 1 byte to 1 PiB)";
    char name[40];
    int tl;
    const char *v;

    memset(c, 0, sizeof *c);
    if (errlen)
        err[0] = '\0';
    v = get("GPUSCHED_LIMITER", arg);
    if (v && (strcmp(v, "off") == 0 || strcmp(v, "0") == 0))
        return 0;

    uint64_t all = 0;
    v = get_bounded(get, arg, "CUDA_DEVICE_MEMORY_LIMIT", &tl);
    if (v && (tl || lim_env_bytes(v, &all)))
        return bad(c, err, errlen, "CUDA_DEVICE_MEMORY_LIMIT", v, mem_what);
    for (int i = 0; i < LIM_MAX_DEV; i++) {
        uint64_t x = all;
        snprintf(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT_%d", i);
        v = get_bounded(get, arg, name, &tl);
        if (v && (tl || lim_env_bytes(v, &x)))
            return bad(c, err, errlen, name, v, mem_what);
        c->mem_limit[i] = x;
        c->mem_on |= x != 0;
    }

    int pct = 0, milli = 0;
    v = get_bounded(get, arg, "CUDA_DEVICE_SM_LIMIT", &tl);
    if (v && (tl || parse_int(v, 0, 100, &pct)))
        return bad(c, err, errlen, "CUDA_DEVICE_SM_LIMIT", v, "is not a percent 0..100");
    v = get_bounded(get, arg, "GPUSCHED_GPU_MILLI", &tl);
    if (v && (tl || parse_int(v, 1, 1000, &milli)))
        return bad(c, err, errlen, "GPUSCHED_GPU_MILLI", v, "is not thousandths 1..1000");
    if (!milli)
        milli = pct * 10;
    c->milli = milli >= 1000 ? 0 : milli;

    v = get("GPUSCHED_GPU_UUIDS", arg);
    for (const char *q = v; q && *q;) {
        size_t len = strcspn(q, ",");
        int ok = len > 0 && len < LIM_UUID_LEN && c->n_uuids < LIM_MAX_DEV;
        for (size_t k = 0; ok && k < len; k++)
            ok = (q[k] >= '0' && q[k] <= '9') || (q[k] >= 'a' && q[k] <= 'z') ||
                 (q[k] >= 'A' && q[k] <= 'Z') || q[k] == '-';
        if (!ok)
            return bad(c, err, errlen, "GPUSCHED_GPU_UUIDS", v,
                       "is not at most 16 comma-separated GPU UUIDs");
        memcpy(c->uuids[c->n_uuids], q, len);
        c->uuids[c->n_uuids++][len] = '\0';
        q += len + (q[len] == ',');
        if (q[-1] == ',' && !*q)
            return bad(c, err, errlen, "GPUSCHED_GPU_UUIDS", v, "ends with ','");
    }

    v = get("GPUSCHED_LIMITER_DIR", arg);
    if (!v)
        v = LIM_DEFAULT_DIR;
    if (v[0] != '/' || strnlen(v, LIM_DIR_MAX + 1) > LIM_DIR_MAX || strstr(v, "/../"))
        return bad(c, err, errlen, "GPUSCHED_LIMITER_DIR", v,
                   "is not an absolute path of at most 200 characters");
    snprintf(c->dir, sizeof c->dir, "%s", v);
    return 0;
}
