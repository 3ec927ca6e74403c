/* ext/server.c - see server.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ext/bindq.h"
#include "ext/memo.h"
#include "ext/nodelock.h"
#include "ext/proto.h"
#include "ext/server.h"
#include "http/http_server.h"
#include "util/clock.h"
#include "version.h"

struct ext_server {
    struct ext_server_opts opts;
    struct http_server *http;
    struct metric *m_requests, *m_latency, *m_wait, *m_wait_timeouts, *m_tls;
    struct ext_bindq *bq; /* or NULL: binds run on the HTTP worker */
    struct ext_bindq *fq; /* a non-leader's /binds handed to the leader, or NULL */
    struct ext_bindq *ffq; /* and its /filters (the leader may hold one, filter_wait) */
    struct ext_bindq *fpq; /* and its /prioritizes */
    struct ext_bindq *fxq; /* and its /preempts */
    struct ext_bindq *wq; /* /filters waiting for the /bind before them */
    pthread_mutex_t clk_mu; /* the clocks of cluster-mode binds on s->bq */
    struct bind_clock *clk;
    size_t n_clk, cap_clk;
};

/* A cluster-mode /bind's first try and deadline for its node (bind_wait_s),
 * kept while its bind runs on s->bq (ext/nodelock.h keeps them while it
 * waits for the node); waited: it has waited for the node. */
struct bind_clock {
    void *tok;
    double deadline, started;
    int waited;
};

/* Threads that may each hold a /filter waiting for a /bind (filter_wait). */
#define FILTER_WAIT_THREADS 4

/* Threads that may each wait on a forwarded /bind at once: the leader can
 * hold one up to bind_wait (a node still held for kubelet). */
#define FORWARD_THREADS 8

/* And on a forwarded /prioritize or /preempt: kube-scheduler asks them from
 * its scheduling cycle, one pod at a time (more wait their turn). */
#define FORWARD_CYCLE_THREADS 2

typedef int (*verb_fn)(struct ext_sched *s, const char *body, size_t len, struct ext_reply *r);

static const struct {
    const char *name;
    verb_fn fn;
} verbs[] = {
    {"filter", ext_sched_filter},
    {"prioritize", ext_sched_prioritize},
    {"bind", ext_sched_bind},
    {"preempt", ext_sched_preempt},
};

static void text_free(void *t) { ext_text_put(t); }

void ext_server_wake(void *token) { http_wake(token); }

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A /bind answered EXT_BIND_BUSY (its node held by another GPU pod):
 * registered to wait for the node, 1 (park it), the node released
 * meanwhile, 0 (bind again), or the wait is over, -1 with *reply and
 * *status saying so (kube-scheduler retries the pod). */
static int bind_busy(struct ext_server *s, const struct http_request *req,
                     struct ext_reply *reply, int *status, double deadline, double started,
                     double now)
{
    struct ext_bind b;
    struct gs_err e = GS_ERR_INIT;
    size_t len;
    int w = -1, parsed = ext_bind_parse(req->body, req->body_len, &b, &e) == 0;
    if (parsed && now < deadline)
        w = ext_nodelock_wait(s->opts.lock, b.node, b.pod_uid, http_req_token(req), deadline,
                              started, now);
    if (parsed && w < 0) /* refused: nudged when a node is released */
        ext_sched_bind_gave_up(s->opts.sched, b.pod_uid);
    if (parsed)
        ext_bind_clear(&b);
    if (w >= 0) {
        free(ext_reply_take(reply, &len));
        return w;
    }
    /* waited long enough (or stopping) */
    metric_inc(s->m_wait_timeouts, NULL);
    const char *msg = json_string_value(json_object_get(reply->json, "Error"));
    json_t *err = ext_error("%s; waited %.1f s, retry", msg ? msg : "node busy", now - started);
    free(ext_reply_take(reply, &len));
    reply->json = err;
    *status = 503;
    return -1;
}

static int run_bind(void *sched, const char *body, size_t len, struct ext_reply *r)
{
    return ext_sched_bind(sched, body, len, r);
}

