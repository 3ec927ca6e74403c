/*
 * ext/journal.h - the standalone extender's append-only allocation journal.
 *
 * Without an API server, allocations must survive a restart some other way:
 * every bind and release is one line "<crc32 hex> <json>\n" appended to
 * DIR/journal and fsync'd before the extender answers. Replay hands the
 * records back in order. A torn last record (a crash mid-write: no newline,
 * or a checksum mismatch on the final line) is dropped and the file cut
 * back to the last good record, and reported through *torn so the caller
 * can warn; damage anywhere else is an error naming the line, since
 * guessing would lose or double-count GPUs. ext_journal_rewrite() replaces
 * the file atomically (write, fsync, rename) with a compacted record set.
 *
 * Threads: not thread-safe; the extender calls it under its state lock.
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
int ext_journal_append(struct ext_journal *j, const json_t *rec, struct gs_err *e);
int ext_journal_rewrite(struct ext_journal *j, json_t *const *recs, int n, struct gs_err *e);
void ext_journal_close(struct ext_journal *j);

uint32_t ext_crc32(const void *data, size_t len);

#endif
