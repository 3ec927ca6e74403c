/* wh/wh_server.c - see wh_server.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "http/http_server.h"
#include "util/log.h"
#include "wh/wh_review.h"
#include "wh/wh_server.h"

#define WH_DEFAULT_BODY (1u << 20)
#define QUOTA_FILE_MAX (4u << 20)

enum { EP_VALIDATE, EP_MUTATE, EP_N };
enum { RES_ALLOWED, RES_DENIED, RES_PATCHED, RES_ERROR, RES_N };
static const char *const ep_names[EP_N] = {"validate", "mutate"};
static const char *const res_names[RES_N] = {"allowed", "denied", "patched", "error"};

struct wh_server {
    struct wh_server_opts o;
    struct http_server *http;
    pthread_rwlock_t lock;        /* guards quotas */
    struct core_quotas *quotas;   /* NULL without a quota file */
    struct timespec quota_mtime;
    atomic_long requests[EP_N][RES_N];
    atomic_long tls_reloads, tls_reload_errors;
    atomic_long quota_objects, quota_broken, quota_reload_errors;
};

/* ---- quotas from a file ------------------------------------------------------ */

struct bad_ctx {
    const char *file;
    long n;
};

static void on_bad_quota(void *ud, int index, const struct gs_err *e)
{
    struct bad_ctx *b = ud;
    b->n++;
    log_warn("webhook", "%s: object %d ignored: %s", b->file, index, e->msg);
}

/* Reads the quota file into a new set; the old set stays on any error. */
static int load_quotas(struct wh_server *s, struct gs_err *e)
{
    struct stat st;
    FILE *f;
    char *buf;
    struct core_quota *qs;
    int n;
    struct bad_ctx bad = {s->o.quota_file, 0};

    if (stat(s->o.quota_file, &st) != 0 || !(f = fopen(s->o.quota_file, "rb")))
        return gs_errf(e, GS_EIO, "cannot open quota file '%s': %m", s->o.quota_file);
    if (st.st_size > QUOTA_FILE_MAX) {
        fclose(f);
        return gs_errf(e, GS_ETOOBIG, "quota file '%s' is larger than %u bytes",
                       s->o.quota_file, QUOTA_FILE_MAX);
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(buf);
        fclose(f);
        return gs_errf(e, GS_EIO, "cannot read quota file '%s'", s->o.quota_file);
    }
    fclose(f);
    int rc = core_quota_parse_doc(buf, (size_t)st.st_size, &qs, &n, on_bad_quota, &bad, e);
    free(buf);
    s->quota_mtime = st.st_mtim;
    if (rc < 0) {
        gs_err_prefix(e, "%s", s->o.quota_file);
        return rc;
    }
    struct core_quotas *set = core_quotas_new();
    if (!set) {
        free(qs);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++)
        if (core_quotas_put(set, &qs[i], e) < 0) {
            free(qs);
            core_quotas_free(set);
            return -GS_ENOMEM;
        }
    free(qs);
    pthread_rwlock_wrlock(&s->lock);
    core_quotas_free(s->quotas);
    s->quotas = set;
    pthread_rwlock_unlock(&s->lock);
    s->quota_objects = n;
    s->quota_broken = bad.n;
    log_info("webhook", "%s: %d GPUQuota objects loaded, %ld broken ones ignored",
             s->o.quota_file, n, bad.n);
    return 0;
}

/* ---- routes ------------------------------------------------------------------- */

static void count(struct wh_server *s, int ep, int res) { s->requests[ep][res]++; }

static void metrics(struct wh_server *s, struct http_response *resp)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    if (!f) {
        http_resp_error(resp, 500, "out of memory");
        return;
    }
    fprintf(f, "# HELP gpusched_webhook_requests_total AdmissionReviews answered, by endpoint "
               "and result.\n# TYPE gpusched_webhook_requests_total counter\n");
    for (int ep = 0; ep < EP_N; ep++)
        for (int r = 0; r < RES_N; r++)
            fprintf(f, "gpusched_webhook_requests_total{endpoint=\"%s\",result=\"%s\"} %ld\n",
                    ep_names[ep], res_names[r], (long)s->requests[ep][r]);
    fprintf(f, "# HELP gpusched_webhook_tls_reloads_total Certificate reloads, by result.\n"
               "# TYPE gpusched_webhook_tls_reloads_total counter\n"
               "gpusched_webhook_tls_reloads_total{result=\"ok\"} %ld\n"
               "gpusched_webhook_tls_reloads_total{result=\"error\"} %ld\n",
            (long)s->tls_reloads, (long)s->tls_reload_errors);
    fprintf(f, "# HELP gpusched_webhook_quota_objects GPUQuota objects in force.\n"
               "# TYPE gpusched_webhook_quota_objects gauge\n"
               "gpusched_webhook_quota_objects %ld\n"
               "# HELP gpusched_webhook_quota_objects_broken GPUQuota objects ignored because "
               "they are broken.\n# TYPE gpusched_webhook_quota_objects_broken gauge\n"
               "gpusched_webhook_quota_objects_broken %ld\n"
               "# HELP gpusched_webhook_quota_reload_errors_total Quota files that could not be "
               "read (the previous quotas stay).\n"
               "# TYPE gpusched_webhook_quota_reload_errors_total counter\n"
               "gpusched_webhook_quota_reload_errors_total %ld\n",
            (long)s->quota_objects, (long)s->quota_broken, (long)s->quota_reload_errors);
    fclose(f);
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = out;
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

    if (is_kind(r, "", "Pod") && is_op(r, "CREATE")) {
        pthread_rwlock_rdlock(&s->lock);
        rc = wh_validate_pod(&s->o.config, s->quotas, r->object, r->ns, &e);
        pthread_rwlock_unlock(&s->lock);
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
        return wh_review_response(r, 0, rc == -GS_ENOFIT ? 403 : 422, e.msg, NULL);
    }
    *res = RES_ALLOWED;
    return wh_review_response(r, 1, 200, NULL, NULL);
}