/* The off-worker queues, NULL where not made. */
enum { N_QUEUES = 6 };
static struct ext_bindq **queue(struct ext_server *s, int i)
{
    struct ext_bindq **q[N_QUEUES] = {&s->bq, &s->fq, &s->ffq, &s->fpq, &s->fxq, &s->wq};
    return q[i];
}

static void server_free(struct ext_server *s)
{
    for (int i = 0; i < N_QUEUES; i++)
        ext_bindq_free(*queue(s, i)); /* stops it first */
    pthread_mutex_destroy(&s->clk_mu);
    free(s->clk);
    free(s);
}

/* Hands the request to a thread of q and parks it (handed back with the
 * reply, ext_bindq_take). 1 parked; 0 when q takes no more (stopping). */
static int park_on(struct ext_bindq *q, const struct http_request *req)
{
    if (ext_bindq_submit(q, http_req_token(req), req->body, req->body_len) != 0)
        return 0;
    http_req_park(req);
    return 1;
}

static int clock_put(struct ext_server *s, void *tok, double deadline, double started,
                     int waited)
{
    int rc = 0;
    pthread_mutex_lock(&s->clk_mu);
    if (s->n_clk == s->cap_clk) {
        size_t cap = s->cap_clk ? s->cap_clk * 2 : 16;
        struct bind_clock *c = realloc(s->clk, cap * sizeof *c);
        if (c) {
            s->clk = c;
            s->cap_clk = cap;
        }
    }
    size_t i = 0;
    while (i < s->n_clk && s->clk[i].tok != tok) /* one per token */
        i++;
    if (i < s->n_clk || s->n_clk < s->cap_clk)
        s->clk[i == s->n_clk ? s->n_clk++ : i] = (struct bind_clock){tok, deadline, started, waited};
    else
        rc = -1;
    pthread_mutex_unlock(&s->clk_mu);
    return rc;
}

/* The clock kept for tok, removed; 0 when none. */
static int clock_take(struct ext_server *s, void *tok, struct bind_clock *out)
{
    int found = 0;
    pthread_mutex_lock(&s->clk_mu);
    for (size_t i = 0; i < s->n_clk && !found; i++)
        if (s->clk[i].tok == tok) {
            *out = s->clk[i];
            s->clk[i] = s->clk[--s->n_clk];
            found = 1;
        }
    pthread_mutex_unlock(&s->clk_mu);
    return found;
}

/* Is a /bind of tok on a bind thread (or answered there, not yet taken)? */
static int clock_has(struct ext_server *s, void *tok)
{
    int found = 0;
    pthread_mutex_lock(&s->clk_mu);
    for (size_t i = 0; i < s->n_clk && !found; i++)
        found = s->clk[i].tok == tok;
    pthread_mutex_unlock(&s->clk_mu);
    return found;
}

/* /bind off the HTTP worker (ext/bindq.h), handed over and parked on the
 * first run, answered with the bind thread's reply when run again. In
 * cluster mode a /bind talks to the API server (the annotations, the
 * Binding: seconds when it is slow), and on the worker it would hold the
 * worker's other connections; standalone, binds from any connection then
 * share the journal's flush. A bind to a held node (cluster mode, the node
 * lock) waits for the node, parked too, and goes back to a bind thread when
 * woken. Returns 1 when parked. */
