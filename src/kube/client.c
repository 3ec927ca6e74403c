/* kube/client.c - see client.h. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/client.h"
#include "kube/client_internal.h"
#include "util/buf.h"
#include "util/clock.h"

#define POOL_MAX 8
#define TOKEN_REFRESH_S 60
#define KUBE_RETRIES_429 3 /* sends again after a 429, at most */

struct kube_client {
    struct kube_config cfg;     /* deep copy */
    struct kube_client_opts opts;
    pthread_mutex_t mu;         /* guards pool and token */
    CURL *pool[POOL_MAX];
    int npool;
    char *token;
    double token_read; /* gs_mono_s() of the last read of token_file */
    unsigned long token_gen; /* bumped when a read brings another token */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static char *dupn(const char *s, size_t n)
{
    char *d;
    if (!s)
        return NULL;
    if ((d = malloc(n + 1))) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static char *dup0(const char *s) { return s ? strdup(s) : NULL; }

int kube_client_new(const struct kube_config *cfg, const struct kube_client_opts *opts,
                    struct kube_client **out, struct gs_err *e)
{
    struct kube_client *c;

    pthread_once(&curl_once, curl_init_once);
    if (!cfg->server)
        return gs_errf(e, GS_EINVAL, "kube config has no server");
    if (!(c = calloc(1, sizeof *c)))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    if (opts)
        c->opts = *opts;
    if (!c->opts.timeout_ms)
        c->opts.timeout_ms = 10000;
    if (!c->opts.max_response)
        c->opts.max_response = 512u << 20;
    if (!c->opts.user_agent)
        c->opts.user_agent = "gpusched";
    c->cfg.server = dup0(cfg->server);
    c->cfg.token_file = dup0(cfg->token_file);
    c->cfg.ca_file = dup0(cfg->ca_file);
    c->cfg.ca_data = dupn(cfg->ca_data, cfg->ca_len);
    c->cfg.ca_len = cfg->ca_len;
    c->cfg.cert_file = dup0(cfg->cert_file);
    c->cfg.key_file = dup0(cfg->key_file);
    c->cfg.cert_data = dupn(cfg->cert_data, cfg->cert_len);
    c->cfg.cert_len = cfg->cert_len;
    c->cfg.key_data = dupn(cfg->key_data, cfg->key_len);
    c->cfg.key_len = cfg->key_len;
    c->cfg.insecure = cfg->insecure;
    c->cfg.namespace = strdup(cfg->namespace ? cfg->namespace : "default");
    c->token = dup0(cfg->token);
    c->token_read = gs_mono_s();
    *out = c;
    return 0;
}

void kube_client_free(struct kube_client *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->npool; i++)
        curl_easy_cleanup(c->pool[i]);
    kube_config_clear(&c->cfg);
    free(c->token);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *kube_client_namespace(const struct kube_client *c) { return c->cfg.namespace; }

const char *kube_client_server(const struct kube_client *c) { return c->cfg.server; }

long kube_client_timeout_ms(const struct kube_client *c) { return c->opts.timeout_ms; }

/* After a 401 to a request sent with token generation gen: 1 when a
 * request sent again may pass, because another token is loaded since, or
 * because the token file will be read again at the next request (unless
 * it was read in the last second: the token it holds is the one refused). */
static int token_retry(struct kube_client *c, unsigned long gen)
{
    int again = 0;
    pthread_mutex_lock(&c->mu);
    if (c->token_gen != gen) {
        again = 1;
    } else if (c->cfg.token_file && gs_mono_s() - c->token_read >= 1.0) {
        c->token_read = gs_mono_s() - TOKEN_REFRESH_S;
        again = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return again;
}

void kube_client_token_refused(struct kube_client *c, unsigned long gen)
{
    (void)token_retry(c, gen);
}

unsigned long kube_client_token_gen(struct kube_client *c)
{
    pthread_mutex_lock(&c->mu);
    unsigned long gen = c->token_gen;
    pthread_mutex_unlock(&c->mu);
    return gen;
}

/* The bearer header, re-reading a token file every TOKEN_REFRESH_S. */
static struct curl_slist *auth_header(struct kube_client *c, struct curl_slist *h)
{
    char *hdr = NULL;
    pthread_mutex_lock(&c->mu);
    /* a kubeconfig's tokenFile alone (no token): read at the first request */
    if (c->cfg.token_file &&
        (!c->token || gs_mono_s() - c->token_read >= TOKEN_REFRESH_S)) {
        FILE *f = fopen(c->cfg.token_file, "rb");
        char buf[16384];
        size_t n;
        c->token_read = gs_mono_s();
        if (f) {
            n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
                n--;
            buf[n] = '\0';
            if (n && (!c->token || strcmp(c->token, buf) != 0)) {
                free(c->token);
                c->token = strdup(buf);
                c->token_gen++;
            }
        }
    }
    if (c->token && *c->token && asprintf(&hdr, "Authorization: Bearer %s", c->token) < 0)
        hdr = NULL;
    pthread_mutex_unlock(&c->mu);
    if (hdr) {
        h = curl_slist_append(h, hdr);
        free(hdr);
    }
    return h;
}

CURL *kube_client_handle(struct kube_client *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->npool)
        h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->mu);
    if (h) {
        curl_easy_reset(h);
    } else if (!(h = curl_easy_init())) {
        return NULL;
    }
    curl_easy_setopt(h, CURLOPT_USERAGENT, c->opts.user_agent);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->opts.timeout_ms < 5000 ? c->opts.timeout_ms : 5000L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    /* an apiserver (or a load balancer before it) that vanishes without a
     * reset is noticed within about two minutes (Linux's 9 probes), not at a
     * watch's timeout: an idle watch may rightly carry nothing that long */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, c->cfg.insecure ? 0L : 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, c->cfg.insecure ? 0L : 2L);
    if (c->cfg.ca_data) {
        struct curl_blob b = {c->cfg.ca_data, c->cfg.ca_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    } else if (c->cfg.ca_file) {
        curl_easy_setopt(h, CURLOPT_CAINFO, c->cfg.ca_file);
    }
    /* the cluster's CA is the only one trusted, not the system store too
     * (Debian's libcurl adds /etc/ssl/certs by default) */
    if (c->cfg.ca_data || c->cfg.ca_file)
        curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
    if (c->cfg.cert_data) {
        struct curl_blob b = {c->cfg.cert_data, c->cfg.cert_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
    } else if (c->cfg.cert_file) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cfg.cert_file);
    }
    if (c->cfg.key_data) {
        struct curl_blob b = {c->cfg.key_data, c->cfg.key_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
    } else if (c->cfg.key_file) {
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->cfg.key_file);
    }
    return h;
}

