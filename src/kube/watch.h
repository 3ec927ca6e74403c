/*
 * kube/watch.h - list + watch of one collection, kept in sync (a reflector).
 *
 * A watch thread lists the collection, hands the full item list to
 * ops->replace(), then watches from the list's resourceVersion with
 * bookmarks and hands every ADDED/MODIFIED/DELETED object to ops->event().
 * When the stream ends it re-watches from the last resourceVersion seen
 * (events or bookmarks), so nothing is missed or repeated. On 410 Gone (the
 * version was compacted, as an HTTP status or an ERROR event) it lists
 * again: after any replace() the caller must rebuild its view from the list
 * alone. Errors back off exponentially (0.5 s doubling to 30 s by default).
 *
 * Threads: the callbacks run on the watch thread, one at a time.
 *
 * Ownership: objects passed to callbacks are borrowed for the call
 * (json_incref to keep them). kube_watch_stop() joins the thread; the
 * client must outlive the watch.
 */
#ifndef GPUSCHED_KUBE_WATCH_H
#define GPUSCHED_KUBE_WATCH_H

#include <jansson.h>
#include <stddef.h>

#include "kube/client.h"
#include "util/buf.h"

struct kube_watch_ops {
    void (*replace)(void *ud, const json_t *items, const char *rv);
    void (*event)(void *ud, const char *type, const json_t *obj);
    /* Optional: a list starts, its snapshot taken by the request that
     * follows (the first page; a whole list after an expired page again).
     * What the owner did before it, the list shows; what it did after, the
     * list or the watch that follows it does. */
    void (*list_begin)(void *ud);
    /* Optional, with absent_ok: the collection is not served (404: its
     * CRD is not installed, or no longer). */
    void (*absent)(void *ud);
};

struct kube_watch_opts {
    const char *path;            /* collection: "/api/v1/pods", "/api/v1/nodes" */
    const char *label_selector;  /* NULL = all */
    const char *field_selector;  /* NULL = all */
    int timeout_s;               /* server-side watch timeout; 0 = 300 */
    double backoff_min_s;        /* 0 = 0.5 */
    double backoff_max_s;        /* 0 = 30 */
    size_t max_event;            /* bytes per event line; 0 = 16 MiB */
    int absent_ok;               /* a list answered 404 (a CRD not installed yet) is
                                    logged at debug level and tried again */
    int page;                    /* objects per list request (limit/continue, as
                                    client-go's pager); 0 = 500 */
};

struct kube_watch_stats {
    unsigned long lists;     /* successful lists (the first one included) */
    unsigned long pages;     /* list requests answered, every page counted */
    unsigned long restarts;  /* watch streams re-opened after the first */
    unsigned long gone;      /* 410 Gone answers */
    unsigned long errors;    /* failed requests and bad events */
    unsigned long events;    /* objects handed to ops->event */
    int synced;              /* a list has been delivered */
};

struct kube_watch;

int kube_watch_start(struct kube_client *c, const struct kube_watch_opts *opts,
                     const struct kube_watch_ops *ops, void *ud, struct kube_watch **out,
                     struct gs_err *e);
void kube_watch_stop(struct kube_watch *w);
void kube_watch_get_stats(struct kube_watch *w, struct kube_watch_stats *out);

/* ---- the stream decoder, exposed for tests and the fuzzer --------------- */

/* Splits a byte stream into lines of at most `max` bytes. */
struct kube_lines {
    struct gs_buf b; /* the line so far */
    size_t max;      /* longest line accepted */
};
typedef int (*kube_line_fn)(void *ud, const char *line, size_t n);
/* Calls fn for each complete, non-empty line; stops early and returns fn's
 * value when it is nonzero; returns -GS_ETOOBIG for an over-long line. */
int kube_lines_feed(struct kube_lines *l, const char *p, size_t n, kube_line_fn fn, void *ud,
                    struct gs_err *e);
void kube_lines_clear(struct kube_lines *l);

enum kube_event_type { KUBE_EV_ADDED, KUBE_EV_MODIFIED, KUBE_EV_DELETED, KUBE_EV_BOOKMARK,
                       KUBE_EV_ERROR };
/* Parses one watch event line {"type": ..., "object": {...}}. *obj is a new
 * reference to the object. Errors name the field. */
int kube_watch_decode(const char *line, size_t n, enum kube_event_type *type, json_t **obj,
                      struct gs_err *e);

#endif
