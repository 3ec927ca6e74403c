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
 * concurrent records share one. A record is written in two steps:
 * ext_journal_queue() fixes its place in the file at once (the file keeps
 * the order in which records were queued; a caller queues under its own
 * lock, right where it changes the state the record describes, so the
 * journal's order is the order of those changes), and ext_journal_wait()
 * returns once it is on disk. The first waiter that finds no flush under
 * way becomes the flusher: it takes every queued record, writes them in
 * order with one write and one fdatasync without the journal's lock (so
 * the next batch queues meanwhile), then wakes the batch.
 * ext_journal_append() is queue + wait.
 *
 * A failed write or flush fails every record of its batch with the same
 * error, and every record queued after the batch while it was written (they
 * are never written: the caller's state changed on top of the failed ones), and the batch is cut back off the file (ftruncate to where it
 * began, then fdatasync), so no record whose append failed comes back at
 * replay; the journal then goes on. If the cut itself fails, the file may
 * hold part of the batch, so the journal refuses every later append
 * (-GS_EIO, "unusable") until the process restarts and replays what is on
 * disk: a record the caller was told failed may then come back, but no
 * record that was acknowledged is ever missing.
 *
 * Threads: queue, wait, append and stats are thread-safe. Open, replay, rewrite and close
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
/* Queues rec (never blocks on the disk) and hands back its ticket, which
 * the caller must pass to ext_journal_wait() exactly once; -GS_ENOMEM,
 * -GS_ETOOBIG or -GS_EIO (unusable) before queueing, with *t = NULL. */
struct ext_journal_ticket;
int ext_journal_queue(struct ext_journal *j, const json_t *rec, struct ext_journal_ticket **t,
                      struct gs_err *e);
/* Waits until t's record is on disk (0) or its batch failed (-GS_EIO, the
 * reason in *e); frees t. */
int ext_journal_wait(struct ext_journal *j, struct ext_journal_ticket *t, struct gs_err *e);
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
