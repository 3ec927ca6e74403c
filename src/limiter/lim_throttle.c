/*
 * limiter/lim_throttle.c - compute: hold the container to its thousandths
 * of the GPU by delaying kernel launches.
 *
 * A launch costs its number of blocks (a graph launch costs 1). Each device
 * has a token bucket refilled at `rate` cost per second; a launch waits
 * while the bucket is in debt. A watcher thread samples the GPU's
 * utilisation through NVML every 100 ms and sets the rate from what was
 * launched in that window: if C cost gave u % busy, the share s % needs
 * C * s / u per window (smoothed over windows; raised by half when the
 * bucket held launches back and the GPU was below the share). Until the
 * first sample nothing waits; a share of 1000 (or none) is off and the
 * launch wrappers call straight through.
 *
 * NVML's utilisation is that of its last sampling period, so it lags the
 * launches: read first, it still covers the time before the container
 * started (a few %), and C * s / u would let a GPU-bound start run
 * unthrottled for a second (seen on an H100). So the first estimate takes
 * the launches as if they had kept the GPU busy (u = 100), and an estimate
 * is never more than twice what the window launched.
 *
 * CUDA device d is NVML's device named by entry d of CUDA_VISIBLE_DEVICES.
 * The utilisation is the container's own when the device plugin measures
 * it (<ledger dir>/util, lim_util.h: NVML's per-process samples of the
 * container's processes, fresh for UTIL_FRESH_S; the rate is then set once
 * per new sample). One such sample says little (a driver may give a whole
 * period's busy time to one of two busy tenants), so the cost launched per
 * second and the container's busy percent are both averaged over about
 * UTIL_TAU_S and the rate is set from their ratio. Otherwise
 * it is the whole GPU's (nvmlDeviceGetUtilizationRates): other tenants'
 * work counts against this container, so with busy neighbours it gets
 * less than its share, never more.
 */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "limiter/lim.h"
#include "limiter/lim_util.h"

#define WINDOW_S 0.1
#define UTIL_FRESH_S 1.0 /* the plugin's sample of the container is used this long */
#define UTIL_TAU_S 1.5   /* the plugin's samples are averaged over about this long */

struct bucket {
    pthread_mutex_t mu;
    double rate, tokens;
    double last;
    double window_cost;
    double cost_rate, busy; /* averages over UTIL_TAU_S, with the plugin's samples */
    int measured, throttled, used, averaged;
};

static struct bucket g_b[LIM_MAX_DEV];
static pthread_once_t g_b_once = PTHREAD_ONCE_INIT;
static pid_t g_watcher_pid;
static pthread_mutex_t g_watcher_mu = PTHREAD_MUTEX_INITIALIZER;

typedef nvmlReturn_t (*nv_init_fn)(void);
typedef nvmlReturn_t (*nv_util_fn)(nvmlDevice_t, nvmlUtilization_t *);