void kube_client_release(struct kube_client *c, CURL *h)
{
    pthread_mutex_lock(&c->mu);
    if (c->npool < POOL_MAX) {
        c->pool[c->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (h)
        curl_easy_cleanup(h);
}

struct curl_slist *kube_client_headers(struct kube_client *c, const char *content_type)
{
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    if (content_type) {
        char buf[128];
        snprintf(buf, sizeof buf, "Content-Type: %s", content_type);
        h = curl_slist_append(h, buf);
    }
    return auth_header(c, h);
}

struct body {
    struct gs_buf b;
    size_t max;
    int too_big;
};

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    struct body *b = ud;
    size_t k = sz * n;
    if (b->b.len + k > b->max) {
        b->too_big = 1;
        return 0;
    }
    gs_buf_put(&b->b, p, k);
    return b->b.oom ? 0 : k;
}

int kube_status_error(long status, const char *method, const char *path, const json_t *reply,
                      struct gs_err *e)
{
    const json_t *m = json_object_get(reply, "message");
    const char *msg = json_is_string(m) ? json_string_value(m) : "";
    int code;
    if (status == 404)
        code = GS_ENOENT;
    else if (status == 409 || status == 410)
        code = GS_ECONFLICT;
    else if (status == 429 || status >= 500 || status == 0)
        code = GS_EUNAVAIL;
    else
        code = GS_EINVAL;
    return gs_errf(e, code, "%s %s: HTTP %ld%s%s", method, path, status, *msg ? ": " : "", msg);
}

int kube_request(struct kube_client *c, const char *method, const char *path,
                 const char *content_type, const json_t *body, json_t **out, long *status,
                 struct gs_err *e)
{
    CURL *h;
    struct curl_slist *hdrs;
    struct body resp = {.max = c->opts.max_response};
    char *url = NULL, *payload = NULL;
    long code = 0;
    CURLcode cr;
    json_t *reply = NULL;
    int rc = 0;

    if (out)
        *out = NULL;
    if (status)
        *status = 0;
    if (!path || path[0] != '/')
        return gs_errf(e, GS_EINVAL, "request path must start with '/'");
    if (body && !(payload = json_dumps(body, JSON_COMPACT)))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    if (asprintf(&url, "%s%s", c->cfg.server, path) < 0) {
        free(payload);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    /* 429 Too Many Requests (API Priority and Fairness under load): the
     * request was not served, so it is sent again, after the Retry-After it
     * names (at most 2 s) or a short wait, as client-go does. A 401 is sent
     * again once with the token file read again: kubelet rotates a bound
     * service account token, and a Secret's token changes with its Secret
     * (nothing was served either) */
    for (int attempt = 0, reread = 0;; attempt++) {
        curl_off_t retry_after = 0;
        unsigned long gen = kube_client_token_gen(c); /* what this try is sent with */
        if (!(h = kube_client_handle(c))) {
            free(url);
            free(payload);
            gs_buf_free(&resp.b);
            return gs_errf(e, GS_ENOMEM, "cannot create a curl handle");
        }
        hdrs = kube_client_headers(c, payload ? (content_type ? content_type : "application/json")
                                              : NULL);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->opts.timeout_ms);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
        if (payload) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
        } else if (strcmp(method, "GET") == 0) {
            curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        }
        cr = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(h, CURLINFO_RETRY_AFTER, &retry_after);
        curl_slist_free_all(hdrs);
        kube_client_release(c, h);
        if (cr == CURLE_OK && code == 401 && !reread++ && token_retry(c, gen)) {
            gs_buf_free(&resp.b);
            resp = (struct body){.max = c->opts.max_response};
            attempt--;
            continue;
        }
        if (cr != CURLE_OK || code != 429 || attempt == KUBE_RETRIES_429)
            break;
        gs_buf_free(&resp.b);
        resp = (struct body){.max = c->opts.max_response};
        double wait = retry_after > 0 ? (retry_after < 2 ? (double)retry_after : 2.0)
                                      : 0.25 * (attempt + 1);
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
    }
    free(url);
    free(payload);
    if (status)
        *status = code;
    if (cr != CURLE_OK) {
        gs_buf_free(&resp.b);
        if (resp.too_big)
            return gs_errf(e, GS_ETOOBIG, "%s %s: reply larger than %zu bytes", method, path,
                           c->opts.max_response);
        return gs_errf(e, GS_EUNAVAIL, "%s %s: %s", method, path, curl_easy_strerror(cr));
    }
    if (resp.b.len) {
        json_error_t je;
        reply = json_loadb(resp.b.buf, resp.b.len, JSON_ALLOW_NUL, &je);
        if (!reply && code >= 200 && code < 300) {
            gs_buf_free(&resp.b);
            return gs_errf(e, GS_EPROTO, "%s %s: reply is not JSON: %s", method, path, je.text);
        }
    }
    gs_buf_free(&resp.b);
    if (code < 200 || code >= 300)
        rc = kube_status_error(code, method, path, reply, e);
    if (out)
        *out = reply;
    else
        json_decref(reply);
    return rc;
}