static int bind_parked(struct ext_server *s, const struct http_request *req,
                       struct ext_reply *reply, int *status, double *before_s)
{
    void *tok = http_req_token(req);
    double now = wall_now();
    struct bind_clock c;
    if (ext_bindq_take(s->bq, tok, status, reply, before_s)) {
        if (!clock_take(s, tok, &c))
            c = (struct bind_clock){tok, now, now, 0};
        if (*status == EXT_BIND_BUSY && s->opts.lock) {
            int w = bind_busy(s, req, reply, status, c.deadline, c.started, now);
            if (w == 1) {
                http_req_park(req);
                return 1;
            }
            if (w == 0) /* released meanwhile: bind again */
                goto submit;
        }
        if (c.waited)
            metric_observe(s->m_wait, NULL, now - c.started);
        return 0;
    }
    c = (struct bind_clock){tok, now + s->opts.bind_wait_s, now, 0};
    if (s->opts.lock && ext_nodelock_reclaim(s->opts.lock, tok, &c.deadline, &c.started))
        c.waited = 1; /* woken: the node was released, or its deadline passed */
submit:
    if (clock_put(s, tok, c.deadline, c.started, c.waited) == 0) {
        if (park_on(s->bq, req))
            return 1;
        clock_take(s, tok, &c);
    }
    /* the bind threads take no more (the extender is stopping) or there is
     * no memory for the clock: refused, and kube-scheduler tries the pod
     * again (with the next leader). Bound here, its API calls would hold
     * this worker's connections, and the stop, for up to a timeout each */
    *reply = (struct ext_reply){.json = ext_error("the extender is stopping or out of memory; "
                                                  "retry")};
    *status = 503;
    return 0;
}

/* A request that parked has ended (http_server_opts.gone). What it left
 * under its token goes with it: a reply it never took (its client went away
 * while parked), its clock, a node-lock wait it was woken from. The token
 * may come back for a new request, which must find none of them. */
static void request_gone(void *ud, void *tok)
{
    struct ext_server *s = ud;
    struct bind_clock c;
    for (int i = 0; i < N_QUEUES; i++)
        ext_bindq_forget(*queue(s, i), tok);
    clock_take(s, tok, &c);
    if (s->opts.lock)
        ext_nodelock_reclaim(s->opts.lock, tok, &c.deadline, &c.started);
}

/* The leader's answer to verb in *r and 1 with its status in *status, or 0
 * (ext_forward: answer here). */
static int leader_answer(struct ext_server *s, const char *verb, const char *body, size_t len,
                         struct ext_reply *r, int *status)
{
    memset(r, 0, sizeof *r);
    return ext_forward(s->opts.forward, verb, body, len, status, &r->text, &r->len) == 1;
}

/* A forwarded /bind, run by a thread of s->fq: the leader's answer; when
 * this replica has taken the lease meanwhile, refused (kube-scheduler retries,
 * and a replica that starts leading nudges the pods left waiting). */
static int run_forward_bind(void *ud, const char *body, size_t len, struct ext_reply *r)
{
    int status;
    if (leader_answer(ud, "bind", body, len, r, &status))
        return status;
    r->json = ext_error("this replica became the leader while the bind was forwarded; retry");
    return 503;
}

/* The leader's answer to a forwarded verb, or this replica's own when the
 * leader did not answer (or it leads now). */
static int forward_or_here(struct ext_server *s, const char *verb, verb_fn here,
                           const char *body, size_t len, struct ext_reply *r)
{
    int status;
    if (leader_answer(s, verb, body, len, r, &status))
        return status;
    return here(s->opts.sched, body, len, r);
}

/* /filter as kube-scheduler calls it, waiting for the /bind before it
 * (ext_sched_filter_after_bind). */
static int filter_waiting(struct ext_sched *s, const char *body, size_t len, struct ext_reply *r)
{
    return ext_sched_filter_after_bind(s, body, len, 1, r);
}

/* A forwarded /filter, run by a thread of s->ffq. */
static int run_forward_filter(void *ud, const char *body, size_t len, struct ext_reply *r)
{
    return forward_or_here(ud, "filter", filter_waiting, body, len, r);
}

/* A forwarded /prioritize, run by a thread of s->fpq. */
static int run_forward_prioritize(void *ud, const char *body, size_t len, struct ext_reply *r)
{
    return forward_or_here(ud, "prioritize", ext_sched_prioritize, body, len, r);
}

/* A forwarded /preempt, run by a thread of s->fxq. */
static int run_forward_preempt(void *ud, const char *body, size_t len, struct ext_reply *r)
{
    return forward_or_here(ud, "preempt", ext_sched_preempt, body, len, r);
}

