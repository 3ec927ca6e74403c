/*
 * limiter/lim_hook.c - how calls reach the limiter.
 *
 * A program linked with -lcuda calls the exported wrappers directly (the
 * preloaded library comes first in symbol lookup). The CUDA runtime does not
 * link libcuda: it dlopens libcuda.so.1 and asks dlsym(handle,
 * "cuGetProcAddress_v2") for the one function through which it gets every
 * other entry point. dlsym on a handle never searches a preloaded library,
 * so the library replaces dlsym itself (the real one is found with dlvsym)
 * and answers hooked names with its wrappers; the cuGetProcAddress wrappers
 * ask the driver first and replace what it returns when it is a hooked
 * function, matched by address (which also tells the per-thread-stream
 * variants apart) or else by name and version. Everything else is passed
 * through untouched, and with no limit in the environment the wrappers are
 * never handed out.
 *
 * The real function behind each wrapper is bound from the handle the
 * program itself used (or libcuda.so.1 / libnvidia-ml.so.1 as found by the
 * dynamic linker), so a program and the limiter always agree on the driver.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "limiter/lim.h"

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn g_real_dlsym;
static void *g_real[LIM_N_HOOKS];
static void *g_help[LIM_N_HELPERS];
static void *g_cuda_handle, *g_nvml_handle;

/* The wrappers (lim_mem.c, lim_nvml.c, lim_throttle.c, lim_proc.c), by
 * address only: their prototypes are their own files' business. */
#define X(name, base, ver, kind) extern void name(void);
LIM_CUDA_HOOKS(X)
#undef X

static const struct hook {
    const char *name, *base;
    int ver, ptsz, nvml;
    void (*wrapper)(void);
} g_hooks[LIM_N_HOOKS] = {
#define X(name, base, ver, kind) {#name, base, ver, kind == LIM_PTSZ, kind == LIM_NVML, name},
    LIM_CUDA_HOOKS(X)
#undef X
};

static const char *const g_help_names[LIM_N_HELPERS] = {"cuCtxGetDevice", "nvmlDeviceGetIndex"};

static dlsym_fn real_dlsym(void)
{
    dlsym_fn f = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&g_real_dlsym, f, __ATOMIC_RELEASE);
    }
    return f;
}

static int find_hook(const char *name)
{
    if (name[0] != 'c' && name[0] != 'n')
        return -1;
    for (int i = 0; i < LIM_N_HOOKS; i++)
        if (strcmp(g_hooks[i].name, name) == 0)
            return i;
    return -1;
}

/* Whether p is one of this library's wrappers: what a lookup through the
 * program's own handle (dlopen(NULL)) or the global scope finds first. It
 * must never be taken for the driver's function (it would call itself). */
static int is_mine(const void *p)
{
    for (int i = 0; i < LIM_N_HOOKS; i++)
        if (p == (const void *)g_hooks[i].wrapper)
            return 1;
    return 0;
}

/* Binds g_real[i] to p unless it is bound to something else already;
 * 1 when g_real[i] == p afterwards. */
