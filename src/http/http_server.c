/* http/http_server.c - see http_server.h. */
#include <arpa/inet.h>
#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "http/http_server.h"

struct conn_ctx;

/* One libmicrohttpd daemon of the server and what it was started with. */
struct srv_daemon {
    struct http_server *s;
    struct MHD_Daemon *d;
    char *cert, *key; /* PEM contents, kept alive for the daemon */
    int retired;      /* a TLS reload replaced it (atomic): answers close their connection */
    time_t retired_at;
};

struct http_server {
    struct srv_daemon *live; /* the one accepting connections */
    /* the one a TLS reload took the listening socket from: it serves its
     * open connections (parked ones included) to the end and is stopped
     * once it has none (retire_old) */
    struct srv_daemon *old;
    /* parked requests (http_req_park), under park_mu */
    pthread_mutex_t park_mu;
    int n_parked;
    struct http_server_opts opts;
    int port;
    struct sockaddr_storage ss;
    unsigned flags;
    struct timespec cert_mtime, key_mtime; /* of the files last loaded */
};

/* Bodies up to this size get their whole buffer when the request starts. */
#define HTTP_PREALLOC (1u << 20)

/* Per-connection state while the body arrives. */
struct conn_ctx {
    char *buf;
    size_t len, cap;
    int too_big;
    struct http_server *s;
    struct MHD_Connection *conn;
    int park;       /* the handler asked to park this request */
    int parked;     /* set aside (suspended); under s->park_mu */
    int woken;      /* woken before it was set aside; under s->park_mu */
};

static char *read_file(const char *path, struct gs_err *e)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (!f) {
        gs_errf(e, GS_EIO, "cannot open '%s': %m", path);
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > (1L << 20) ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        gs_errf(e, GS_EINVAL, "'%s': not a readable PEM file of at most 1 MiB", path);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        gs_errf(e, GS_EIO, "cannot read '%s'", path);
        return NULL;
    }
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static enum MHD_Result send_resp(struct srv_daemon *sd, struct MHD_Connection *c,
                                 struct http_response *r)
{
    struct MHD_Response *mr;
    enum MHD_Result ret;

    if (r->body && r->body_free)
        mr = MHD_create_response_from_buffer_with_free_callback_cls(r->body_len, r->body,
                                                                    r->body_free, r->body_owner);
    else
        mr = MHD_create_response_from_buffer(r->body_len, r->body ? r->body : (char *)"",
                                             r->body ? MHD_RESPMEM_MUST_FREE
                                                     : MHD_RESPMEM_PERSISTENT);
    if (!mr) {
        if (r->body && r->body_free)
            r->body_free(r->body_owner);
        else
            free(r->body);
        return MHD_NO;
    }
    MHD_add_response_header(mr, "Content-Type",
                            r->content_type ? r->content_type : "application/json");
    /* the client's next request opens a connection to the new daemon,
     * with the new certificate */
    if (__atomic_load_n(&sd->retired, __ATOMIC_ACQUIRE))
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(c, (unsigned)(r->status ? r->status : 200), mr);
    MHD_destroy_response(mr);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    struct srv_daemon *sd = cls;
    struct http_server *s = sd->s;
    struct conn_ctx *ctx = *con_cls;
    (void)version;

    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx)
            return MHD_NO;
        ctx->s = s;
        ctx->conn = c;
        *con_cls = ctx;
        /* the body buffer allocated once for the declared length (up to
         * HTTP_PREALLOC: a larger body grows the buffer as it arrives, so a
         * header alone cannot make the server commit memory) */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        char *end;
        unsigned long long n = cl ? strtoull(cl, &end, 10) : 0;
        if (n > 0 && *end == '\0' && n <= s->opts.max_body && n <= HTTP_PREALLOC &&
            (ctx->buf = malloc(n + 1)))
            ctx->cap = n + 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!ctx->too_big) {
            if (ctx->len + *upload_size > s->opts.max_body) {
                ctx->too_big = 1;
            } else {
                if (ctx->len + *upload_size + 1 > ctx->cap) {
                    size_t cap = ctx->cap ? ctx->cap : 4096;
                    while (cap < ctx->len + *upload_size + 1)
                        cap *= 2;
                    char *nb = realloc(ctx->buf, cap);
                    if (!nb)
                        return MHD_NO;
                    ctx->buf = nb;
                    ctx->cap = cap;
                }
                memcpy(ctx->buf + ctx->len, upload, *upload_size);
                ctx->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }

    struct http_response resp = {200, NULL, NULL, 0, NULL, NULL};
    if (ctx->too_big) {
        http_resp_error(&resp, 413, "request body larger than %zu bytes", s->opts.max_body);
        return send_resp(sd, c, &resp);
    }
    struct http_request req = {method, url, ctx->buf ? ctx->buf : "", ctx->len, c, ctx};
    if (ctx->buf)
        ctx->buf[ctx->len] = '\0';
    for (;;) {
        ctx->park = 0;
        s->opts.handler(s->opts.ud, &req, &resp);
        if (!ctx->park)
            return send_resp(sd, c, &resp);
        pthread_mutex_lock(&s->park_mu);
        if (ctx->woken) { /* woken while the handler was returning: run again */
            ctx->woken = 0;
            pthread_mutex_unlock(&s->park_mu);
            continue;
        }
        ctx->parked = 1;
        s->n_parked++;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&s->park_mu);
        return MHD_YES;
    }
}

