/* ext/standalone.c - see standalone.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ext/journal.h"
#include "ext/standalone.h"
#include "kube/client.h"
#include "util/log.h"
#include "util/metrics.h"

struct ext_standalone {
    struct ext_sched *sched;
    struct ext_journal *j;   /* NULL without a state dir; thread-safe (group commit) */
    struct metric *m_records, *m_flushes, *m_failed, *m_unusable;
};

/* Called under the scheduler lock: queues the record (its place in the
 * journal is the place of the change); durable() waits for it. */
static int log_bind(void *ud, const char *ns, const char *name, const char *uid,
                    const struct core_alloc *a, const json_t *annotations, void **ticket,
                    struct gs_err *e)
{
    struct ext_standalone *st = ud;
    struct ext_journal_ticket *t = NULL;
    int rc;
    *ticket = NULL;
    if (!st->j)
        return 0;
    json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:O}", "op", "bind", "uid", uid,
                            "ns", ns, "name", name, "priority", a->priority, "cpu_milli",
                            (json_int_t)a->cpu_milli, "mem_bytes", (json_int_t)a->mem_bytes,
                            "annotations", annotations);
    if (!rec)
        return gs_errf(e, GS_ENOMEM, "cannot build the journal record");
    rc = ext_journal_queue(st->j, rec, &t, e);
    json_decref(rec);
    if (rc < 0)
        log_error("extender", "journal: bind of %s/%s not kept: %s", ns, name, e->msg);
    *ticket = t;
    return rc;
}

static int log_release(void *ud, const char *uid, void **ticket, struct gs_err *e)
{
    struct ext_standalone *st = ud;
    struct ext_journal_ticket *t = NULL;
    int rc;
    *ticket = NULL;
    if (!st->j)
        return 0;
    json_t *rec = json_pack("{s:s, s:s}", "op", "release", "uid", uid);
    if (!rec)
        return gs_errf(e, GS_ENOMEM, "cannot build the journal record");
    rc = ext_journal_queue(st->j, rec, &t, e);
    json_decref(rec);
    if (rc < 0)
        log_error("extender", "journal: release of %s not kept (it holds its GPUs again after "
                  "a restart): %s", uid, e->msg);
    *ticket = t;
    return rc;
}

/* Called without the scheduler lock: on disk (0) when it returns. */
static int durable(void *ud, void *ticket, struct gs_err *e)
{
    struct ext_standalone *st = ud;
    int rc = ext_journal_wait(st->j, ticket, e);
    if (rc < 0)
        log_error("extender", "journal: a bind or release was not kept: %s", e->msg);
    return rc;
}

struct replay {
    struct ext_sched *s;
    json_t *live; /* uid -> its bind record, as written (kept for compaction) */
};

static int replay_one(void *ud, const json_t *rec, struct gs_err *e)
{
    struct replay *r = ud;
    struct ext_sched *s = r->s;
    const json_t *op = json_object_get(rec, "op");
    const char *o = json_is_string(op) ? json_string_value(op) : "";
    int rc;

    if (strcmp(o, "bind") == 0) {
        const char *uid = json_string_value(json_object_get(rec, "uid"));
        if (uid && json_object_get(r->live, uid)) {
            /* bound anew after a release whose record was not kept (its
             * flush failed): the newer bind stands */
            log_warn("extender", "journal: pod uid %s bound again without a kept release; "
                     "the later bind stands", uid);
            ext_sched_release(s, uid, e);
            json_object_del(r->live, uid);
        }
        rc = ext_sched_restore(s, rec, e);
        if (rc == -GS_ENOENT) { /* its node left the nodes file */
            log_warn("extender", "journal: dropping an allocation: %s", e->msg);
            return 0;
        }
        if (rc == 0)
            json_object_set(r->live, json_string_value(json_object_get(rec, "uid")),
                            (json_t *)rec);
        return rc;
    }
    if (strcmp(o, "release") == 0) {
        const json_t *uid = json_object_get(rec, "uid");
        if (!json_is_string(uid))
            return gs_errf(e, GS_EINVAL, "release record: uid: missing");
        ext_sched_release(s, json_string_value(uid), e); /* absent is fine: node dropped */
        json_object_del(r->live, json_string_value(uid));
        return 0;
    }
    if (strcmp(o, "workload") == 0) { /* the ended pods' classes, from the last compaction */
        int rc2 = ext_sched_workload_seed(s, json_object_get(rec, "ended"), e);
        if (rc2 < 0)
            gs_err_prefix(e, "workload record: ended");
        return rc2;
    }
    return gs_errf(e, GS_EINVAL, "record op: '%.32s' is not bind, release or workload", o);
}

