/*
 * ext/standalone.h - the extender without a cluster: nodes from a NodeList
 * file, allocations in memory and in an fsync'd journal.
 *
 * ext_standalone_open() loads the nodes (every node must parse: a bad file
 * is refused, naming the node and field), replays DIR/journal (a torn last
 * record is dropped with a warning), compacts it to the live allocations,
 * and installs itself as the scheduler's commit backend, so each /bind and
 * release is on disk before it is answered. Each record is queued under the
 * scheduler's lock, at the state change it describes, so the journal's
 * order is the scheduler's (a release never lands before the bind it
 * undoes); concurrent binds share one disk flush (group commit,
 * ext/journal.h), and the lock is not held while they wait. A bind whose journal write fails is answered 500 and its
 * reservation undone (ext/sched.h), so memory never claims a bind the
 * journal lost.
 *
 * Ownership: returns an object freed by ext_standalone_close(); the
 * scheduler must outlive it.
 */
#ifndef GPUSCHED_EXT_STANDALONE_H
#define GPUSCHED_EXT_STANDALONE_H

#include "ext/sched.h"
#include "util/err.h"

#define EXT_NODES_FILE_MAX (256u << 20)

struct ext_standalone;

/* state_dir may be NULL (allocations then live in memory only). */
int ext_standalone_open(struct ext_sched *s, const char *nodes_file, const char *state_dir,
                        struct ext_standalone **out, struct gs_err *e);
void ext_standalone_close(struct ext_standalone *st);
/* The journal (NULL without a state dir), for tests that hold its flushes
 * (ext_journal_set_sync). */
struct ext_journal *ext_standalone_journal(struct ext_standalone *st);
/* Registers the journal's counters (records, flushes, failed flushes, an
 * unusable gauge) in m; nothing without a state dir. */
struct metrics;
int ext_standalone_metrics(struct ext_standalone *st, struct metrics *m, struct gs_err *e);
/* Copies the journal's counts into those metrics (call at scrape time). */
void ext_standalone_collect(struct ext_standalone *st);

#endif