void *http_req_token(const struct http_request *req) { return req->priv; }

void http_req_park(const struct http_request *req)
{
    struct conn_ctx *ctx = req->priv;
    ctx->park = 1;
}

void http_wake(void *token)
{
    struct conn_ctx *ctx = token;
    struct http_server *s = ctx->s;
    pthread_mutex_lock(&s->park_mu);
    if (ctx->parked) {
        ctx->parked = 0;
        s->n_parked--;
        MHD_resume_connection(ctx->conn);
    } else {
        ctx->woken = 1;
    }
    pthread_mutex_unlock(&s->park_mu);
}

static int parked(struct http_server *s)
{
    pthread_mutex_lock(&s->park_mu);
    int n = s->n_parked;
    pthread_mutex_unlock(&s->park_mu);
    return n;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct conn_ctx *ctx = *con_cls;
    (void)cls, (void)c, (void)toe;
    if (ctx) {
        free(ctx->buf);
        free(ctx);
        *con_cls = NULL;
    }
}

int http_tls_pin(const char *cert_file, char *out, size_t cap, struct gs_err *e)
{
    gnutls_x509_crt_t crt = NULL;
    gnutls_pubkey_t pub = NULL;
    gnutls_datum_t der = {NULL, 0}, b64 = {NULL, 0};
    unsigned char sum[32];
    int rc;
    char *pem = read_file(cert_file, e);
    if (!pem)
        return -GS_EIO;
    gnutls_datum_t c = {(unsigned char *)pem, (unsigned)strlen(pem)};
    if (gnutls_x509_crt_init(&crt) < 0 || gnutls_pubkey_init(&pub) < 0) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
    } else if ((rc = gnutls_x509_crt_import(crt, &c, GNUTLS_X509_FMT_PEM)) < 0 ||
               (rc = gnutls_pubkey_import_x509(pub, crt, 0)) < 0 ||
               (rc = gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_DER, &der)) < 0 ||
               (rc = gnutls_hash_fast(GNUTLS_DIG_SHA256, der.data, der.size, sum)) < 0 ||
               (rc = gnutls_base64_encode2(&(gnutls_datum_t){sum, sizeof sum}, &b64)) < 0) {
        rc = gs_errf(e, GS_EINVAL, "'%s': no public key to pin (%s)", cert_file,
                     gnutls_strerror(rc));
    } else if (snprintf(out, cap, "sha256//%.*s", (int)b64.size, (const char *)b64.data) >=
               (int)cap) {
        rc = gs_errf(e, GS_EINVAL, "'%s': pin too long", cert_file);
    } else {
        rc = 0;
    }
    gnutls_free(der.data);
    gnutls_free(b64.data);
    if (pub)
        gnutls_pubkey_deinit(pub);
    if (crt)
        gnutls_x509_crt_deinit(crt);
    free(pem);
    return rc;
}