/* (no libm: the library needs nothing but libc) */
static double dmin(double a, double b) { return a < b ? a : b; }
static double dmax(double a, double b) { return a > b ? a : b; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* fork while another thread holds a bucket (it launches) or the watcher's
 * lock must not leave the child a lock nobody will release: they are all
 * taken around fork (none is held while another is taken) */
static void fork_prepare(void)
{
    pthread_mutex_lock(&g_watcher_mu);
    for (int i = 0; i < LIM_MAX_DEV; i++)
        pthread_mutex_lock(&g_b[i].mu);
}
static void fork_done(void)
{
    for (int i = LIM_MAX_DEV - 1; i >= 0; i--)
        pthread_mutex_unlock(&g_b[i].mu);
    pthread_mutex_unlock(&g_watcher_mu);
}

static void buckets_init(void)
{
    for (int i = 0; i < LIM_MAX_DEV; i++)
        pthread_mutex_init(&g_b[i].mu, NULL);
    pthread_atfork(fork_prepare, fork_done, fork_done);
}

/* The busy percent to steer by on device d, and the seconds it covers, in
 * *u and *dt: the container's own (the plugin's util file, while fresh and
 * new since *seen): 2; or else the whole GPU's over the last window: 1.
 * 0 to wait (the file is fresh but has nothing new). */
static int busy_pct(int d, const struct lim_util *uf, int have_uf, double now, uint64_t *seen,
                    nvmlDevice_t h, nv_util_fn util, double *u, double *dt)
{
    const struct lim_util_dev *ud = have_uf ? &uf->dev[d] : NULL;
    if (ud && ud->stamp_ns && now - (double)ud->stamp_ns / 1e9 < UTIL_FRESH_S) {
        if (ud->stamp_ns == *seen)
            return 0;
        *dt = *seen && ud->stamp_ns > *seen ? (double)(ud->stamp_ns - *seen) / 1e9 : WINDOW_S;
        *seen = ud->stamp_ns;
        *u = (ud->permille > 1000 ? 1000 : ud->permille) / 10.0; /* a torn or bad file */
        return 2;
    }
    nvmlUtilization_t nu;
    if (!h || util(h, &nu) != 0)
        return 0;
    *u = nu.gpu;
    *dt = WINDOW_S;
    return 1;
}

static void *watch(void *arg)
{
    (void)arg;
    nv_init_fn init = (nv_init_fn)lim_sym("nvmlInit_v2", 1);
    nv_util_fn util = (nv_util_fn)lim_sym("nvmlDeviceGetUtilizationRates", 1);
    nvmlDevice_t h[LIM_MAX_DEV] = {0};
    uint64_t seen[LIM_MAX_DEV] = {0};
    const struct lim_cfg *cfg = &lim_state()->cfg;
    double share = cfg->milli / 10.0;
    struct lim_util uf;

    if (!init || !util || init() != 0) {
        lim_warn_once(LIM_W_NVML, "NVML (libnvidia-ml.so.1) unusable: the compute share is "
                      "not enforced");
        return NULL;
    }
    lim_proc_register();
    for (;;) {
        struct timespec ts = {0, (long)(WINDOW_S * 1e9)};
        nanosleep(&ts, NULL);
        int have_uf = lim_util_read(cfg->dir, &uf) == 0;
        for (int d = 0; d < LIM_MAX_DEV; d++) {
            struct bucket *b = &g_b[d];
            double u, dt;
            if (!__atomic_load_n(&b->used, __ATOMIC_ACQUIRE))
                continue;
            if (!h[d] && lim_nvml_handle(d, &h[d]) != 0)
                h[d] = NULL;
            int own = busy_pct(d, &uf, have_uf, now_s(), &seen[d], h[d], util, &u, &dt);
            if (!own)
                continue;
            pthread_mutex_lock(&b->mu);
            double c = b->window_cost;
            b->window_cost = 0;
            if (own == 2) { /* like with like: both averaged over the same time */
                b->cost_rate = b->averaged ? lim_util_avg(b->cost_rate, c / dt, dt, UTIL_TAU_S)
                                           : c / dt;
                b->busy = b->averaged ? lim_util_avg(b->busy, u, dt, UTIL_TAU_S) : u;
                b->averaged = 1;
                c = b->cost_rate * dt;
                u = b->busy;
            } else {
                b->averaged = 0;
            }
            if (u >= 1 && c > 0) {
                double launched = c / dt;
                if (b->measured)
                    b->rate = 0.5 * b->rate + 0.5 * dmin(launched * share / u, 2 * launched);
                else
                    b->rate = launched * share / 100; /* u may cover the time before */
                b->measured = 1;
            } else if (b->throttled && u < share) {
                b->rate *= 1.5;
            }
            b->throttled = 0;
            pthread_mutex_unlock(&b->mu);
        }
    }
    return NULL;
}

/* A watcher per process: a forked child has none until it launches. */
static void ensure_watcher(void)
{
    pid_t pid = getpid();
    if (__atomic_load_n(&g_watcher_pid, __ATOMIC_ACQUIRE) == pid)
        return;
    pthread_mutex_lock(&g_watcher_mu);
    if (g_watcher_pid != pid) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, watch, NULL) == 0)
            __atomic_store_n(&g_watcher_pid, pid, __ATOMIC_RELEASE);
        pthread_attr_destroy(&a);
    }
    pthread_mutex_unlock(&g_watcher_mu);
}

