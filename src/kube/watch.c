/* kube/watch.c - see watch.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/client_internal.h"
#include "kube/watch.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/worker.h"

/* A stream that lived this long, or delivered an event, served: its end is
 * no reason to back off. */
#define WATCH_HEALTHY_S 1.0

struct kube_watch {
    struct kube_client *c;
    struct kube_watch_opts opts;
    char *path, *query;        /* collection path; "labelSelector=..&" or "" */
    struct kube_watch_ops ops;
    void *ud;
    struct gs_worker wk;       /* its mu also guards st */
    struct kube_watch_stats st;
    char rv[64];
    /* per-stream state */
    struct kube_lines lines;
    int gone;                  /* an ERROR 410 event arrived */
    int bad;                   /* a malformed event arrived */
    CURL *h;                   /* the stream's handle */
    long status;               /* its HTTP status, once known (0: not yet) */
    struct gs_buf refusal;     /* the body of a status other than 200 (a Status) */
};

/* How much of a refusal's body (a Status) is kept to say why. */
#define REFUSAL_MAX 4096

/* ---- decoder ------------------------------------------------------------ */

int kube_lines_feed(struct kube_lines *l, const char *p, size_t n, kube_line_fn fn, void *ud,
                    struct gs_err *e)
{
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        if (l->b.len + take > l->max) {
            l->b.len = 0;
            return gs_errf(e, GS_ETOOBIG, "watch event longer than %zu bytes", l->max);
        }
        gs_buf_put(&l->b, p, take);
        if (l->b.oom) {
            gs_buf_free(&l->b);
            return gs_errf(e, GS_ENOMEM, "out of memory");
        }
        p += take;
        n -= take;
        if (nl) {
            size_t len = l->b.len;
            p++;
            n--;
            l->b.len = 0;
            while (len && (l->b.buf[len - 1] == '\r' || l->b.buf[len - 1] == ' '))
                len--;
            if (len) {
                int rc;
                l->b.buf[len] = '\0';
                if ((rc = fn(ud, l->b.buf, len)) != 0)
                    return rc;
            }
        }
    }
    return 0;
}

void kube_lines_clear(struct kube_lines *l) { gs_buf_free(&l->b); }

int kube_watch_decode(const char *line, size_t n, enum kube_event_type *type, json_t **obj,
                      struct gs_err *e)
{
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
    json_error_t je;
    json_t *ev = json_loadb(line, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je), *t, *o;
    int i;

    *obj = NULL;
    if (!ev)
        return gs_errf(e, GS_EPROTO, "watch event: not JSON: %s", je.text);
    t = json_object_get(ev, "type");
    o = json_object_get(ev, "object");
    if (!json_is_string(t)) {
        json_decref(ev);
        return gs_errf(e, GS_EPROTO, "watch event: type: missing or not a string");
    }
    for (i = 0; i < 5 && strcmp(json_string_value(t), names[i]) != 0; i++)
        ;
    if (i == 5) {
        int rc = gs_errf(e, GS_EPROTO, "watch event: type: unknown '%.32s'", json_string_value(t));
        json_decref(ev);
        return rc;
    }
    if (!json_is_object(o)) {
        json_decref(ev);
        return gs_errf(e, GS_EPROTO, "watch event: object: missing or not an object");
    }
    *type = (enum kube_event_type)i;
    *obj = json_incref(o);
    json_decref(ev);
    return 0;
}

/* ---- the watch thread --------------------------------------------------- */

static void bump(struct kube_watch *w, unsigned long *field)
{
    pthread_mutex_lock(&w->wk.mu);
    (*field)++;
    pthread_mutex_unlock(&w->wk.mu);
}

static void set_rv(struct kube_watch *w, const json_t *obj)
{
    const char *rv = kube_meta_str(obj, "resourceVersion");
    if (rv && strlen(rv) < sizeof w->rv)
        strcpy(w->rv, rv);
}

