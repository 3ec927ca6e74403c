/*
 * limiter/lim_env.h - the limits a container's processes are held to, read
 * from the environment the device plugin's Allocate sets.
 *
 * The limiter library runs inside every process of a container (it is
 * preloaded), so a bad value must never crash or half-configure the
 * application: lim_env_parse() either accepts every variable or rejects the
 * whole configuration with a message naming the variable, and the caller
 * then passes every call through. Pure: no I/O, no allocation, the
 * environment comes through a getter so the fuzzer can feed it.
 *
 *   CUDA_DEVICE_MEMORY_LIMIT     memory per GPU: digits with an optional
 *                                k/m/g suffix (KiB/MiB/GiB), e.g. 8192m
 *   CUDA_DEVICE_MEMORY_LIMIT_<i> the same for device i (0..15), wins
 *   CUDA_DEVICE_SM_LIMIT         compute percent 0..100 (0 and 100 = off)
 *   GPUSCHED_GPU_MILLI           compute thousandths 1..1000, wins over it
 *   GPUSCHED_GPU_UUIDS           the container's GPUs in Allocate's order
 *                                (comma-separated UUIDs): device i of the
 *                                limits, the ledger and the plugin's
 *                                utilisation file is the i-th, whatever a
 *                                process numbers it (it may set its own
 *                                CUDA_VISIBLE_DEVICES); without it, device
 *                                i is CUDA's ordinal i
 *   GPUSCHED_LIMITER_DIR         directory of the shared ledger (absolute)
 *   GPUSCHED_LIMITER             "off" disables the limiter
 */
#ifndef GPUSCHED_LIM_ENV_H
#define GPUSCHED_LIM_ENV_H

#include <stddef.h>
#include <stdint.h>

#define LIM_MAX_DEV 16
#define LIM_DIR_MAX 200
#define LIM_DEFAULT_DIR "/tmp/gpusched-limiter"
/* Where the device plugin mounts the container's ledger directory, and the
 * file there that holds the variables below as KEY=VALUE lines: read when
 * the environment lacks them (a process started with an environment of its
 * own), the environment winning. */
#define LIM_MOUNT_DIR "/usr/local/gpusched/ledger"
#define LIM_LIMITS_FILE "limits"
#define LIM_MAX_BYTES (1ULL << 50) /* 1 PiB: anything larger is a typo */
#define LIM_UUID_LEN 64              /* "GPU-" and 36 characters, with room */

struct lim_cfg {
    uint64_t mem_limit[LIM_MAX_DEV]; /* bytes per device; 0 = none */
    char uuids[LIM_MAX_DEV][LIM_UUID_LEN]; /* GPUSCHED_GPU_UUIDS */
    int n_uuids;
    int milli;                       /* compute thousandths; 0 = off */
    char dir[LIM_DIR_MAX + 1];       /* ledger directory */
    int mem_on;                      /* some device has a memory limit */
};

/* Returns the value of an environment variable, NULL when unset. */
typedef const char *(*lim_getenv_fn)(const char *name, void *arg);

/* Fills *c from the environment. 0 = ok (c->mem_on / c->milli say whether
 * anything is limited), -1 = a bad value: err holds "NAME: 'value' is ..."
 * and *c is left all-off. */
int lim_env_parse(struct lim_cfg *c, lim_getenv_fn get, void *arg, char *err, size_t errlen);

/* Parses one memory amount ("8192m", "20g", "1048576"); 0 or -1. */
int lim_env_bytes(const char *s, uint64_t *out);

#endif