/* Checks a PEM certificate and key before a daemon gets them: both parse,
 * they belong together, and the certificate is valid now. */
static int tls_check(const char *cert, const char *key, const char *cert_file,
                     const char *key_file, struct gs_err *e)
{
    gnutls_certificate_credentials_t cred;
    gnutls_x509_crt_t crt;
    gnutls_datum_t c = {(unsigned char *)cert, (unsigned)strlen(cert)};
    gnutls_datum_t k = {(unsigned char *)key, (unsigned)strlen(key)};
    time_t now = time(NULL), t;
    int rc;

    if (gnutls_x509_crt_init(&crt) < 0)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    rc = gnutls_x509_crt_import(crt, &c, GNUTLS_X509_FMT_PEM);
    if (rc < 0) {
        gnutls_x509_crt_deinit(crt);
        return gs_errf(e, GS_EINVAL, "'%s': not a PEM certificate (%s)", cert_file,
                       gnutls_strerror(rc));
    }
    char when[32];
    if ((t = gnutls_x509_crt_get_expiration_time(crt)) != (time_t)-1 && t < now) {
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &(struct tm){0}));
        gnutls_x509_crt_deinit(crt);
        return gs_errf(e, GS_EINVAL, "'%s': certificate expired at %s", cert_file, when);
    }
    if ((t = gnutls_x509_crt_get_activation_time(crt)) != (time_t)-1 && t > now + 300) {
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &(struct tm){0}));
        gnutls_x509_crt_deinit(crt);
        return gs_errf(e, GS_EINVAL, "'%s': certificate not valid before %s", cert_file, when);
    }
    gnutls_x509_crt_deinit(crt);
    if (gnutls_certificate_allocate_credentials(&cred) < 0)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    rc = gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
    gnutls_certificate_free_credentials(cred);
    if (rc < 0)
        return gs_errf(e, GS_EINVAL, "'%s' and '%s': not a matching certificate and key (%s)",
                       cert_file, key_file, gnutls_strerror(rc));
    return 0;
}

static int file_mtime(const char *path, struct timespec *out)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    *out = st.st_mtim;
    return 0;
}

/* Reads and checks the TLS files into *cert / *key (malloc'd). */
static int tls_load(const struct http_server_opts *o, char **cert, char **key,
                    struct timespec *cm, struct timespec *km, struct gs_err *e)
{
    *cert = *key = NULL;
    if (file_mtime(o->tls_cert_file, cm) < 0 || file_mtime(o->tls_key_file, km) < 0)
        return gs_errf(e, GS_EIO, "cannot read '%s' or '%s': %m", o->tls_cert_file,
                       o->tls_key_file);
    if (!(*cert = read_file(o->tls_cert_file, e)) || !(*key = read_file(o->tls_key_file, e)) ||
        tls_check(*cert, *key, o->tls_cert_file, o->tls_key_file, e) < 0) {
        free(*cert);
        free(*key);
        *cert = *key = NULL;
        return -GS_EINVAL;
    }
    return 0;
}

/* Each connection's buffer for reading a request. libmicrohttpd's default
 * (32 KB) takes an extender request of 5,000 node names (70 KB) in five
 * reads, each after its own epoll wake-up; 256 KB takes it in one. */
#define HTTP_CONN_MEMORY ((size_t)256 << 10)

/* Starts a daemon with the pair cert/key (NULL: plain HTTP; taken over
 * either way) on s->ss, or on an inherited listening socket. */
static struct srv_daemon *daemon_start(struct http_server *s, char *cert, char *key,
                                       int listen_fd)
{
    struct srv_daemon *sd = calloc(1, sizeof *sd);
    if (!sd) {
        free(cert);
        free(key);
        return NULL;
    }
    sd->s = s;
    sd->cert = cert;
    sd->key = key;
    struct MHD_OptionItem opts[] = {
        {listen_fd >= 0 ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_SOCK_ADDR,
         listen_fd >= 0 ? listen_fd : 0, listen_fd >= 0 ? NULL : &s->ss},
        {MHD_OPTION_THREAD_POOL_SIZE, s->opts.threads, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, sd},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_CONN_MEMORY, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, 30, NULL},
        {cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, key},
        {MHD_OPTION_END, 0, NULL},
    };
    sd->d = MHD_start_daemon(s->flags, 0, NULL, NULL, on_request, sd, MHD_OPTION_ARRAY, opts,
                             MHD_OPTION_END);
    if (!sd->d) {
        free(cert);
        free(key);
        free(sd);
        return NULL;
    }
    return sd;
}