static int on_line(void *ud, const char *line, size_t n)
{
    struct kube_watch *w = ud;
    struct gs_err e = GS_ERR_INIT;
    enum kube_event_type type;
    json_t *obj;
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED"};

    if (kube_watch_decode(line, n, &type, &obj, &e) < 0) {
        log_warn("kube", "%s: %s; re-watching", w->path, e.msg);
        w->bad = 1;
        return 1;
    }
    switch (type) {
    case KUBE_EV_ERROR: {
        json_t *code = json_object_get(obj, "code");
        const json_t *msg = json_object_get(obj, "message");
        if (json_is_integer(code) && json_integer_value(code) == 410) {
            w->gone = 1;
        } else {
            log_warn("kube", "%s: watch error event: %s", w->path,
                     json_is_string(msg) ? json_string_value(msg) : "(no message)");
            w->bad = 1;
        }
        json_decref(obj);
        return 1;
    }
    case KUBE_EV_BOOKMARK:
        set_rv(w, obj);
        break;
    default:
        set_rv(w, obj);
        w->ops.event(w->ud, names[type], obj);
        bump(w, &w->st.events);
        break;
    }
    json_decref(obj);
    return 0;
}

static size_t on_stream(char *p, size_t sz, size_t n, void *ud)
{
    struct kube_watch *w = ud;
    struct gs_err e = GS_ERR_INIT;
    if (!w->status)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->status);
    if (w->status != 200) { /* a refusal (401, 403, 500...): its Status says why */
        if (w->refusal.len + sz * n <= REFUSAL_MAX)
            gs_buf_put(&w->refusal, p, sz * n);
        return sz * n;
    }
    int rc = kube_lines_feed(&w->lines, p, sz * n, on_line, w, &e);
    if (rc < 0) {
        log_warn("kube", "%s: %s; re-watching", w->path, e.msg);
        w->bad = 1;
    }
    return rc ? 0 : sz * n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    struct kube_watch *w = ud;
    (void)a, (void)b, (void)c, (void)d;
    return gs_worker_stopping(&w->wk) ? 1 : 0;
}

/* Sleeps up to `s` seconds; returns early (nonzero) when stopping. */
static int nap(struct kube_watch *w, double s) { return gs_worker_sleep(&w->wk, s, NULL); }

/* Lists the collection page by page (limit/continue): a large cluster's
 * pods in one answer would outgrow the request timeout and the body bound.
 * Every page comes from the first one's snapshot. A continue token that
 * expired (410: the pages took longer than etcd keeps a snapshot) is
 * followed by one whole list, as client-go's pager does: starting the pages
 * over could expire the same way for ever. */
static int do_list(struct kube_watch *w)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *all = json_array(), *list = NULL;
    char *path = NULL, *cont = NULL, rv[sizeof w->rv] = "";
    int pages = 0, rc = -1, whole = 0;

    if (!all)
        return -1;
    if (w->ops.list_begin)
        w->ops.list_begin(w->ud);
    for (;;) {
        char esc[2048] = "";
        free(path);
        path = NULL;
        if (cont && kube_escape(cont, esc, sizeof esc, &e) < 0) {
            log_warn("kube", "list %s: continue token: %s", w->path, e.msg);
            goto out;
        }
        if (asprintf(&path, "%s?%slimit=%d%s%s", w->path, w->query,
                     whole ? 0 : w->opts.page > 0 ? w->opts.page : 500, cont ? "&continue=" : "",
                     esc) < 0) {
            path = NULL;
            goto out;
        }
        if (kube_get(w->c, path, &list, &e) < 0) {
            if (cont && !whole && e.code == GS_ECONFLICT) { /* 410: expired between pages */
                log_info("kube", "list %s: %s; listing it whole", w->path, e.msg);
                json_decref(list); /* the Status of the 410 */
                list = NULL;
                json_array_clear(all);
                free(cont);
                cont = NULL;
                pages = 0;
                whole = 1;
                e = (struct gs_err)GS_ERR_INIT;
                if (w->ops.list_begin)
                    w->ops.list_begin(w->ud);
                continue;
            }
            if (w->opts.absent_ok && e.code == GS_ENOENT) {
                log_debug("kube", "list %s: %s", w->path, e.msg);
                if (w->ops.absent)
                    w->ops.absent(w->ud);
            } else
                log_warn("kube", "list %s%s: %s", w->path, cont ? " (a later page)" : "", e.msg);
            goto out;
        }
        const json_t *items = json_object_get(list, "items");
        if (items && !json_is_array(items) && !json_is_null(items)) {
            log_warn("kube", "list %s: items is not an array", w->path);
            goto out;
        }
        if (json_is_array(items) && json_array_extend(all, (json_t *)items) < 0)
            goto out;
        if (!pages++) {
            const char *v = kube_meta_str(list, "resourceVersion");
            snprintf(rv, sizeof rv, "%s", v ? v : "");
        }
        pthread_mutex_lock(&w->wk.mu);
        w->st.pages++;
        pthread_mutex_unlock(&w->wk.mu);
        const char *next = kube_meta_str(list, "continue");
        int more = next && *next;
        free(cont);
        cont = more ? strdup(next) : NULL;
        json_decref(list);
        list = NULL;
        if (more && !cont)
            goto out;
        if (!cont || gs_worker_stopping(&w->wk))
            break;
    }
    if (cont) /* stopping */
        goto out;
    w->ops.replace(w->ud, all, rv);
    snprintf(w->rv, sizeof w->rv, "%s", rv);
    pthread_mutex_lock(&w->wk.mu);
    w->st.lists++;
    w->st.synced = 1;
    pthread_mutex_unlock(&w->wk.mu);
    rc = 0;
