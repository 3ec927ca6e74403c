/*
 * tests/limiter/probe.c - a CUDA "application" for the limiter's tests.
 *
 *   lim_probe MODE OP...        MODE: runtime | runtime-ptsz | dlsym | linked
 *
 * runtime: dlopen("libcuda.so.1") and dlsym("cuGetProcAddress_v2"), then
 * every entry point from cuGetProcAddress, as the CUDA 12 runtime does
 * (runtime-ptsz: with the per-thread default stream flag); dlsym: every
 * entry point by its exported name; linked (lim_probe_linked, built with
 * PROBE_LINKED): plain -lcuda linking. Each OP prints one line, e.g.
 * "alloc 2" (the CUresult), so tests/blackbox/test_limiter.py can assert on
 * exactly what a program would see. OPs are listed in usage().
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cu_types.h"

typedef struct { unsigned long long total, free, used; } nvmem_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmem2_t;

#define FNS(X)                                                                                    \
    X(cuInit, "cuInit", CUresult, (unsigned))                                                     \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult, (void **, int))             \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (void *))                                     \
    X(cuMemAlloc_v2, "cuMemAlloc", CUresult, (CUdeviceptr *, size_t))                             \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", CUresult,                                            \
      (CUdeviceptr *, size_t *, size_t, size_t, unsigned))                                        \
    X(cuMemAllocManaged, "cuMemAllocManaged", CUresult, (CUdeviceptr *, size_t, unsigned))        \
    X(cuMemAllocAsync, "cuMemAllocAsync", CUresult, (CUdeviceptr *, size_t, void *))              \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", CUresult,                               \
      (CUdeviceptr *, size_t, void *, void *))                                                    \
    X(cuMemFree_v2, "cuMemFree", CUresult, (CUdeviceptr))                                         \
    X(cuMemFreeAsync, "cuMemFreeAsync", CUresult, (CUdeviceptr, void *))                          \
    X(cuMemCreate, "cuMemCreate", CUresult, (handle_t *, size_t, const prop_t *, unsigned long long)) \
    X(cuMemRelease, "cuMemRelease", CUresult, (handle_t))                                         \
    X(cuMemMap, "cuMemMap", CUresult,                                                             \
      (CUdeviceptr, size_t, size_t, handle_t, unsigned long long))                                \
    X(cuMemUnmap, "cuMemUnmap", CUresult, (CUdeviceptr, size_t))                                  \
    X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", CUresult, (handle_t *, void *)) \
    X(cuArrayCreate_v2, "cuArrayCreate", CUresult, (void **, const desc_t *))                     \
    X(cuArray3DCreate_v2, "cuArray3DCreate", CUresult, (void **, const desc3_t *))                \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", CUresult,                                 \
      (void **, const desc3_t *, unsigned))                                                       \
    X(cuArrayDestroy, "cuArrayDestroy", CUresult, (void *))                                       \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", CUresult, (void *))                     \
    X(cuMemGetInfo_v2, "cuMemGetInfo", CUresult, (size_t *, size_t *))                            \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", CUresult, (size_t *, int))                         \
    X(cuLaunchKernel, "cuLaunchKernel", CUresult,                                                 \
      (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,      \
       void **, void **))                                                                         \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", CUresult,                                             \
      (const launch_cfg_t *, void *, void **, void **))                                           \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", CUresult,                           \
      (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,      \
       void **))                                                                                  \
    X(cuGraphLaunch, "cuGraphLaunch", CUresult, (void *, void *))

#ifdef PROBE_LINKED
#define X(sym, base, ret, args) ret sym args;
FNS(X)
#undef X
uint64_t fake_cuda_used(int dev);
uint64_t fake_cuda_peak(int dev);
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);
extern int early_rc;
#endif

static struct {
#define X(sym, base, ret, args) ret(*sym) args;
    FNS(X)
#undef X
    uint64_t (*used)(int);
    uint64_t (*peak)(int);
} api;

static const char *mode;
static void *cuda;
typedef CUresult (*gpa_fn)(const char *, void **, int, unsigned long long, int *);
static gpa_fn gpa;

__attribute__((unused)) static void *get(const char *sym, const char *base)
{
    void *p = NULL;
    if (gpa) {
        unsigned long long fl = strcmp(mode, "runtime-ptsz") == 0 ? 2 : 0;
        if (gpa(base, &p, 12040, fl, NULL) != 0)
            p = NULL;
    } else {
        p = dlsym(cuda, sym);
    }
    return p;
}

static int load(void)
{
#ifdef PROBE_LINKED
#define X(sym, base, ret, args) api.sym = sym;
    FNS(X)
#undef X
    api.used = fake_cuda_used;
    api.peak = fake_cuda_peak;
    return 0;
#else
    cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda)
        return fprintf(stderr, "probe: %s\n", dlerror()), -1;
    if (strncmp(mode, "runtime", 7) == 0) {
        gpa = (gpa_fn)dlsym(cuda, "cuGetProcAddress_v2");
        if (!gpa)
            return fprintf(stderr, "probe: no cuGetProcAddress_v2\n"), -1;
    }
#define X(sym, base, ret, args) api.sym = (ret(*) args)get(#sym, base);
    FNS(X)
#undef X
    api.used = (uint64_t(*)(int))dlsym(cuda, "fake_cuda_used");
    api.peak = (uint64_t(*)(int))dlsym(cuda, "fake_cuda_peak");
    return 0;
#endif
}

/* what was allocated, for "free" */
struct live { int kind; uint64_t key, bytes; };
static struct live live[4096];
static int n_live;

