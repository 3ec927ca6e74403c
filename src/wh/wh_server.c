/* wh/wh_server.c - see wh_server.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_server.h"
#include "ext/quotas.h"
#include "util/metrics.h"
#include "util/log.h"
#include "wh/wh_review.h"
#include "wh/wh_nodes.h"
#include "wh/wh_server.h"

#define WH_DEFAULT_BODY (4u << 20) /* an UPDATE's object and oldObject, each up to the
                                         API server's 1.5 MiB */

enum { EP_VALIDATE, EP_MUTATE, EP_N };
enum { RES_ALLOWED, RES_DENIED, RES_PATCHED, RES_ERROR, RES_N };
static const char *const ep_names[EP_N] = {"validate", "mutate"};
static const char *const res_names[RES_N] = {"allowed", "denied", "patched", "error"};

struct wh_server {
    struct wh_server_opts o;
    struct http_server *http;
    pthread_rwlock_t lock;        /* guards quotas and o.config.cluster */
    struct core_quotas *quotas;   /* NULL without a quota source */
    struct ext_quotas *source;    /* file or watch feeding `quotas` */
    struct wh_cluster fixed;      /* what the flags set: never learned */
    struct wh_nodes *nodes;       /* the Nodes watch, with an API server */
    struct metrics *m;
    struct metric *m_requests, *m_tls;
    int nodes_listed;             /* the Nodes watch has listed once (under lock) */
};

/* The quota source hands over a new set (on its own thread). */
static void set_quotas(void *ud, struct core_quotas *set)
{
    struct wh_server *s = ud;
    pthread_rwlock_wrlock(&s->lock);
    core_quotas_free(s->quotas);
    s->quotas = set;
    pthread_rwlock_unlock(&s->lock);
}

/* The Nodes watch hands over the cluster's largest GPU and oldest kubelet
 * (on its own thread); what the flags or the --nodes file set stays. The
 * largest GPU and node only rise: a node pool scaled to zero (or its one
 * node replaced) comes back for the pods that ask for it, which the
 * cluster autoscaler sees only once they are created. */
static void set_cluster(void *ud, const struct wh_cluster *learned)
{
    struct wh_server *s = ud;
    struct wh_cluster *c = &s->o.config.cluster;
    pthread_rwlock_wrlock(&s->lock);
    if (!s->fixed.max_gpu_mem_mib && learned->max_gpu_mem_mib > c->max_gpu_mem_mib) {
        c->max_gpu_mem_mib = learned->max_gpu_mem_mib;
        memcpy(c->max_gpu_model, learned->max_gpu_model, sizeof c->max_gpu_model);
    }
    if (!s->fixed.max_gpus_per_node && learned->max_gpus_per_node > c->max_gpus_per_node)
        c->max_gpus_per_node = learned->max_gpus_per_node;
    if (!s->fixed.kubelet_minor)
        c->kubelet_minor = learned->kubelet_minor;
    if (!s->fixed.n_models) {
        c->n_models = learned->n_models;
        c->models_overflow = learned->models_overflow;
        memcpy(c->models, learned->models, sizeof c->models);
    }
    s->nodes_listed = 1;
    pthread_rwlock_unlock(&s->lock);
}

/* ---- routes ------------------------------------------------------------------- */

static void count(struct wh_server *s, int ep, int res)
{
    metric_inc(s->m_requests, (const char *[]){ep_names[ep], res_names[res]});
}

static void metrics(struct wh_server *s, struct http_response *resp)
{
    size_t len = 0;
    char *text = metrics_render(s->m, &len);

    if (!text) {
        http_resp_error(resp, 500, "out of memory");
        return;
    }
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = text;
    resp->body_len = len;
}

static int is_kind(const struct wh_review *r, const char *group, const char *kind)
{
    return strcmp(r->group, group) == 0 && strcmp(r->kind, kind) == 0;
}

static int is_op(const struct wh_review *r, const char *op) { return strcmp(r->operation, op) == 0; }