out:
    json_decref(list);
    json_decref(all);
    free(path);
    free(cont);
    return rc;
}

/* One watch stream. Returns 0 when it ended normally, 1 for 410 Gone (list
 * again), -1 on an error (back off, unless it served a while), -2 when the
 * API server refused it (401, 403, 5xx: back off). */
static int do_watch(struct kube_watch *w)
{
    CURL *h = kube_client_handle(w->c);
    struct curl_slist *hdrs;
    char *url = NULL;
    long code = 0;
    CURLcode cr;

    if (!h)
        return -1;
    if (asprintf(&url, "%s%s?%swatch=1&allowWatchBookmarks=true&timeoutSeconds=%d&"
                       "resourceVersion=%s",
                 kube_client_server(w->c), w->path, w->query, w->opts.timeout_s, w->rv) < 0) {
        kube_client_release(w->c, h);
        return -1;
    }
    w->gone = w->bad = 0;
    w->status = 0;
    w->refusal.len = 0;
    w->h = h;
    w->lines.b.len = 0;
    unsigned long gen = kube_client_token_gen(w->c);
    hdrs = kube_client_headers(w->c, NULL);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, w);
    /* a dead connection sends nothing: give up after the server's timeout
     * plus a margin */
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)w->opts.timeout_s + 30L);
    cr = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hdrs);
    kube_client_release(w->c, h);
    free(url);
    if (gs_worker_stopping(&w->wk))
        return 0;
    if (code == 410 || w->gone) {
        bump(w, &w->st.gone);
        log_info("kube", "watch %s: resourceVersion %s is gone; listing again", w->path, w->rv);
        return 1;
    }
    if (w->bad)
        return -1;
    if (cr == CURLE_OK && code != 200) {
        if (code == 401) /* a token rotated: read it again for the next try */
            kube_client_token_refused(w->c, gen);
        /* refused: say why, and back off however long it took */
        json_t *st = json_loadb(w->refusal.buf ? w->refusal.buf : "", w->refusal.len, 0, NULL);
        const char *msg = json_string_value(json_object_get(st, "message"));
        log_warn("kube", "watch %s: HTTP %ld%s%s", w->path, code, msg ? ": " : "",
                 msg ? msg : "");
        json_decref(st);
        return -2;
    }
    if (cr != CURLE_OK || code != 200) {
        log_warn("kube", "watch %s: %s (HTTP %ld)", w->path,
                 cr != CURLE_OK ? curl_easy_strerror(cr) : "unexpected status", code);
        return -1;
    }
    return 0;
}