int kube_get(struct kube_client *c, const char *path, json_t **out, struct gs_err *e)
{
    return kube_request(c, "GET", path, NULL, NULL, out, NULL, e);
}

int kube_create(struct kube_client *c, const char *path, const json_t *obj, json_t **out,
                struct gs_err *e)
{
    return kube_request(c, "POST", path, "application/json", obj, out, NULL, e);
}

int kube_replace(struct kube_client *c, const char *path, const json_t *obj, json_t **out,
                 struct gs_err *e)
{
    return kube_request(c, "PUT", path, "application/json", obj, out, NULL, e);
}

int kube_patch(struct kube_client *c, const char *path, enum kube_patch type,
               const json_t *patch, json_t **out, struct gs_err *e)
{
    static const char *const ctypes[] = {"application/merge-patch+json",
                                         "application/strategic-merge-patch+json",
                                         "application/json-patch+json"};
    if (type < KUBE_PATCH_MERGE || type > KUBE_PATCH_JSON)
        return gs_errf(e, GS_EINVAL, "unknown patch type %d", (int)type);
    if (type == KUBE_PATCH_JSON ? !json_is_array(patch) : !json_is_object(patch))
        return gs_errf(e, GS_EINVAL, "patch: %s", type == KUBE_PATCH_JSON
                                                       ? "a JSON patch must be an array"
                                                       : "a merge patch must be an object");
    return kube_request(c, "PATCH", path, ctypes[type], patch, out, NULL, e);
}

int kube_delete(struct kube_client *c, const char *path, struct gs_err *e)
{
    return kube_request(c, "DELETE", path, NULL, NULL, NULL, NULL, e);
}

int kube_escape(const char *s, char *buf, size_t cap, struct gs_err *e)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' || *p == '~';
        if (o + (plain ? 1 : 3) >= cap)
            return gs_errf(e, GS_ETOOBIG, "query value longer than %zu bytes", cap);
        if (plain) {
            buf[o++] = (char)*p;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 15];
        }
    }
    if (o >= cap)
        return gs_errf(e, GS_ETOOBIG, "query value longer than %zu bytes", cap);
    buf[o] = '\0';
    return 0;
}