static int bind(int i, void *p)
{
    void *none = NULL;
    if (!p || is_mine(p))
        return 0;
    if (__atomic_compare_exchange_n(&g_real[i], &none, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return 1;
    return none == p;
}

/* The first handle a program resolves hooked names from is the driver:
 * bind every hook of that library from it, so cuGetProcAddress results can
 * be recognised by address. */
static void adopt_handle(void *h, int nvml)
{
    void **slot = nvml ? &g_nvml_handle : &g_cuda_handle;
    void *none = NULL;
    dlsym_fn rd = real_dlsym();
    if (!rd || h == RTLD_DEFAULT || h == RTLD_NEXT ||
        !__atomic_compare_exchange_n(slot, &none, h, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    for (int i = 0; i < LIM_N_HOOKS; i++)
        if (g_hooks[i].nvml == nvml)
            bind(i, rd(h, g_hooks[i].name));
}

static void *resolve(const char *name, int nvml)
{
    dlsym_fn rd = real_dlsym();
    void *p, *h;
    if (!rd)
        return NULL;
    /* linked programs: the next definition after this library */
    if ((p = rd(RTLD_NEXT, name)))
        return p;
    h = __atomic_load_n(nvml ? &g_nvml_handle : &g_cuda_handle, __ATOMIC_ACQUIRE);
    if (h && (p = rd(h, name)) && !is_mine(p))
        return p;
    h = dlopen(nvml ? "libnvidia-ml.so.1" : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return NULL;
    adopt_handle(h, nvml);
    p = rd(h, name);
    return is_mine(p) ? NULL : p;
}

void *lim_sym(const char *name, int nvml)
{
    return resolve(name, nvml);
}

void *lim_real(enum lim_id id)
{
    void *p = __atomic_load_n(&g_real[id], __ATOMIC_ACQUIRE);
    if (p)
        return p;
    p = resolve(g_hooks[id].name, g_hooks[id].nvml);
    if (!p) {
        lim_warn_once(LIM_W_NREAL, "%s: not found in the driver", g_hooks[id].name);
        return NULL;
    }
    bind((int)id, p);
    return __atomic_load_n(&g_real[id], __ATOMIC_ACQUIRE);
}

void *lim_helper(enum lim_helper h)
{
    void *p = __atomic_load_n(&g_help[h], __ATOMIC_ACQUIRE);
    if (!p) {
        p = resolve(g_help_names[h], h == LIM_H_nvmlDeviceGetIndex);
        __atomic_store_n(&g_help[h], p, __ATOMIC_RELEASE);
    }
    return p;
}

/* Whether the wrapper of hook i is worth handing out: memory wrappers with
 * a memory limit, launch wrappers with a compute share, cuGetProcAddress
 * with either. */
static int wanted(int i)
{
    const struct lim_state *st = lim_state();
    if (!st->active)
        return 0;
    if (i == LIM_cuGetProcAddress || i == LIM_cuGetProcAddress_v2)
        return 1;
    if (strncmp(g_hooks[i].name, "cuLaunch", 8) == 0 || strncmp(g_hooks[i].name, "cuGraph", 7) == 0)
        return st->cfg.milli > 0;
    return st->cfg.mem_on;
}

/* dlsym on a real handle: the driver's hooked functions come back as their
 * wrappers. Called by dlsym below. */
__attribute__((visibility("hidden"))) void *lim_dlsym_handle(void *handle, const char *name)
{
    dlsym_fn rd = real_dlsym();
    if (!rd)
        return NULL;
    void *p = rd(handle, name);
    if (!p || handle == RTLD_NEXT || handle == RTLD_DEFAULT)
        return p;
    int i = find_hook(name);
    if (i < 0 || !wanted(i) || is_mine(p))
        return p; /* is_mine: a handle whose scope includes this library */
    adopt_handle(handle, g_hooks[i].nvml);
    return bind(i, p) ? (void *)g_hooks[i].wrapper : p;
}

__attribute__((visibility("hidden"))) void *lim_dlsym_real(void)
{
    return (void *)real_dlsym();
}

/* dlsym itself. glibc answers RTLD_NEXT (the next definition after the
 * caller) and RTLD_DEFAULT (the caller's scope: its own too, for a library
 * opened RTLD_LOCAL) for the object its return address lies in. Those two
 * go to glibc's dlsym by a jump, so that the return address is still the
 * caller's: called from C here, the caller would be this library, and a
 * library asking for the next definition of its own function (interposers,
 * OpenMP's ompt_start_tool) would get that function back, and call itself
 * until the stack runs out. On other architectures they are passed on from
 * C, with that flaw. */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    endbr64\n"
        "    cmpq $-1, %rdi\n" /* RTLD_NEXT */
        "    je 1f\n"
        "    testq %rdi, %rdi\n" /* RTLD_DEFAULT */
        "    je 1f\n"
        "    jmp lim_dlsym_handle\n"
        "1:  pushq %rdi\n"
        "    pushq %rsi\n"
        "    subq $8, %rsp\n" /* the call's 16-byte alignment */
        "    call lim_dlsym_real\n"
        "    addq $8, %rsp\n"
        "    popq %rsi\n"
        "    popq %rdi\n"
        "    testq %rax, %rax\n"
        "    je 2f\n"
        "    jmp *%rax\n"
        "2:  ret\n"
        ".size dlsym, .-dlsym\n");
#else
LIM_EXPORT void *dlsym(void *restrict handle, const char *restrict name)
{
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT) {
        dlsym_fn rd = real_dlsym();
        return rd ? rd(handle, name) : NULL;
    }
    return lim_dlsym_handle(handle, name);
}
#endif

/* What cuGetProcAddress gave for `sym` replaced by its wrapper when hooked. */
void *lim_map_proc(const char *sym, void *p, int ver, cuuint64_t flags)
{
    int ptsz = (flags & LIM_CU_PROC_PER_THREAD_STREAM) != 0;
    if (!p || !sym || !lim_state()->active)
        return p;
    if (is_mine(p))
        return p;
    for (int i = 0; i < LIM_N_HOOKS; i++)
        if (!g_hooks[i].nvml && __atomic_load_n(&g_real[i], __ATOMIC_ACQUIRE) == p)
            return wanted(i) ? (void *)g_hooks[i].wrapper : p;
    /* not seen before: by name, the newest variant this version maps to;
     * asked with the per-thread stream flag, a function that has no such
     * variant (cuMemAlloc: no stream) is given as it is, the plain one */
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (int i = 0; i < LIM_N_HOOKS; i++) {
            const struct hook *k = &g_hooks[i];
            if (k->nvml || strcmp(k->base, sym) != 0 || ver < k->ver ||
                k->ptsz != (pass ? 0 : ptsz))
                continue;
            if (best < 0 || k->ver > g_hooks[best].ver)
                best = i;
        }
    if (best >= 0 && wanted(best) && bind(best, p))
        return (void *)g_hooks[best].wrapper;
    return p;
}