static json_t *validate(struct wh_server *s, const struct wh_review *r, int *res)
{
    struct gs_err e = GS_ERR_INIT;
    int rc = 0;

    if (is_kind(r, "", "Pod") && (is_op(r, "CREATE") || is_op(r, "UPDATE"))) {
        rc = wh_check_assignment(&s->o.config, r->old_object, r->object, r->user, &e);
        if (rc == 0 && is_op(r, "CREATE")) {
            pthread_rwlock_rdlock(&s->lock);
            rc = wh_validate_pod(&s->o.config, s->quotas, r->object, r->ns, &e);
            pthread_rwlock_unlock(&s->lock);
        }
    } else if (is_kind(r, "gpusched.io", "GPUQuota") && (is_op(r, "CREATE") || is_op(r, "UPDATE"))) {
        struct core_quota q;
        json_t *meta = json_object_get(r->object, "metadata");
        if (json_is_object(meta) && !json_object_get(meta, "namespace") && r->ns[0])
            json_object_set_new(meta, "namespace", json_string(r->ns));
        rc = core_quota_parse(r->object, &q, &e);
    }
    if (rc < 0) {
        *res = RES_DENIED;
        log_info("webhook", "denied %s %s/%s: %s", r->kind, r->ns, r->name, e.msg);
        return wh_review_response(r, 0, rc == -GS_ENOFIT || rc == -GS_EPERM ? 403 : 422, e.msg,
                                  NULL, NULL);
    }
    *res = RES_ALLOWED;
    return wh_review_response(r, 1, 200, NULL, NULL, NULL);
}

static json_t *mutate(struct wh_server *s, const struct wh_review *r, int *res)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *patch = NULL, *out;
    char warn[512];

    *res = RES_ALLOWED;
    if (!is_kind(r, "", "Pod") || !is_op(r, "CREATE"))
        return wh_review_response(r, 1, 200, NULL, NULL, NULL);
    pthread_rwlock_rdlock(&s->lock); /* config.cluster: set_cluster writes it */
    int mrc = wh_mutate_pod(&s->o.config, r->object, r->ns, r->user, &patch, warn, sizeof warn,
                            &e);
    pthread_rwlock_unlock(&s->lock);
    if (mrc < 0) {
        /* nothing to patch on a broken request: /validate refuses it */
        log_debug("webhook", "not mutating %s/%s: %s", r->ns, r->name, e.msg);
        return wh_review_response(r, 1, 200, NULL, NULL, NULL);
    }
    if (json_array_size(patch) > 0)
        *res = RES_PATCHED;
    if (warn[0])
        log_info("webhook", "patched %s/%s: %s", r->ns, r->name, warn);
    out = wh_review_response(r, 1, 200, NULL, patch, warn);
    json_decref(patch);
    return out;
}

static void handle(void *ud, const struct http_request *req, struct http_response *resp)
{
    struct wh_server *s = ud;
    struct wh_review r;
    struct gs_err e = GS_ERR_INIT;
    int ep, res = RES_ERROR;

    if (strcmp(req->path, "/healthz") == 0) {
        http_resp_text(resp, 200, "text/plain", "ok\n");
        return;
    }
    if (strcmp(req->path, "/readyz") == 0) {
        /* before the first Node list the oldest kubelet is unknown, and a
         * pod that needs a new one (a GPU share in an init container) would
         * be refused; before the first GPUQuota list (or the news that the
         * CRD is not installed) every pod would be let past its quota */
        pthread_rwlock_rdlock(&s->lock);
        const char *wait = s->nodes && !s->nodes_listed ? "the first Node list"
                           : s->source && !s->quotas  ? "the first GPUQuota list"
                                                      : NULL;
        pthread_rwlock_unlock(&s->lock);
        char text[64] = "ready\n";
        if (wait)
            snprintf(text, sizeof text, "waiting for %s\n", wait);
        http_resp_text(resp, wait ? 503 : 200, "text/plain", text);
        return;
    }
    if (strcmp(req->path, "/metrics") == 0) {
        metrics(s, resp);
        return;
    }
    if (strcmp(req->path, "/validate") == 0)
        ep = EP_VALIDATE;
    else if (strcmp(req->path, "/mutate") == 0)
        ep = EP_MUTATE;
    else {
        http_resp_error(resp, 404, "no route %s (expected /validate, /mutate, /healthz, /readyz, /metrics)",
                        req->path);
        return;
    }
    if (strcmp(req->method, "POST") != 0) {
        http_resp_error(resp, 405, "%s takes POST with an AdmissionReview", req->path);
        return;
    }
    if (wh_review_parse(req->body, req->body_len, &r, &e) < 0) {
        count(s, ep, RES_ERROR);
        log_warn("webhook", "%s: bad request: %s", req->path, e.msg);
        http_resp_error(resp, 400, "%s", e.msg);
        return;
    }
    json_t *out = ep == EP_VALIDATE ? validate(s, &r, &res) : mutate(s, &r, &res);
    wh_review_clear(&r);
    if (!out) {
        count(s, ep, RES_ERROR);
        http_resp_error(resp, 500, "cannot encode the AdmissionReview response");
        return;
    }
    count(s, ep, res);
    http_resp_json(resp, 200, out);
}