static json_t *mutate(struct wh_server *s, const struct wh_review *r, int *res)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *patch = NULL, *out;

    *res = RES_ALLOWED;
    if (!is_kind(r, "", "Pod") || !is_op(r, "CREATE"))
        return wh_review_response(r, 1, 200, NULL, NULL);
    if (wh_mutate_pod(&s->o.config, r->object, r->ns, &patch, &e) < 0) {
        /* nothing to patch on a broken request: /validate refuses it */
        log_debug("webhook", "not mutating %s/%s: %s", r->ns, r->name, e.msg);
        return wh_review_response(r, 1, 200, NULL, NULL);
    }
    if (json_array_size(patch) > 0)
        *res = RES_PATCHED;
    out = wh_review_response(r, 1, 200, NULL, patch);
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
    if (strcmp(req->path, "/metrics") == 0) {
        metrics(s, resp);
        return;
    }
    if (strcmp(req->path, "/validate") == 0)
        ep = EP_VALIDATE;
    else if (strcmp(req->path, "/mutate") == 0)
        ep = EP_MUTATE;
    else {
        http_resp_error(resp, 404, "no route %s (expected /validate, /mutate, /healthz, /metrics)",
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

int wh_server_start(const struct wh_server_opts *o, struct wh_server **out, struct gs_err *e)
{
    struct wh_server *s = calloc(1, sizeof *s);

    if (!s)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    s->o = *o;
    pthread_rwlock_init(&s->lock, NULL);
    if (!o->tls_cert || !o->tls_key) {
        free(s);
        return gs_errf(e, GS_EINVAL, "--tls-cert and --tls-key are required: the API server "
                                     "calls admission webhooks over HTTPS only");
    }
    if (o->quota_file && load_quotas(s, e) < 0) {
        pthread_rwlock_destroy(&s->lock);
        free(s);
        return -GS_EINVAL;
    }
    struct http_server_opts ho = {0};
    ho.addr = o->addr;
    ho.port = o->port;
    ho.tls_cert_file = o->tls_cert;
    ho.tls_key_file = o->tls_key;
    ho.max_body = o->max_body ? o->max_body : WH_DEFAULT_BODY;
    ho.handler = handle;
    ho.ud = s;
    if (http_server_start(&ho, &s->http, e) < 0) {
        core_quotas_free(s->quotas);
        pthread_rwlock_destroy(&s->lock);
        free(s);
        return -GS_EINVAL;
    }
    *out = s;
    return 0;
}

int wh_server_port(const struct wh_server *s) { return http_server_port(s->http); }

void wh_server_tick(struct wh_server *s)
{
    struct gs_err e = GS_ERR_INIT;
    struct stat st;
    int rc = http_server_reload_tls(s->http, &e);

    if (rc > 0) {
        s->tls_reloads++;
        log_info("webhook", "TLS certificate reloaded from %s", s->o.tls_cert);
    } else if (rc < 0) {
        s->tls_reload_errors++;
        log_error("webhook", "%s", e.msg);
    }
    if (s->o.quota_file && stat(s->o.quota_file, &st) == 0 &&
        (st.st_mtim.tv_sec != s->quota_mtime.tv_sec ||
         st.st_mtim.tv_nsec != s->quota_mtime.tv_nsec)) {
        if (load_quotas(s, &e) < 0) {
            s->quota_reload_errors++;
            log_error("webhook", "%s; keeping the previous quotas", e.msg);
        }
    }
}

void wh_server_stop(struct wh_server *s)
{
    if (!s)
        return;
    http_server_stop(s->http);
    core_quotas_free(s->quotas);
    pthread_rwlock_destroy(&s->lock);
    free(s);
}
