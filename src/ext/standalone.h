/*
 * ext/standalone.h - the extender without a cluster: nodes from a NodeList
 * file, allocations in memory and in an fsync'd journal.
 *
 * ext_standalone_open() loads the nodes (every node must parse: a bad file
 * is refused, naming the node and field), replays DIR/journal (a torn last
 * record is dropped with a warning), compacts it to the live allocations,
 * and installs itself as the scheduler's commit backend, so each /bind and
 * release is on disk before it is answered.
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

#endif