/* A non-leader's requests off the HTTP worker (q: s->fq, s->ffq, s->fpq or
 * s->fxq): the leader may take seconds over a /bind (a node held for
 * kubelet) and up to filter_wait over a /filter, a busy or dying leader
 * long over any verb, and a worker answers its connections one request at
 * a time: waiting there would hold the next requests on the worker's
 * connections, among them the very /bind a /filter waits for. 1 parked; 0
 * answered (*reply, *status); -1 not forwarded (this replica leads: answer
 * here). */
static int forward_queued(struct ext_server *s, struct ext_bindq *q,
                          const struct http_request *req, struct ext_reply *reply, int *status,
                          double *before_s)
{
    void *tok = http_req_token(req);
    if (ext_bindq_take(q, tok, status, reply, before_s))
        return 0;
    return ext_forward_elsewhere(s->opts.forward) && park_on(q, req) ? 1 : -1;
}

static int run_filter_wait(void *sched, const char *body, size_t len, struct ext_reply *r)
{
    return filter_waiting(sched, body, len, r);
}

/* /filter, waiting off the HTTP worker for the /bind before it when it has
 * to (ext_sched_filter_after_bind): the bind may be queued behind it on the
 * same worker. Returns 1 when parked. */
static int filter_or_wait(struct ext_server *s, const struct http_request *req,
                          struct ext_reply *reply, int *status, double *before_s)
{
    void *tok = http_req_token(req);
    if (ext_bindq_take(s->wq, tok, status, reply, before_s))
        return 0;
    *status = ext_sched_filter_after_bind(s->opts.sched, req->body, req->body_len, 0, reply);
    if (*status != EXT_FILTER_WAIT)
        return 0;
    if (park_on(s->wq, req))
        return 1;
    *status = ext_sched_filter(s->opts.sched, req->body, req->body_len, reply); /* stopping */
    return 0;
}

static void reply_json(struct http_response *resp, int status, json_t *obj)
{
    http_resp_json(resp, status, obj);
}

/* Splits "/prefix/NS/NAME" into ns and name; 0 on success. */
static int ns_name(const char *path, const char *prefix, char *ns, char *name, size_t cap)
{
    size_t pl = strlen(prefix);
    const char *rest, *slash;
    if (strncmp(path, prefix, pl) != 0)
        return -1;
    rest = path + pl;
    slash = strchr(rest, '/');
    if (!slash || slash == rest || !slash[1] || strchr(slash + 1, '/') ||
        (size_t)(slash - rest) >= cap || strlen(slash + 1) >= cap)
        return -1;
    snprintf(ns, cap, "%.*s", (int)(slash - rest), rest);
    snprintf(name, cap, "%s", slash + 1);
    return 0;
}

/* kube-scheduler reads the body of a 200 reply only: for any other status
 * the pod's event says "code 409" and the reason is lost. So a /bind that
 * is refused (lost a race, node held, not leading, API failure) is answered
 * 200 with the reason in Error, which kube-scheduler shows ("binding
 * rejected: ..."); only a request that is itself wrong keeps its 4xx. A
 * forwarded answer that carries no Error (an older leader, a proxy's page)
 * gets one naming its status. */
static void bind_refusal(struct ext_reply *r, int *status)
{
    if (*status == 200 || *status == 400 || *status == 405 || *status == 413)
        return;
    int forwarded = !r->json && r->text; /* the leader's text */
    if (forwarded) {
        r->json = json_loadb(r->text, r->len, 0, NULL);
        free(r->text);
        r->text = NULL;
    }
    const json_t *err = json_object_get(r->json, "Error");
    if (!json_is_string(err) || !json_string_length(err)) {
        json_decref(r->json);
        r->json = ext_error("%s%d", forwarded ? "the leader answered /bind with status "
                                              : "/bind refused with status ", *status);
    }
    *status = 200;
}

