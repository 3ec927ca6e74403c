/*
 * tests/limiter/early.c - a library whose constructor allocates device
 * memory, linked into lim_probe_linked: static initialisers may run before
 * the limiter's (it has none: it starts on the first call), and must still
 * be held to the limit. EARLY_ALLOC_MIB names the size; early_rc is what
 * the driver (through the limiter) answered, -1 when nothing was tried.
 */
#include <stdlib.h>

typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuMemAlloc_v2(unsigned long long *, size_t);

int early_rc = -1;

__attribute__((constructor)) static void early(void)
{
    const char *s = getenv("EARLY_ALLOC_MIB");
    void *ctx;
    unsigned long long p;
    if (!s || cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx))
        return;
    early_rc = cuMemAlloc_v2(&p, (size_t)strtoull(s, NULL, 10) << 20);
}
