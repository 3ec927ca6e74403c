/*
 * ext/journal.h - the standalone extender's append-only allocation journal.
 *
 * Without an API server, allocations must survive a restart some other way:
 * every bind and release is one line "<crc32 hex> <json>\n" appended to
 * DIR/journal and on disk (fdatasync) before the extender answers. Replay
 * hands the records back in order. A torn last record (a crash mid-write: no
 * newline, or a checksum mismatch on the final line) is dropped and the file
 * cut back to the last good record, and reported through *torn so the caller
 * can warn; damage anywhere else is an error naming the line, since guessing
 * would lose or double-count GPUs. ext_journal_rewrite() replaces the file
 * atomically (write, fsync, rename) with a compacted record set.
 *
 * Group commit: a disk flush costs as much for one record as for many, so
 * concurrent appends share one. ext_journal_append() queues its record (the
 * file keeps the order in which appends were called) and waits; the first
 * waiter that finds no flush under way becomes the flusher: it takes every
 * queued record, writes them with one write and one fdatasync without the
 * journal's lock (so the next batch queues meanwhile), then wakes the batch.
 * An append returns 0 only once its record is on disk.
 *
 * A failed write or flush fails every append of its batch with the same
 * error, and the batch is cut back off the file (ftruncate to where it
 * began, then fdatasync), so no record whose append failed comes back at
 * replay; the journal then goes on. If the cut itself fails, the file may
 * hold part of the batch, so the journal refuses every later append
 * (-GS_EIO, "unusable") until the process restarts and replays what is on
 * disk: a record the caller was told failed may then come back, but no
 * record that was acknowledged is ever missing.
 *
 * Threads: append and stats are thread-safe. Open, replay, rewrite and close
 * are not, and must not overlap an append (the extender calls them at start
 * and exit only).
 * Ownership: records passed to the replay callback are borrowed.
 */
#ifndef GPUSCHED_EXT_JOURNAL_H
#define GPUSCHED_EXT_JOURNAL_H

#include <jansson.h>
#include <stdint.h>

#include "util/err.h"

#define EXT_JOURNAL_MAX_RECORD (1u << 20)

struct ext_journal;

typedef int (*ext_journal_fn)(void *ud, const json_t *rec, struct gs_err *e);

/* Opens (creating) DIR/journal; creates DIR if needed. */
int ext_journal_open(const char *dir, struct ext_journal **out, struct gs_err *e);
/* Replays every record; stops at the first callback error. *torn = 1 when a
 * torn last record was dropped. */
int ext_journal_replay(struct ext_journal *j, ext_journal_fn fn, void *ud, int *torn,
                       struct gs_err *e);
/* Like replay, for a reader that must not write (gpusched status): opens
 * DIR/journal read-only and leaves a torn last record in place. */
int ext_journal_read(const char *dir, ext_journal_fn fn, void *ud, int *torn, struct gs_err *e);
/* Appends rec and returns once it is on disk (0), or with the error that
 * failed its batch (-GS_EIO), -GS_ENOMEM / -GS_ETOOBIG before queueing. */
int ext_journal_append(struct ext_journal *j, const json_t *rec, struct gs_err *e);
int ext_journal_rewrite(struct ext_journal *j, json_t *const *recs, int n, struct gs_err *e);
void ext_journal_close(struct ext_journal *j);

struct ext_journal_stats {
    unsigned long long records; /* appended and on disk */
    unsigned long long flushes; /* fdatasync calls that succeeded (one per batch) */
    unsigned long long failed;  /* batches whose write or flush failed */
    int unusable;               /* a failed batch could not be cut back */
    int queued;                 /* records waiting for the next batch now */
};
void ext_journal_stats(struct ext_journal *j, struct ext_journal_stats *out);

/* For tests: replaces fdatasync(fd) for batches (undo = 0) and for the cut
 * after a failed batch (undo = 1), to fail or slow the disk on purpose.
 * Returns 0 or -1 with errno set. NULL restores fdatasync. */
typedef int (*ext_journal_sync_fn)(void *ud, int fd, int undo);
void ext_journal_set_sync(struct ext_journal *j, ext_journal_sync_fn fn, void *ud);

uint32_t ext_crc32(const void *data, size_t len);

#endif