void lim_throttle(uint64_t cost)
{
    CUdevice d;
    if (lim_cur_dev(&d) < 0)
        d = 0;
    pthread_once(&g_b_once, buckets_init);
    ensure_watcher();
    struct bucket *b = &g_b[d];
    __atomic_store_n(&b->used, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&b->mu);
    for (;;) {
        double t = now_s();
        if (!b->measured || b->rate <= 0) {
            b->last = t;
            break;
        }
        double cap = dmax(b->rate * 0.05, (double)cost);
        b->tokens = dmin(cap, b->tokens + b->rate * (t - b->last));
        b->last = t;
        if (b->tokens >= 0) {
            b->tokens -= (double)cost;
            break;
        }
        b->throttled = 1;
        double wait = dmin(-b->tokens / b->rate, 0.02);
        pthread_mutex_unlock(&b->mu);
        struct timespec ts = {0, (long)(wait * 1e9) + 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&b->mu);
    }
    b->window_cost += (double)cost;
    pthread_mutex_unlock(&b->mu);
}

static uint64_t blocks(unsigned x, unsigned y, unsigned z)
{
    uint64_t n = (uint64_t)(x ? x : 1) * (y ? y : 1) * (z ? z : 1);
    return n > (1ULL << 40) ? (1ULL << 40) : n;
}

static int compute_on(void)
{
    return lim_state()->cfg.milli > 0;
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
static CUresult launch(launch_fn f, CUfunction k, unsigned gx, unsigned gy, unsigned gz,
                       unsigned bx, unsigned by, unsigned bz, unsigned shm, CUstream s,
                       void **params, void **extra)
{
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (compute_on())
        lim_throttle(blocks(gx, gy, gz));
    return f(k, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}
LIM_EXPORT CUresult cuLaunchKernel(CUfunction k, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                   CUstream s, void **params, void **extra)
{
    return launch((launch_fn)lim_real(LIM_cuLaunchKernel), k, gx, gy, gz, bx, by, bz, shm, s,
                  params, extra);
}
LIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction k, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                        CUstream s, void **params, void **extra)
{
    return launch((launch_fn)lim_real(LIM_cuLaunchKernel_ptsz), k, gx, gy, gz, bx, by, bz, shm,
                  s, params, extra);
}

typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
static CUresult launch_ex(launch_ex_fn f, const CUlaunchConfig *c, CUfunction k, void **params,
                          void **extra)
{
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (compute_on() && c)
        lim_throttle(blocks(c->gridDimX, c->gridDimY, c->gridDimZ));
    return f(c, k, params, extra);
}
LIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction k, void **params,
                                     void **extra)
{
    return launch_ex((launch_ex_fn)lim_real(LIM_cuLaunchKernelEx), c, k, params, extra);
}
LIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction k, void **params,
                                          void **extra)
{
    return launch_ex((launch_ex_fn)lim_real(LIM_cuLaunchKernelEx_ptsz), c, k, params, extra);
}

typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void **);
static CUresult coop(coop_fn f, CUfunction k, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                     unsigned by, unsigned bz, unsigned shm, CUstream s, void **params)
{
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (compute_on())
        lim_throttle(blocks(gx, gy, gz));
    return f(k, gx, gy, gz, bx, by, bz, shm, s, params);
}
LIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction k, unsigned gx, unsigned gy, unsigned gz,
                                              unsigned bx, unsigned by, unsigned bz,
                                              unsigned shm, CUstream s, void **params)
{
    return coop((coop_fn)lim_real(LIM_cuLaunchCooperativeKernel), k, gx, gy, gz, bx, by, bz, shm,
                s, params);
}
LIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction k, unsigned gx, unsigned gy,
                                                   unsigned gz, unsigned bx, unsigned by,
                                                   unsigned bz, unsigned shm, CUstream s,
                                                   void **params)
{
    return coop((coop_fn)lim_real(LIM_cuLaunchCooperativeKernel_ptsz), k, gx, gy, gz, bx, by, bz,
                shm, s, params);
}

typedef CUresult (*graph_fn)(CUgraphExec, CUstream);
LIM_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
    graph_fn f = (graph_fn)lim_real(LIM_cuGraphLaunch);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (compute_on())
        lim_throttle(1);
    return f(g, s);
}
LIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    graph_fn f = (graph_fn)lim_real(LIM_cuGraphLaunch_ptsz);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (compute_on())
        lim_throttle(1);
    return f(g, s);
}