/* A /bind answered with an Error: kube-scheduler parks the pod in its
 * unschedulable queue, where only a nudge or its 60 s flush reaches it
 * (the pod is nudged a second later: ext_sched_bind_refused). Not a
 * leader's own answer to a forwarded one (r->text): the leader noted it,
 * and a bind it refused for a held node waits for the node's release. */
static void note_refused(struct ext_server *s, const struct http_request *req,
                         const struct ext_reply *r)
{
    const char *err = json_string_value(json_object_get(r->json, "Error"));
    struct ext_bind b;
    struct gs_err e = GS_ERR_INIT;
    if (err && *err && ext_bind_parse(req->body, req->body_len, &b, &e) == 0) {
        ext_sched_bind_refused(s->opts.sched, b.pod_uid);
        ext_bind_clear(&b);
    }
}

/* *before_s: time the request spent parked before this run (its latency). */
static const char *route(struct ext_server *s, const struct http_request *req,
                         struct http_response *resp, int *parked, double *before_s)
{
    const char *path = req->path, *last = strrchr(path, '/');
    const char *seg = last ? last + 1 : path;
    char ns[256], name[256];
    /* a pod may be named like a verb: /allocations/ml/bind is a pod's */
    int pod_path = strncmp(path, "/allocations/", 13) == 0 || strncmp(path, "/debug/pods/", 12) == 0;

    for (size_t i = 0; !pod_path && i < sizeof verbs / sizeof verbs[0]; i++) {
        if (strcmp(seg, verbs[i].name) != 0)
            continue;
        if (strcmp(req->method, "POST") != 0) {
            reply_json(resp, 405, ext_error("%s: use POST", verbs[i].name));
            return verbs[i].name;
        }
        /* a /bind that ran here, on a bind thread, is answered here even if
         * this replica lost the lease meanwhile: forwarded, it would bind twice */
        int fwd = s->opts.forward && !http_req_header(req, EXT_FORWARD_HEADER) &&
                  !(verbs[i].fn == ext_sched_bind && s->bq && clock_has(s, http_req_token(req)));
        struct ext_bindq *fq = !fwd                                ? NULL
                               : verbs[i].fn == ext_sched_bind       ? s->fq
                               : verbs[i].fn == ext_sched_filter     ? s->ffq
                               : verbs[i].fn == ext_sched_prioritize ? s->fpq
                                                                     : s->fxq;
        struct ext_reply reply;
        int f = fq ? forward_queued(s, fq, req, &reply, &resp->status, before_s) : -1;
        if (f == 1) {
            *parked = 1;
            return verbs[i].name;
        } else if (f == 0) {
            /* the leader's answer */
        } else if (verbs[i].fn == ext_sched_bind && s->bq) {
            if ((*parked = bind_parked(s, req, &reply, &resp->status, before_s)))
                return verbs[i].name;
        } else if (verbs[i].fn == ext_sched_filter) {
            if ((*parked = filter_or_wait(s, req, &reply, &resp->status, before_s)))
                return verbs[i].name;
        } else {
            resp->status = verbs[i].fn(s->opts.sched, req->body, req->body_len, &reply);
        }
        if (verbs[i].fn == ext_sched_bind) {
            bind_refusal(&reply, &resp->status);
            note_refused(s, req, &reply);
        }
        resp->content_type = "application/json";
        if (reply.shared) { /* sent from the kept text, not copied */
            resp->body = reply.shared->buf;
            resp->body_len = reply.shared->len;
            resp->body_free = text_free;
            resp->body_owner = reply.shared;
            return verbs[i].name;
        }
        resp->body = ext_reply_take(&reply, &resp->body_len);
        return verbs[i].name;
    }
    if (strcmp(req->method, "GET") == 0) {
        if (strcmp(path, "/healthz") == 0) {
            http_resp_text(resp, 200, "text/plain", "ok\n");
            return "healthz";
        }
        if (strcmp(path, "/readyz") == 0) {
            int ok = !s->opts.ready || s->opts.ready(s->opts.ready_ud);
            http_resp_text(resp, ok ? 200 : 503, "text/plain", ok ? "ready\n" : "not ready\n");
            return "readyz";
        }
        if (strcmp(path, "/version") == 0) {
            reply_json(resp, 200, json_pack("{s:s, s:s}", "version", GPUSCHED_VERSION, "git",
                                            GPUSCHED_GIT));
            return "version";
        }
        if (strcmp(path, "/metrics") == 0) {
            size_t len;
            resp->status = 200;
            resp->content_type = "text/plain; version=0.0.4";
            resp->body = metrics_render(s->opts.metrics, &len);
            resp->body_len = len;
            return "metrics";
        }
        if (strcmp(path, "/debug/workload") == 0) {
            reply_json(resp, 200, ext_sched_workload(s->opts.sched));
            return "debug";
        }
        if (ns_name(path, "/debug/pods/", ns, name, sizeof ns) == 0) {
            json_t *reply = NULL;
            int status = ext_sched_explain(s->opts.sched, ns, name, &reply);
            reply_json(resp, status, reply);
            return "debug";
        }
    }
    if (strcmp(req->method, "DELETE") == 0 &&
        ns_name(path, "/allocations/", ns, name, sizeof ns) == 0) {
        if (!s->opts.allow_release) {
            reply_json(resp, 405, ext_error("cluster mode: delete the pod to free its GPUs"));
            return "release";
        }
        struct gs_err e = GS_ERR_INIT;
        char who[520];
        const char *uid = http_req_arg(req, "uid"); /* the one of two pods of a name */
        snprintf(who, sizeof who, "%s/%s", ns, name);
        if (ext_sched_release_one(s->opts.sched, who, uid, &e) < 0)
            reply_json(resp, e.code == GS_ENOENT ? 404 : e.code == GS_ECONFLICT ? 409 : 500,
                       ext_error("%s", e.msg));
        else
            reply_json(resp, 200, json_pack("{s:s}", "released", who));
        return "release";
    }
    /* a known path asked with another method */
    static const char *const gets[] = {"/healthz", "/readyz", "/version", "/metrics",
                                       "/debug/workload"};
    int get = ns_name(path, "/debug/pods/", ns, name, sizeof ns) == 0;
    for (size_t i = 0; !get && i < sizeof gets / sizeof gets[0]; i++)
        get = strcmp(path, gets[i]) == 0;
    if (get || ns_name(path, "/allocations/", ns, name, sizeof ns) == 0) {
        reply_json(resp, 405, ext_error("%.200s: use %s", path, get ? "GET" : "DELETE"));
        return "other";
    }
    reply_json(resp, 404, ext_error("no route for %s %.200s", req->method, path));
    return "other";
}