void kube_now_micro(char *buf, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    char base[24];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%06dZ", base, (int)(ts.tv_nsec / 1000) % 1000000);
}

int kube_parse_time(const char *s, double *out)
{
    struct tm tm;
    const char *p;
    double frac = 0;
    long off = 0;

    memset(&tm, 0, sizeof tm);
    if (!s || !(p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)))
        return -1;
    if (*p == '.') {
        double scale = 0.1;
        p++;
        if (*p < '0' || *p > '9')
            return -1;
        while (*p >= '0' && *p <= '9') {
            frac += (*p - '0') * scale;
            scale /= 10;
            p++;
        }
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && p[1] && p[2] && p[3] == ':' && p[4] && p[5]) {
        int hh = (p[1] - '0') * 10 + (p[2] - '0'), mm = (p[4] - '0') * 10 + (p[5] - '0');
        off = (hh * 3600L + mm * 60L) * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return -1;
    }
    if (*p)
        return -1;
    *out = (double)(timegm(&tm) - off) + frac;
    return 0;
}

const char *kube_meta_str(const json_t *obj, const char *field)
{
    const json_t *v = json_object_get(json_object_get(obj, "metadata"), field);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static const char *meta_map(const json_t *obj, const char *map, const char *key)
{
    const json_t *v = json_object_get(json_object_get(json_object_get(obj, "metadata"), map), key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

const char *kube_annotation(const json_t *obj, const char *key)
{
    return meta_map(obj, "annotations", key);
}

const char *kube_label(const json_t *obj, const char *key) { return meta_map(obj, "labels", key); }

/* Does a container of the status's list `key` run? */
static int any_running(const json_t *st, const char *key)
{
    const json_t *c;
    size_t i;
    json_array_foreach(json_object_get(st, key), i, c) {
        if (json_object_get(json_object_get(c, "state"), "running"))
            return 1;
    }
    return 0;
}

int kube_pod_done(const json_t *pod)
{
    const json_t *st = json_object_get(pod, "status"), *cs, *c;
    const char *phase = json_string_value(json_object_get(st, "phase"));
    size_t i;
    /* kubelets before 1.27 (kubernetes#108594) write Failed first when they
     * evict a pod, shut the node down or preempt for a critical pod, and
     * stop its containers after, within the grace period: until they report
     * them stopped the pod still holds what it runs on */
    if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
        return !any_running(st, "containerStatuses") && !any_running(st, "initContainerStatuses");
    if (!kube_meta_str(pod, "deletionTimestamp"))
        return 0;
    cs = json_object_get(st, "containerStatuses");
    if (!json_is_array(cs) || json_array_size(cs) == 0)
        return 0; /* kubelet has not reported (it may be starting them) */
    json_array_foreach(cs, i, c) {
        if (!json_is_object(json_object_get(json_object_get(c, "state"), "terminated")))
            return 0;
    }
    /* a sidecar (an init container that keeps running) stops after them */
    return !any_running(st, "initContainerStatuses");
}

int kube_event(struct kube_client *c, const char *kind, const char *ns, const char *name,
               const char *uid, const char *type, const char *reason, const char *message,
               struct gs_err *e)
{
    char now[40], path[600], ename[300];
    struct timespec ts;
    json_t *ev;
    int rc;

    kube_now_micro(now, sizeof now);
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Event names must be unique: the object name plus a time-based suffix. */
    snprintf(ename, sizeof ename, "%.200s.%lx%05lx", name, (long)ts.tv_sec, ts.tv_nsec / 10000);
    char now_s[32];
    snprintf(now_s, sizeof now_s, "%.19sZ", now);
    ev = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s}, s:s, s:s, s:{s:s}, "
                   "s:s, s:s, s:i}",
                   "apiVersion", "v1", "kind", "Event", "metadata", "name", ename, "namespace",
                   ns, "involvedObject", "kind", kind, "namespace", ns, "name", name, "uid",
                   uid ? uid : "", "type", type, "reason", reason, "source",
                   "component", "gpusched", "firstTimestamp", now_s, "lastTimestamp", now_s,
                   "count", 1);
    if (!ev)
        return gs_errf(e, GS_ENOMEM, "cannot build the event");
    json_object_set_new(ev, "message", json_stringn(message, strnlen(message, 1024)));
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/events", ns);
    rc = kube_create(c, path, ev, NULL, e);
    json_decref(ev);
    return rc;
}