static void daemon_stop(struct srv_daemon *sd)
{
    if (!sd)
        return;
    MHD_stop_daemon(sd->d);
    free(sd->cert);
    free(sd->key);
    free(sd);
}

int http_parse_listen(const char *listen, char *buf, size_t cap, int *port, struct gs_err *e)
{
    const char *colon = strrchr(listen, ':');
    const char *host = listen;
    size_t hlen;
    char *end;
    long p;

    if (!colon)
        return gs_errf(e, GS_EINVAL, "listen address '%s': expected HOST:PORT", listen);
    hlen = (size_t)(colon - listen);
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
        host++;
        hlen -= 2;
    }
    p = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || p < 0 || p > 65535)
        return gs_errf(e, GS_EINVAL, "listen address '%s': bad port", listen);
    if (hlen == 0)
        host = "0.0.0.0", hlen = 7;
    if (hlen >= cap)
        return gs_errf(e, GS_EINVAL, "listen address '%s': host too long", listen);
    memcpy(buf, host, hlen);
    buf[hlen] = '\0';
    *port = (int)p;
    return 0;
}

int http_server_start(const struct http_server_opts *opts, struct http_server **out,
                      struct gs_err *e)
{
    struct http_server *s = calloc(1, sizeof *s);

    if (!s)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    s->opts = *opts;
    if (!s->opts.max_body)
        s->opts.max_body = 4u << 20;
    if (!s->opts.threads)
        s->opts.threads = 4;
    s->flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_USE_ITC |
               MHD_ALLOW_SUSPEND_RESUME;
    pthread_mutex_init(&s->park_mu, NULL);

    const char *addr = opts->addr ? opts->addr : "127.0.0.1";
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&s->ss;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)opts->port);
        if (inet_pton(AF_INET6, addr, &a6->sin6_addr) != 1)
            goto bad_addr;
        s->flags |= MHD_USE_IPv6;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&s->ss;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)opts->port);
        if (strcmp(addr, "localhost") == 0)
            addr = "127.0.0.1";
        if (inet_pton(AF_INET, addr, &a4->sin_addr) != 1)
            goto bad_addr;
    }

    if ((opts->tls_cert_file == NULL) != (opts->tls_key_file == NULL)) {
        free(s);
        return gs_errf(e, GS_EINVAL, "TLS needs both a certificate and a key file");
    }
    char *cert = NULL, *key = NULL;
    if (opts->tls_cert_file) {
        if (tls_load(&s->opts, &cert, &key, &s->cert_mtime, &s->key_mtime, e) < 0) {
            free(s);
            return -GS_EINVAL;
        }
        /* a reload quiesces the daemon (MHD_quiesce_daemon), which on an
         * epoll daemon with worker threads races the workers inside
         * libmicrohttpd 0.9.75 and can abort the process ("Failed to remove
         * listen FD from epoll set": the workers drop the listening socket
         * from their epoll set too, unguarded). poll() has no such set: the
         * workers are told through their ITC (tests/unit/test_http.c). */
        s->flags = (s->flags & ~(unsigned)MHD_USE_EPOLL) | MHD_USE_POLL | MHD_USE_TLS;
    }

    s->live = daemon_start(s, cert, key, -1);
    if (!s->live) {
        pthread_mutex_destroy(&s->park_mu);
        free(s);
        return gs_errf(e, GS_EIO, "cannot listen on %s:%d%s (address in use?)", addr,
                       opts->port, opts->tls_cert_file ? " with TLS" : "");
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->live->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : opts->port;
    *out = s;
    return 0;

bad_addr:
    free(s);
    return gs_errf(e, GS_EINVAL, "listen address '%s' is not an IP address", addr);
}

/* How long a replaced daemon may keep connections (a client that never
 * sends again, a request parked that long) before it is stopped anyway. */