static void handle(void *ud, const struct http_request *req, struct http_response *resp)
{
    struct ext_server *s = ud;
    char code[8];
    int parked = 0;
    double before = 0, t0 = gs_mono_s();

    const char *verb = route(s, req, resp, &parked, &before);
    double took = gs_mono_s() - t0;
    if (parked)
        return; /* answered when it is handed back */
    snprintf(code, sizeof code, "%d", resp->status ? resp->status : 200);
    metric_inc(s->m_requests, (const char *[]){verb, code});
    metric_observe(s->m_latency, (const char *[]){verb}, before + took);
}

int ext_server_start(const struct ext_server_opts *opts, struct ext_server **out,
                     struct gs_err *e)
{
    struct ext_server *s = calloc(1, sizeof *s);
    struct http_server_opts ho = {0};
    char addr[256];
    double b[16];
    int rc;

    if (!s)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    s->opts = *opts;
    pthread_mutex_init(&s->clk_mu, NULL);
    metrics_exp_buckets(0.0001, 2, 16, b); /* 100 us .. 3.3 s */
    s->m_requests = metrics_add(opts->metrics, METRIC_COUNTER, "gpusched_extender_requests_total",
                                "HTTP requests by verb and status code.", "verb,code", NULL, 0, e);
    s->m_latency = metrics_add(opts->metrics, METRIC_HISTOGRAM,
                               "gpusched_extender_request_duration_seconds",
                               "Time to answer a request, by verb.", "verb", b, 16, e);
    double wb[10] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10};
    s->m_wait = metrics_add(opts->metrics, METRIC_HISTOGRAM, "gpusched_extender_bind_wait_seconds",
                            "Time a /bind waited for its node's previous GPU pod to be admitted "
                            "by kubelet (binds that waited).", NULL, wb, 10, e);
    s->m_wait_timeouts = metrics_add(opts->metrics, METRIC_COUNTER,
                                     "gpusched_extender_bind_wait_timeouts_total",
                                     "Binds refused because their node stayed held.", NULL,
                                     NULL, 0, e);
    s->m_tls = metrics_add(opts->metrics, METRIC_COUNTER, "gpusched_extender_tls_reloads_total",
                           "Reloads of a changed serving certificate (tls_cert), by result.",
                           "result", NULL, 0, e);
    if (!s->m_requests || !s->m_latency || !s->m_wait || !s->m_wait_timeouts || !s->m_tls) {
        server_free(s);
        return -GS_EINVAL;
    }
    metric_add(s->m_tls, (const char *[]){"ok"}, 0);
    metric_add(s->m_tls, (const char *[]){"error"}, 0);
    if ((rc = http_parse_listen(opts->listen, addr, sizeof addr, &ho.port, e)) < 0 ||
        ((opts->bind_threads > 0 || opts->lock) &&
         (rc = ext_bindq_new(run_bind, opts->sched, http_wake,
                             opts->bind_threads > 0 ? opts->bind_threads : EXT_BIND_THREADS,
                             &s->bq, e)) < 0) ||
        (opts->forward &&
         ((rc = ext_bindq_new(run_forward_bind, s, http_wake, FORWARD_THREADS, &s->fq, e)) < 0 ||
          (rc = ext_bindq_new(run_forward_filter, s, http_wake, FORWARD_THREADS, &s->ffq, e)) <
              0 ||
          (rc = ext_bindq_new(run_forward_prioritize, s, http_wake, FORWARD_CYCLE_THREADS,
                              &s->fpq, e)) < 0 ||
          (rc = ext_bindq_new(run_forward_preempt, s, http_wake, FORWARD_CYCLE_THREADS, &s->fxq,
                              e)) < 0)) ||
        (rc = ext_bindq_new(run_filter_wait, opts->sched, http_wake, FILTER_WAIT_THREADS, &s->wq,
                            e)) < 0) {
        server_free(s);
        return rc;
    }
    ho.addr = addr;
    ho.tls_cert_file = opts->tls_cert;
    ho.tls_key_file = opts->tls_key;
    ho.threads = opts->threads;
    ho.max_body = opts->max_body ? opts->max_body : (8u << 20);
    ho.handler = handle;
    ho.ud = s;
    ho.gone = request_gone;
    if ((rc = http_server_start(&ho, &s->http, e)) < 0) {
        server_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int ext_server_port(const struct ext_server *s) { return http_server_port(s->http); }

int ext_server_tick(struct ext_server *s, struct gs_err *e)
{
    int rc = http_server_reload_tls(s->http, e);
    if (rc > 0 && s->opts.forward)
        rc = ext_forward_tls(s->opts.forward, s->opts.tls_cert, e) < 0 ? -GS_EINVAL : 1;
    if (rc != 0)
        metric_inc(s->m_tls, (const char *[]){rc > 0 ? "ok" : "error"});
    return rc;
}

void ext_server_stop(struct ext_server *s)
{
    if (!s)
        return;
    /* binds waiting for a node are woken, and requests handed over finish
     * and wake their connections, first: a request still parked when the
     * daemon stops is never ended, and a later wake would find it freed */
    ext_nodelock_shutdown(s->opts.lock);
    for (int i = 0; i < N_QUEUES; i++)
        ext_bindq_stop(*queue(s, i));
    http_server_stop(s->http);
    server_free(s);
}