static void keep_n(int kind, uint64_t key, uint64_t bytes)
{
    if (n_live < 4096)
        live[n_live++] = (struct live){kind, key, bytes};
}
static void keep(int kind, uint64_t key) { keep_n(kind, key, 0); }

/* what "map" mapped, for "unmap" and "retain" */
struct mapped { uint64_t va, n; };
static struct mapped mapped[256];
static int n_mapped;
static uint64_t next_va = 0x300000000000ULL;

static size_t mib(const char *s) { return (size_t)strtoull(s, NULL, 10) << 20; }

struct tc { size_t n; int dev; CUresult rc; };
static void *thread_create(void *arg)
{
    struct tc *t = arg;
    prop_t prop = {0};
    handle_t h;
    prop.type = 1;
    prop.location.type = 1;
    prop.location.id = t->dev;
    t->rc = api.cuMemCreate(&h, t->n, &prop, 0);
    if (t->rc == 0)
        keep(2, h);
    return NULL;
}

struct hammer { int n; size_t bytes; void *ctx; long ok, oom, other; };
static void *hammer(void *arg)
{
    struct hammer *h = arg;
    api.cuCtxSetCurrent(h->ctx);
    for (int i = 0; i < h->n; i++) {
        CUdeviceptr p;
        CUresult rc = api.cuMemAlloc_v2(&p, h->bytes);
        if (rc == 0) {
            h->ok++;
            if (api.cuMemFree_v2(p))
                h->other++;
        } else if (rc == 2) {
            h->oom++;
        } else {
            h->other++;
        }
    }
    return NULL;
}

