/*
 * limiter/lim_util.h - a container's own GPU utilisation, from the device
 * plugin to the compute throttle.
 *
 * NVML's utilisation of a GPU is the whole GPU's: a throttle holding a
 * container to its share by that number also counts its neighbours' work,
 * so two containers of 30 % each, both busy, held each other to about
 * 15 %. The device plugin can tell a container's own part: NVML's
 * per-process samples, each process found by its pid namespace and pid in
 * the container's ledger (lim_ledger.h). It writes them to <ledger dir>/util
 * (this file's format, replaced whole by a rename, so a reader never sees
 * half of it), which the throttle reads each window and prefers while it
 * is fresh.
 *
 * Plain data, native endianness: both ends run on the same node.
 */
#ifndef GPUSCHED_LIM_UTIL_H
#define GPUSCHED_LIM_UTIL_H

#include <stdint.h>

#include "limiter/lim_env.h"

#define LIM_UTIL_FILE "util"
#define LIM_UTIL_MAGIC "GSUTIL01"

struct lim_util_dev {
    uint64_t stamp_ns;  /* CLOCK_MONOTONIC when the plugin sampled it; 0: no sample */
    uint32_t permille;  /* the container's processes' SM utilisation, 0..1000, in the
                         * sampling periods since the plugin's last write */
    uint32_t avg_ppm;   /* the same averaged over about LIM_UTIL_AVG_S, 0..1000000:
                         * what people are shown (one write alone may read 0 or
                         * the whole GPU on a driver that names one process a period) */
};
#define LIM_UTIL_AVG_S 10.0

/* avg moved toward v by a step of dt seconds of an average over about tau
 * seconds (the plugin's avg_ppm, the throttle's cost and busy averages). */
static inline double lim_util_avg(double avg, double v, double dt, double tau)
{
    return avg + dt / (tau + dt) * (v - avg);
}

struct lim_util {
    char magic[8];
    uint32_t n_dev;     /* LIM_MAX_DEV */
    uint32_t reserved;
    struct lim_util_dev dev[LIM_MAX_DEV]; /* by CUDA device ordinal in the container */
};

/* Reads dir/util into *u: 0, or -1 when it is missing or not a util file of
 * this layout. */
int lim_util_read(const char *dir, struct lim_util *u);

/* Writes *u (magic and n_dev filled in here) to dir/util through a rename.
 * 0, or -1 with errno. */
int lim_util_write(const char *dir, struct lim_util *u);

#endif