static int load_nodes(struct ext_sched *s, const char *path, struct gs_err *e)
{
    json_error_t je;
    json_t *doc;
    const json_t *items;
    size_t i;
    const json_t *node;
    struct stat sb;
    int rc = 0;

    if (stat(path, &sb) < 0)
        return gs_errf(e, GS_EIO, "%s: %s", path, strerror(errno));
    if ((size_t)sb.st_size > EXT_NODES_FILE_MAX)
        return gs_errf(e, GS_ETOOBIG, "%s: larger than %u bytes", path, EXT_NODES_FILE_MAX);
    if (!(doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je)))
        return gs_errf(e, GS_EINVAL, "%s: line %d: %s", path, je.line, je.text);
    items = json_object_get(doc, "items");
    if (!json_is_array(items)) {
        json_decref(doc);
        return gs_errf(e, GS_EINVAL, "%s: not a NodeList (no items array)", path);
    }
    json_array_foreach(items, i, node)
    {
        if ((rc = ext_sched_upsert_node(s, node, e)) < 0) {
            gs_err_prefix(e, "%s: items[%zu]", path, i);
            break;
        }
    }
    json_decref(doc);
    return rc;
}

int ext_standalone_open(struct ext_sched *s, const char *nodes_file, const char *state_dir,
                        struct ext_standalone **out, struct gs_err *e)
{
    struct ext_standalone *st = calloc(1, sizeof *st);
    int rc, torn = 0;

    if (!st)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    st->sched = s;
    if ((rc = load_nodes(s, nodes_file, e)) < 0)
        goto fail;
    if (state_dir) {
        struct replay r = {s, json_object()};
        if ((rc = ext_journal_open(state_dir, &st->j, e)) < 0 ||
            (rc = ext_journal_replay(st->j, replay_one, &r, &torn, e)) < 0) {
            json_decref(r.live);
            goto fail;
        }
        if (torn)
            log_warn("extender", "journal in %s: the last record was torn (a crash while "
                     "writing); it was dropped", state_dir);
        /* compaction: what the learned workload counts of pods that have
         * ended (they leave no bind record), then the live bind records,
         * exactly as first written */
        size_t n = json_object_size(r.live), i = 0;
        json_t **arr = calloc(n + 2, sizeof *arr), *v;
        json_t *ended = ext_sched_workload_ended(s, EXT_JOURNAL_MAX_RECORD / 2);
        json_t *wrec = json_integer_value(json_object_get(ended, "pods")) > 0
                           ? json_pack("{s:s, s:O}", "op", "workload", "ended", ended)
                           : NULL;
        const char *k;
        if (arr && wrec)
            arr[i++] = wrec;
        json_object_foreach(r.live, k, v) if (arr) arr[i++] = v;
        rc = arr ? ext_journal_rewrite(st->j, arr, (int)i, e)
                 : gs_errf(e, GS_ENOMEM, "out of memory");
        log_info("extender", "restored %zu allocations from %s (the learned workload: %lld "
                 "pods that have ended)", n, state_dir,
                 (long long)json_integer_value(json_object_get(ended, "pods")));
        json_decref(wrec);
        json_decref(ended);
        free(arr);
        json_decref(r.live);
        if (rc < 0)
            goto fail;
    }
    ext_sched_set_commit(s, &(struct ext_commit){.log_bind = log_bind,
                                                .log_release = log_release,
                                                .durable = durable, .ud = st});
    *out = st;
    return 0;
fail:
    ext_journal_close(st->j);
    free(st);
    return rc;
}

void ext_standalone_close(struct ext_standalone *st)
{
    if (!st)
        return;
    ext_sched_set_commit(st->sched, &(struct ext_commit){0});
    ext_journal_close(st->j);
    free(st);
}

struct ext_journal *ext_standalone_journal(struct ext_standalone *st) { return st->j; }

int ext_standalone_metrics(struct ext_standalone *st, struct metrics *m, struct gs_err *e)
{
    if (!st->j)
        return 0;
    if (!(st->m_records = metrics_add(m, METRIC_COUNTER, "gpusched_extender_journal_records_total",
                                      "journal records (binds and releases) on disk", NULL, NULL,
                                      0, e)) ||
        !(st->m_flushes = metrics_add(m, METRIC_COUNTER, "gpusched_extender_journal_flushes_total",
                                      "journal disk flushes (fdatasync), one per group of "
                                      "concurrent records", NULL, NULL, 0, e)) ||
        !(st->m_failed = metrics_add(m, METRIC_COUNTER,
                                     "gpusched_extender_journal_failed_flushes_total",
                                     "journal groups whose write or flush failed (their binds "
                                     "and releases failed)", NULL, NULL, 0, e)) ||
        !(st->m_unusable = metrics_add(m, METRIC_GAUGE, "gpusched_extender_journal_unusable",
                                       "1 when a failed flush could not be undone: binds fail "
                                       "until a restart", NULL, NULL, 0, e)))
        return -e->code;
    return 0;
}

void ext_standalone_collect(struct ext_standalone *st)
{
    struct ext_journal_stats js;
    if (!st || !st->j || !st->m_records)
        return;
    ext_journal_stats(st->j, &js);
    metric_set(st->m_records, NULL, (double)js.records);
    metric_set(st->m_flushes, NULL, (double)js.flushes);
    metric_set(st->m_failed, NULL, (double)js.failed);
    metric_set(st->m_unusable, NULL, js.unusable);
}
