/*
 * limiter/lim_ledger.h - one memory budget shared by every process of a
 * container.
 *
 * A container's processes each run their own copy of the limiter, but the
 * limit is the container's. They share a small file (<dir>/ledger, mapped
 * MAP_SHARED): a versioned header and one slot per process holding the
 * bytes it has allocated on each device. A process claims a slot on its
 * first allocation and holds an open-file-description record lock
 * (F_OFD_SETLK) on that slot's byte for its lifetime; the kernel drops the
 * lock when the process dies however it dies (SIGKILL included), so a slot
 * whose byte is unlocked belongs to a dead process and is reclaimed by the
 * next one that looks. OFD locks (not classic fcntl locks) so that closing
 * some other descriptor of the file, or a second handle in one process,
 * cannot drop them. The descriptor is close-on-exec, and a forked child
 * opens the file anew before its first look (and the limiter closes the
 * inherited descriptor right after fork, lim_ledger_forked), so a child
 * and an exec'd image each start with their own empty slot and never hold
 * their parent's lock. Every update runs under an OFD lock on a global byte
 * (and a process mutex, as the lock does not exclude threads).
 *
 * A file that is not a ledger of this major version, or whose sizes do not
 * fit the file, is an error on open, never a crash. The device plugin opens
 * ledgers read-only to report usage (lim_ledger_open_ro): a copy read once,
 * since the container may change the file, or put a FIFO in its place.
 *
 * Ownership: a struct lim_ledger is the caller's; lim_ledger_close() undoes
 * the open.
 */
#ifndef GPUSCHED_LIM_LEDGER_H
#define GPUSCHED_LIM_LEDGER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "limiter/lim_env.h"

#ifdef LIM_OLD_GLIBC_ABI
#include <sys/syscall.h>
#include <unistd.h>
/* fstat is GLIBC_2.33 (an inline over __fxstat before): the system call
 * fills the same struct stat on x86-64 (lim_compat.h) */
#define lim_fstat(fd, st) ((int)syscall(SYS_fstat, (fd), (st)))
#define lim_lstat(path, st) ((int)syscall(SYS_lstat, (path), (st)))
#else
#define lim_fstat fstat
#define lim_lstat lstat
#endif

#define LIM_LEDGER_MAGIC "GSLEDGER"
#define LIM_LEDGER_MAJOR 1
#define LIM_LEDGER_MINOR 1 /* 1: slots carry their pid namespace */
#define LIM_LEDGER_SLOTS 128
#define LIM_LEDGER_FILE "ledger"

struct lim_ledger_hdr {
    char magic[8];
    uint32_t major, minor;
    uint32_t hdr_size, slot_size, n_slots, n_dev;
    uint64_t limit[LIM_MAX_DEV]; /* bytes, as the last process to open saw them */
    uint64_t reserved[8];
};

struct lim_slot {
    int32_t pid;                 /* as seen in the owner's pid namespace */
    uint32_t in_use;
    uint64_t used[LIM_MAX_DEV];  /* bytes allocated per device */
    uint64_t pidns;              /* that namespace's inode (minor 1; 0 unknown): with
                                  * pid, what the device plugin finds the process by */
    uint64_t reserved[3];
};

struct lim_ledger {
    int priv;                    /* a private in-process ledger, no file */
    int copy;                    /* h is a copy of the file read once (lim_ledger_open_ro) */
    int fd;                      /* -1 when closed (after fork, until reopened) */
    pid_t opened_by;             /* the process fd belongs to */
    char path[LIM_DIR_MAX + 16];
    int writable;
    size_t size;
    struct lim_ledger_hdr *h;
    struct lim_slot *slots;
    int my;                      /* this process's slot, -1 before the first claim */
    pid_t my_pid;                /* who claimed it (a forked child must claim anew) */
    pthread_mutex_t mu;
};

/* Opens (creating it and its directory when missing) <dir>/ledger for
 * reading and writing, and records `limits` in the header. 0; 1 when an
 * unusable ledger was moved to ledger.bad and a new one made (err says
 * what was wrong with it); or -1 with a message in err. */
int lim_ledger_open(struct lim_ledger *l, const char *dir, const uint64_t *limits, char *err,
                    size_t errlen);

/* A ledger that lives in this process only: what the limiter falls back to
 * when the file cannot be used, so the process is still held to the limit. */
int lim_ledger_open_private(struct lim_ledger *l, const uint64_t *limits);

/* Opens an existing ledger file read-only (the device plugin's view). */
int lim_ledger_open_ro(struct lim_ledger *l, const char *path, char *err, size_t errlen);

void lim_ledger_close(struct lim_ledger *l);

/* For pthread_atfork's child handler: drop the descriptor inherited from
 * the parent at once (a child that never allocates must not keep the
 * parent's slot lock alive after the parent dies). */
void lim_ledger_forked(struct lim_ledger *l);

/* Adds `bytes` on device `dev` to this process's slot if the container's
 * total stays within `limit`: 0 = reserved, 1 = over the limit, -1 = the
 * ledger failed (no slot free, lock error). */
int lim_ledger_reserve(struct lim_ledger *l, int dev, uint64_t bytes, uint64_t limit);

/* Takes `bytes` off this process's slot (never below zero). */
void lim_ledger_release(struct lim_ledger *l, int dev, uint64_t bytes);

/* The container's total on `dev`, after reclaiming dead processes' slots
 * (read-only ledgers skip reclaiming and leave dead slots out of the sum). */
uint64_t lim_ledger_used(struct lim_ledger *l, int dev);

/* Number of live processes holding a slot. */
int lim_ledger_procs(struct lim_ledger *l);

/* Claims this process's slot now (as its first allocation would), so that
 * a process that only launches kernels is known by pid too. 0 or -1. */
int lim_ledger_claim(struct lim_ledger *l);

/* Calls fn with the pid namespace inode and pid of every live process
 * holding a slot (slots without a namespace, written before minor 1, are
 * skipped). */
void lim_ledger_foreach_proc(struct lim_ledger *l, void (*fn)(void *ud, uint64_t pidns, int pid),
                             void *ud);

/* The inode a pid namespace link names ("pid:[4026531836]" at path, as
 * /proc/PID/ns/pid), 0 when it cannot be read. lim_pidns_self: the
 * calling process's. */
uint64_t lim_pidns(const char *path);
uint64_t lim_pidns_self(void);

/* Checks a mapped header against the file size: 0 or -1 with err. */
int lim_ledger_check(const struct lim_ledger_hdr *h, size_t file_size, char *err, size_t errlen);

#endif