static void *watch_main(void *arg)
{
    struct kube_watch *w = arg;
    double backoff = w->opts.backoff_min_s;
    int need_list = 1, first = 1;

    while (!gs_worker_stopping(&w->wk)) {
        if (need_list) {
            if (do_list(w) < 0) {
                bump(w, &w->st.errors);
                if (nap(w, backoff))
                    break;
                backoff = backoff * 2 > w->opts.backoff_max_s ? w->opts.backoff_max_s : backoff * 2;
                continue;
            }
            need_list = 0;
            backoff = w->opts.backoff_min_s; /* the API server answers again */
        }
        if (!first)
            bump(w, &w->st.restarts);
        first = 0;
        pthread_mutex_lock(&w->wk.mu);
        unsigned long events = w->st.events;
        pthread_mutex_unlock(&w->wk.mu);
        double t0 = gs_mono_s();
        int rc = do_watch(w);
        pthread_mutex_lock(&w->wk.mu);
        int fed = w->st.events != events;
        pthread_mutex_unlock(&w->wk.mu);
        if (rc == -1 && (fed || gs_mono_s() - t0 >= WATCH_HEALTHY_S)) {
            /* a stream cut after it served (a proxy's idle timeout, an API
             * server restarting): watch again at once, as client-go does;
             * only streams that fail at once back off */
            bump(w, &w->st.errors);
            backoff = w->opts.backoff_min_s;
        } else if (rc == 1) {
            need_list = 1;
        } else if (rc < 0) {
            bump(w, &w->st.errors);
            if (nap(w, backoff))
                break;
            backoff = backoff * 2 > w->opts.backoff_max_s ? w->opts.backoff_max_s : backoff * 2;
        } else {
            backoff = w->opts.backoff_min_s;
        }
    }
    return NULL;
}

static int append_sel(char *q, size_t cap, const char *key, const char *val, struct gs_err *e)
{
    char esc[1024];
    size_t len = strlen(q);
    if (!val || !*val)
        return 0;
    if (kube_escape(val, esc, sizeof esc, e) < 0)
        return -GS_ETOOBIG;
    if ((size_t)snprintf(q + len, cap - len, "%s=%s&", key, esc) >= cap - len)
        return gs_errf(e, GS_ETOOBIG, "%s too long", key);
    return 0;
}

int kube_watch_start(struct kube_client *c, const struct kube_watch_opts *opts,
                     const struct kube_watch_ops *ops, void *ud, struct kube_watch **out,
                     struct gs_err *e)
{
    struct kube_watch *w;
    char q[2200] = "";

    if (!opts->path || opts->path[0] != '/' || strchr(opts->path, '?'))
        return gs_errf(e, GS_EINVAL, "watch path must start with '/' and have no query");
    if (append_sel(q, sizeof q, "labelSelector", opts->label_selector, e) < 0 ||
        append_sel(q, sizeof q, "fieldSelector", opts->field_selector, e) < 0)
        return -GS_EINVAL;
    if (!(w = calloc(1, sizeof *w)))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    w->c = c;
    w->opts = *opts;
    w->ops = *ops;
    w->ud = ud;
    if (!w->opts.timeout_s)
        w->opts.timeout_s = 300;
    if (w->opts.backoff_min_s <= 0)
        w->opts.backoff_min_s = 0.5;
    if (w->opts.backoff_max_s <= 0)
        w->opts.backoff_max_s = 30;
    w->lines.max = w->opts.max_event ? w->opts.max_event : (16u << 20);
    w->path = strdup(opts->path);
    w->query = strdup(q);
    w->opts.path = w->path;
    if (gs_worker_start(&w->wk, watch_main, w) < 0) {
        free(w->path);
        free(w->query);
        free(w);
        return gs_errf(e, GS_ENOMEM, "cannot start the watch thread");
    }
    *out = w;
    return 0;
}

void kube_watch_stop(struct kube_watch *w)
{
    if (!w)
        return;
    gs_worker_stop(&w->wk);
    gs_worker_destroy(&w->wk);
    kube_lines_clear(&w->lines);
    gs_buf_free(&w->refusal);
    free(w->path);
    free(w->query);
    free(w);
}

void kube_watch_get_stats(struct kube_watch *w, struct kube_watch_stats *out)
{
    pthread_mutex_lock(&w->wk.mu);
    *out = w->st;
    pthread_mutex_unlock(&w->wk.mu);
}