/* ---- lifecycle ------------------------------------------------------------------- */

static int add_metrics(struct wh_server *s, struct gs_err *e)
{
    if (!(s->m = metrics_new()))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    s->m_requests = metrics_add(s->m, METRIC_COUNTER, "gpusched_webhook_requests_total",
                                "AdmissionReviews answered, by endpoint and result.",
                                "endpoint,result", NULL, 0, e);
    s->m_tls = metrics_add(s->m, METRIC_COUNTER, "gpusched_webhook_tls_reloads_total",
                           "Certificate reloads, by result.", "result", NULL, 0, e);
    if (!s->m_requests || !s->m_tls)
        return -GS_EINVAL;
    for (int ep = 0; ep < EP_N; ep++) /* every series from the start, at 0 */
        for (int r = 0; r < RES_N; r++)
            metric_add(s->m_requests, (const char *[]){ep_names[ep], res_names[r]}, 0);
    metric_add(s->m_tls, (const char *[]){"ok"}, 0);
    metric_add(s->m_tls, (const char *[]){"error"}, 0);
    return 0;
}

int wh_server_start(const struct wh_server_opts *o, struct wh_server **out, struct gs_err *e)
{
    struct wh_server *s = calloc(1, sizeof *s);
    int rc = 0;

    if (!s)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    s->o = *o;
    pthread_rwlock_init(&s->lock, NULL);
    if (!o->tls_cert || !o->tls_key) {
        rc = gs_errf(e, GS_EINVAL, "--tls-cert and --tls-key are required: the API server "
                                   "calls admission webhooks over HTTPS only");
        goto fail;
    }
    if ((rc = add_metrics(s, e)) < 0)
        goto fail;
    if (o->quota_file)
        rc = ext_quotas_from_file(o->quota_file, set_quotas, s, s->m, &s->source, e);
    else if (o->kc)
        rc = ext_quotas_watch(o->kc, 0, set_quotas, s, s->m, &s->source, e);
    s->fixed = o->config.cluster;
    if (rc == 0 && o->kc &&
        (!s->fixed.max_gpu_mem_mib || !s->fixed.max_gpus_per_node || !s->fixed.kubelet_minor))
        rc = wh_nodes_watch(o->kc, &s->o.config.names, set_cluster, s, &s->nodes, e);
    if (rc < 0)
        goto fail;
    struct http_server_opts ho = {0};
    ho.addr = o->addr;
    ho.port = o->port;
    ho.tls_cert_file = o->tls_cert;
    ho.tls_key_file = o->tls_key;
    ho.max_body = o->max_body ? o->max_body : WH_DEFAULT_BODY;
    ho.handler = handle;
    ho.ud = s;
    if ((rc = http_server_start(&ho, &s->http, e)) < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    wh_server_stop(s);
    return rc;
}

int wh_server_port(const struct wh_server *s) { return http_server_port(s->http); }

void wh_server_tick(struct wh_server *s)
{
    struct gs_err e = GS_ERR_INIT;
    int rc = http_server_reload_tls(s->http, &e);

    if (rc > 0) {
        metric_inc(s->m_tls, (const char *[]){"ok"});
        log_info("webhook", "TLS certificate reloaded from %s", s->o.tls_cert);
    } else if (rc < 0) {
        metric_inc(s->m_tls, (const char *[]){"error"});
        log_error("webhook", "%s", e.msg);
    }
}

void wh_server_stop(struct wh_server *s)
{
    if (!s)
        return;
    if (s->http)
        http_server_stop(s->http);
    ext_quotas_stop(s->source);
    wh_nodes_free(s->nodes);
    core_quotas_free(s->quotas);
    metrics_free(s->m);
    pthread_rwlock_destroy(&s->lock);
    free(s);
}