static volatile int spin_stop;
static void *spin_launch(void *arg)
{
    void *ctx;
    (void)arg;
    if (api.cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && api.cuCtxSetCurrent(ctx) == 0)
        while (!spin_stop)
            api.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nvml(const char *arg, int v2)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("nvml none\n");
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*byidx)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    void *dev;
    if (!init || !byidx || init() || byidx((unsigned)atoi(arg), &dev)) {
        printf("nvml error\n");
        return;
    }
    if (v2) {
        int (*f)(void *, nvmem2_t *) = (int (*)(void *, nvmem2_t *))dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
        nvmem2_t m = {0};
        int rc = f(dev, &m);
        printf("nvml2 %d %llu %llu %llu\n", rc, m.total >> 20, m.used >> 20, m.free >> 20);
    } else {
        int (*f)(void *, nvmem_t *) = (int (*)(void *, nvmem_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
        nvmem_t m = {0};
        int rc = f(dev, &m);
        printf("nvml %d %llu %llu %llu\n", rc, m.total >> 20, m.used >> 20, m.free >> 20);
    }
}

static int op(char *o, char **rest, char **argv)
{
    char *a = strchr(o, ':');
    char *b = NULL, *c = NULL;
    CUresult rc = 0;
    if (a) {
        *a++ = '\0';
        if ((b = strchr(a, ':'))) {
            *b++ = '\0';
            if ((c = strchr(b, ':')))
                *c++ = '\0';
        }
    }
    if (!strcmp(o, "ctx")) {
        void *ctx;
        rc = api.cuInit(0);
        if (!rc)
            rc = api.cuDevicePrimaryCtxRetain(&ctx, atoi(a));
        if (!rc)
            rc = api.cuCtxSetCurrent(ctx);
        printf("ctx %d\n", rc);
    } else if (!strcmp(o, "init")) {
        printf("init %d\n", api.cuInit(0));
    } else if (!strcmp(o, "alloc") || !strcmp(o, "managed") || !strcmp(o, "async") ||
               !strcmp(o, "pool")) {
        CUdeviceptr p = 0;
        rc = !strcmp(o, "alloc") ? api.cuMemAlloc_v2(&p, mib(a))
             : !strcmp(o, "managed") ? api.cuMemAllocManaged(&p, mib(a), 1)
             : !strcmp(o, "async") ? api.cuMemAllocAsync(&p, mib(a), NULL)
             : api.cuMemAllocFromPoolAsync(&p, mib(a), NULL, NULL);
        if (!rc)
            keep(!strcmp(o, "async") || !strcmp(o, "pool") ? 5 : 1, p);
        printf("%s %d\n", o, rc);
    } else if (!strcmp(o, "pitch")) {
        CUdeviceptr p = 0;
        size_t pitch = 0;
        rc = api.cuMemAllocPitch_v2(&p, &pitch, strtoull(a, NULL, 10), strtoull(b, NULL, 10), 4);
        if (!rc)
            keep(1, p);
        printf("pitch %d %zu\n", rc, pitch);
    } else if (!strcmp(o, "create")) {
        prop_t prop = {0};
        handle_t h;
        prop.type = 1;
        prop.location.type = !strcmp(b, "host") ? 2 : !strcmp(b, "hostnuma") ? 3 : 1;
        prop.location.id = prop.location.type == 1 ? atoi(b + 3) : 0;
        rc = api.cuMemCreate(&h, mib(a), &prop, 0);
        if (!rc)
            keep_n(2, h, mib(a));
        printf("create %d\n", rc);
    } else if (!strcmp(o, "ptszalloc")) {
        /* cuMemAlloc looked up with the per-thread default stream flag, as
         * a program built with --default-stream per-thread asks for every
         * entry point; the first use of it */
        gpa_fn g;
#ifdef PROBE_LINKED
        g = cuGetProcAddress_v2;
#else
        g = (gpa_fn)dlsym(cuda, "cuGetProcAddress_v2");
#endif
        CUresult (*f)(CUdeviceptr *, size_t) = NULL;
        CUdeviceptr p = 0;
        rc = g ? g("cuMemAlloc", (void **)&f, 12040, 2, NULL) : 1;
        if (!rc)
            rc = f(&p, mib(a));
        if (!rc)
            keep(1, p);
        printf("ptszalloc %d\n", rc);
    } else if (!strcmp(o, "map")) {
        /* the newest live handle, whole, at an address of its own */
        int i = n_live - 1;
        while (i >= 0 && live[i].kind != 2)
            i--;
        rc = 1;
        if (i >= 0 && n_mapped < 256) {
            rc = api.cuMemMap(next_va, live[i].bytes, 0, live[i].key, 0);
            if (!rc) {
                mapped[n_mapped++] = (struct mapped){next_va, live[i].bytes};
                next_va += live[i].bytes;
            }
        }
        printf("map %d\n", rc);
    } else if (!strcmp(o, "unmap")) {
        rc = n_mapped ? api.cuMemUnmap(mapped[n_mapped - 1].va, mapped[n_mapped - 1].n) : 1;
        n_mapped -= !rc;
        printf("unmap %d\n", rc);
    } else if (!strcmp(o, "retain")) {
        /* NCCL's free: the handle back from the newest mapping's address */
        handle_t h = 0;
        rc = n_mapped ? api.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)mapped[n_mapped - 1].va) : 1;
        if (!rc)
            keep(2, h);
        printf("retain %d\n", rc);
    } else if (!strcmp(o, "tcreate")) {
        struct tc t = {mib(a), atoi(b), -1};
        pthread_t th;
        pthread_create(&th, NULL, thread_create, &t);
        pthread_join(th, NULL);
        printf("tcreate %d\n", t.rc);
    } else if (!strcmp(o, "array") || !strcmp(o, "array3d") || !strcmp(o, "mipmap")) {
        void *arr = NULL;
        if (!strcmp(o, "array")) {
            desc_t d = {strtoull(a, NULL, 10), strtoull(b, NULL, 10), 0x20, 1};
            rc = api.cuArrayCreate_v2(&arr, &d);
        } else if (!strcmp(o, "array3d")) {
            desc3_t d = {strtoull(a, NULL, 10), strtoull(b, NULL, 10), strtoull(c, NULL, 10), 0x20, 1, 0};
            rc = api.cuArray3DCreate_v2(&arr, &d);
        } else {
            desc3_t d = {strtoull(a, NULL, 10), strtoull(b, NULL, 10), 0, 0x20, 1, 0};
            rc = api.cuMipmappedArrayCreate(&arr, &d, (unsigned)atoi(c));
        }
        if (!rc)
            keep(!strcmp(o, "mipmap") ? 4 : 3, (uint64_t)(uintptr_t)arr);
        printf("%s %d\n", o, rc);
    } else if (!strcmp(o, "free")) {
        if (!n_live) {
            printf("free none\n");
            return 0;
        }
        n_live--;
        uint64_t k = live[n_live].key;
        switch (live[n_live].kind) {
        case 1: rc = api.cuMemFree_v2(k); break;
        case 5: rc = api.cuMemFreeAsync(k, NULL); break;
        case 2: rc = api.cuMemRelease(k); break;
        case 3: rc = api.cuArrayDestroy((void *)(uintptr_t)k); break;
        default: rc = api.cuMipmappedArrayDestroy((void *)(uintptr_t)k); break;
        }
        printf("free %d\n", rc);
    } else if (!strcmp(o, "info")) {
        size_t fr = 0, to = 0;
        rc = api.cuMemGetInfo_v2(&fr, &to);
        printf("info %d %zu %zu\n", rc, fr >> 20, to >> 20);
    } else if (!strcmp(o, "total")) {
        size_t t = 0;
        rc = api.cuDeviceTotalMem_v2(&t, atoi(a));
        printf("total %d %zu\n", rc, t >> 20);
    } else if (!strcmp(o, "card")) {
        printf("card %llu\n", (unsigned long long)(api.used ? api.used(atoi(a)) >> 20 : 0));
    } else if (!strcmp(o, "nvml") || !strcmp(o, "nvml2")) {
        nvml(a ? a : "0", o[4] == '2');
    } else if (!strcmp(o, "who")) {
        Dl_info di = {0};
        void *p = !strcmp(a, "alloc") ? (void *)api.cuMemAlloc_v2
            : !strcmp(a, "launch") ? (void *)api.cuLaunchKernel
            : !strcmp(a, "info") ? (void *)api.cuMemGetInfo_v2 : (void *)api.cuInit;
        const char *f = p && dladdr(p, &di) && di.dli_fname ? strrchr(di.dli_fname, '/') : NULL;
        printf("who %s %s\n", a, f ? f + 1 : di.dli_fname ? di.dli_fname : "?");
    } else if (!strcmp(o, "sleep")) { /* stay alive (a container has no stdin for ready) */
        printf("sleep\n");
        fflush(stdout);
        sleep((unsigned)atoi(a ? a : "1"));
    } else if (!strcmp(o, "ready")) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            line[0] = 0;
    } else if (!strcmp(o, "forklaunch")) {
        /* N forks while another thread launches kernels: a child's first
         * launch must not wait for a lock that thread held at the fork */
        pthread_t th;
        int hung = 0, n = atoi(a);
        spin_stop = 0;
        pthread_create(&th, NULL, spin_launch, NULL);
        for (int i = 0; i < n; i++) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                alarm(1);
                api.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
                _exit(0);
            }
            int st = 0;
            waitpid(pid, &st, 0);
            hung += !WIFEXITED(st);
        }
        spin_stop = 1;
        pthread_join(th, NULL);
        printf("forklaunch %d hung\n", hung);
    } else if (!strcmp(o, "unlinkledger")) {
        /* a forked child can no longer open the ledger again */
        char path[600];
        const char *d = getenv("GPUSCHED_LIMITER_DIR");
        snprintf(path, sizeof path, "%s/ledger", d ? d : ".");
        printf("unlinkledger %d\n", unlink(path));
    } else if (!strcmp(o, "fork")) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            CUdeviceptr p;
            printf("child %d\n", api.cuMemAlloc_v2(&p, mib(a)));
            fflush(stdout);
            _exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
        printf("forked %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    } else if (!strcmp(o, "exec")) {
        fflush(stdout);
        char *av[64];
        int n = 0;
        av[n++] = argv[0];
        av[n++] = (char *)mode;
        for (char **r = rest; *r && n < 63; r++)
            av[n++] = *r;
        av[n] = NULL;
        execv("/proc/self/exe", av);
        printf("exec failed\n");
        return 1;
    } else if (!strcmp(o, "launch") || !strcmp(o, "launchex") || !strcmp(o, "coop") ||
               !strcmp(o, "graph")) {
        int n = atoi(a);
        unsigned bl = b ? (unsigned)atoi(b) : 1;
        double t0 = now();
        launch_cfg_t cfg = {bl, 1, 1, 32, 1, 1, 0, NULL, NULL, 0};
        for (int i = 0; i < n && !rc; i++)
            rc = !strcmp(o, "launch") ? api.cuLaunchKernel(NULL, bl, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)
                 : !strcmp(o, "launchex") ? api.cuLaunchKernelEx(&cfg, NULL, NULL, NULL)
                 : !strcmp(o, "coop") ? api.cuLaunchCooperativeKernel(NULL, bl, 1, 1, 32, 1, 1, 0, NULL, NULL)
                 : api.cuGraphLaunch(NULL, NULL);
        printf("%s %d %.3f\n", o, rc, now() - t0);
    } else if (!strcmp(o, "allocfree") || !strcmp(o, "infoloop")) {
        /* cost per call: N alloc+free pairs of B bytes, or N cuMemGetInfo */
        long n = atol(a);
        size_t bytes = b ? strtoull(b, NULL, 10) : 4096;
        double t0 = now();
        for (long i = 0; i < n && !rc; i++) {
            if (o[0] == 'a') {
                CUdeviceptr p;
                rc = api.cuMemAlloc_v2(&p, bytes);
                if (!rc)
                    rc = api.cuMemFree_v2(p);
            } else {
                size_t fr, to;
                rc = api.cuMemGetInfo_v2(&fr, &to);
            }
        }
        printf("%s %d %.0f ns\n", o, rc, (now() - t0) / (double)(n ? n : 1) * 1e9);
    } else if (!strcmp(o, "threads")) {
        /* T threads, each N alloc+free pairs of M MiB on device 0 */
        int t = atoi(a), n = atoi(b);
        struct hammer h[64];
        pthread_t th[64];
        void *ctx;
        long ok = 0, oom = 0, other = 0;
        api.cuInit(0);
        api.cuDevicePrimaryCtxRetain(&ctx, 0);
        for (int i = 0; i < t && i < 64; i++) {
            h[i] = (struct hammer){n, mib(c), ctx, 0, 0, 0};
            pthread_create(&th[i], NULL, hammer, &h[i]);
        }
        for (int i = 0; i < t && i < 64; i++) {
            pthread_join(th[i], NULL);
            ok += h[i].ok;
            oom += h[i].oom;
            other += h[i].other;
        }
        printf("threads ok=%ld oom=%ld other=%ld peak=%llu\n", ok, oom, other,
               (unsigned long long)(api.peak ? api.peak(0) >> 20 : 0));
    } else if (!strcmp(o, "bench")) {
        double secs = atof(a), t0 = now();
        unsigned bl = (unsigned)atoi(b);
        long n = 0;
        while (now() - t0 < secs && !rc) {
            rc = api.cuLaunchKernel(NULL, bl, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
            n++;
        }
        printf("bench %d %.1f\n", rc, (double)n / (now() - t0));
#ifdef PROBE_LINKED
    } else if (!strcmp(o, "early")) {
        printf("early %d\n", early_rc);
#endif
    } else {
        fprintf(stderr, "probe: unknown op '%s'\n", o);
        return 2;
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: lim_probe runtime|runtime-ptsz|dlsym|linked OP...\n"
                        "ops: ctx:D init alloc:M managed:M async:M pool:M pitch:W:H "
                        "create:M:devD|host|hostnuma map unmap retain ptszalloc:M unlinkledger forklaunch:N tcreate:M:D array:W:H array3d:W:H:D "
                        "mipmap:W:H:L free info total:D card:D nvml:I nvml2:I "
                        "who:alloc|launch|info ready sleep:S fork:M exec launch:N:B launchex:N:B "
                        "coop:N:B graph:N bench:S:B allocfree:N:BYTES infoloop:N threads:T:N:M early\n");
        return 2;
    }
    mode = argv[1];
    if (load() < 0)
        return 1;
    for (int i = 2; i < argc; i++) {
        int rc = op(argv[i], argv + i + 1, argv);
        if (rc)
            return rc;
    }
    return 0;
}