#define OLD_DAEMON_S 120

/* Stops the daemon a reload replaced once it has no connections left, or
 * after OLD_DAEMON_S with no request parked. 1 when none is left. */
static int retire_old(struct http_server *s)
{
    if (!s->old)
        return 1;
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(s->old->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    if (i && i->num_connections > 0 &&
        (time(NULL) - s->old->retired_at < OLD_DAEMON_S || parked(s)))
        return 0;
    daemon_stop(s->old);
    s->old = NULL;
    return 1;
}

int http_server_reload_tls(struct http_server *s, struct gs_err *e)
{
    struct timespec cm, km;
    char *cert, *key;
    MHD_socket fd;

    if (!s->opts.tls_cert_file)
        return 0;
    if (!retire_old(s))
        return 0; /* one replaced daemon at a time: try again on the next call */
    if (file_mtime(s->opts.tls_cert_file, &cm) < 0 || file_mtime(s->opts.tls_key_file, &km) < 0)
        return gs_errf(e, GS_EIO, "cannot stat '%s' or '%s': %m; keeping the old certificate",
                       s->opts.tls_cert_file, s->opts.tls_key_file);
    if (cm.tv_sec == s->cert_mtime.tv_sec && cm.tv_nsec == s->cert_mtime.tv_nsec &&
        km.tv_sec == s->key_mtime.tv_sec && km.tv_nsec == s->key_mtime.tv_nsec)
        return 0;
    if (tls_load(&s->opts, &cert, &key, &cm, &km, e) < 0) {
        /* a half-written pair: try again on the next change */
        s->cert_mtime = cm;
        s->key_mtime = km;
        gs_err_prefix(e, "keeping the old certificate");
        return -GS_EINVAL;
    }
    /* hand the listening socket to a daemon with the new pair; the old one
     * serves its open connections to the end (retire_old) */
    fd = MHD_quiesce_daemon(s->live->d);
    if (fd == MHD_INVALID_SOCKET) {
        free(cert);
        free(key);
        return gs_errf(e, GS_EIO, "cannot take over the listening socket");
    }
    struct srv_daemon *fresh = daemon_start(s, cert, key, fd);
    int failed = !fresh;
    if (failed) { /* the old daemon no longer accepts: one with the old pair */
        char *c = strdup(s->live->cert), *k = strdup(s->live->key);
        if (c && k)
            fresh = daemon_start(s, c, k, fd);
        else
            free(c), free(k);
        if (!fresh)
            return gs_errf(e, GS_EIO, "cannot serve TLS on the listening socket again");
    }
    s->old = s->live;
    __atomic_store_n(&s->old->retired, 1, __ATOMIC_RELEASE);
    s->old->retired_at = time(NULL);
    s->live = fresh;
    if (failed)
        return gs_errf(e, GS_EIO, "cannot start TLS with the new certificate; keeping the "
                                  "old one");
    s->cert_mtime = cm;
    s->key_mtime = km;
    return 1;
}

int http_server_port(const struct http_server *s) { return s->port; }

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    /* a parked request is woken by its owner (who stops first); give
     * stragglers a moment, as stopping a daemon with one is undefined */
    for (int i = 0; i < 200 && parked(s); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    daemon_stop(s->live);
    daemon_stop(s->old);
    pthread_mutex_destroy(&s->park_mu);
    free(s);
}

const char *http_req_header(const struct http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *http_req_arg(const struct http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

void http_resp_json(struct http_response *resp, int status, json_t *obj)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    resp->status = status;
    resp->content_type = "application/json";
    if (!s) {
        resp->status = 500;
        s = strdup("{\"error\":\"cannot encode the response\"}");
    }
    resp->body = s;
    resp->body_len = s ? strlen(s) : 0;
}

void http_resp_text(struct http_response *resp, int status, const char *ctype, const char *text)
{
    resp->status = status;
    resp->content_type = ctype;
    resp->body = strdup(text);
    resp->body_len = resp->body ? strlen(resp->body) : 0;
}

void http_resp_error(struct http_response *resp, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    http_resp_json(resp, status, json_pack("{s:s}", "error", msg));
    resp->status = status;
}
