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

/* Longest certificate chain served (leaf and intermediates). */
#define TLS_MAX_CHAIN 8

/* One certificate pair as gnutls serves it. A TLS connection takes a
 * reference in its handshake (tls_pick) and gives it back when it closes,
 * so a reload frees a replaced pair only once no connection holds it. */
struct tls_pair {
    gnutls_pcert_st pcert[TLS_MAX_CHAIN];
    unsigned n;
    gnutls_privkey_t key;
    int refs;              /* connections holding it; under tls_mu */
    struct tls_pair *next; /* older pairs still held */
};

/* A TLS connection's socket context: its server and the pair it took. */
struct tls_conn {
    struct http_server *s;
    struct tls_pair *pair; /* under s->tls_mu */
};

struct http_server {
    struct MHD_Daemon *d;
    /* parked requests (http_req_park), under park_mu */
    pthread_mutex_t park_mu;
    int n_parked;
    struct http_server_opts opts;
    int port;
    struct sockaddr_storage ss;
    unsigned flags;
    /* the pair new handshakes get, then the replaced ones still held */
    pthread_mutex_t tls_mu;
    struct tls_pair *tls;
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
    int did_park;   /* the handler parked it at least once: opts.gone when it ends */
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

/* Whether the connection's handshake took a pair a reload has replaced. */
static int tls_stale(struct http_server *s, struct MHD_Connection *c)
{
    if (!s->opts.tls_cert_file) /* s->tls itself is read under tls_mu */
        return 0;
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct tls_conn *tc = i ? i->socket_context : NULL;
    pthread_mutex_lock(&s->tls_mu);
    int stale = tc && tc->pair && tc->pair != s->tls;
    pthread_mutex_unlock(&s->tls_mu);
    return stale;
}

static enum MHD_Result send_resp(struct http_server *s, struct MHD_Connection *c,
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
    /* the client's next request opens a connection with the new certificate */
    if (tls_stale(s, c))
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(c, (unsigned)(r->status ? r->status : 200), mr);
    MHD_destroy_response(mr);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    struct http_server *s = cls;
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
        if (n / 4 > s->opts.max_body && *end == '\0') {
            /* refused before the body comes: a client announcing gigabytes
             * must not hold the connection while it sends them (the body is
             * not read and the connection closes after the answer, which a
             * client still sending may not see: a body a little too large
             * is read and thrown away, so that its sender reads the 413) */
            ctx->too_big = 1;
            struct http_response resp = {200, NULL, NULL, 0, NULL, NULL};
            http_resp_error(&resp, 413, "request body larger than %zu bytes", s->opts.max_body);
            return send_resp(s, c, &resp);
        }
        if (n > 0 && *end == '\0' && n <= HTTP_PREALLOC && (ctx->buf = malloc(n + 1)))
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
        return send_resp(s, c, &resp);
    }
    struct http_request req = {method, url, ctx->buf ? ctx->buf : "", ctx->len, c, ctx};
    if (ctx->buf)
        ctx->buf[ctx->len] = '\0';
    for (;;) {
        ctx->park = 0;
        s->opts.handler(s->opts.ud, &req, &resp);
        if (!ctx->park)
            return send_resp(s, c, &resp);
        ctx->did_park = 1;
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
    struct http_server *s = cls;
    (void)c, (void)toe;
    if (ctx) {
        if (ctx->did_park && s->opts.gone) /* never while parked: it is woken first */
            s->opts.gone(s->opts.ud, ctx);
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

static void pair_free(struct tls_pair *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < p->n; i++)
        gnutls_pcert_deinit(&p->pcert[i]);
    if (p->key)
        gnutls_privkey_deinit(p->key);
    free(p);
}

/* The checked PEM pair cert/key as gnutls serves it. */
static struct tls_pair *pair_make(const char *cert, const char *key, const char *cert_file,
                                  struct gs_err *e)
{
    gnutls_datum_t c = {(unsigned char *)cert, (unsigned)strlen(cert)};
    gnutls_datum_t k = {(unsigned char *)key, (unsigned)strlen(key)};
    struct tls_pair *p = calloc(1, sizeof *p);
    int rc;

    if (!p || gnutls_privkey_init(&p->key) < 0) {
        free(p);
        gs_errf(e, GS_ENOMEM, "out of memory");
        return NULL;
    }
    p->n = TLS_MAX_CHAIN;
    if ((rc = gnutls_pcert_list_import_x509_raw(p->pcert, &p->n, &c, GNUTLS_X509_FMT_PEM, 0)) <
        0) {
        p->n = 0;
        pair_free(p);
        gs_errf(e, GS_EINVAL, "'%s': cannot serve this chain (%s; at most %d certificates)",
                cert_file, gnutls_strerror(rc), TLS_MAX_CHAIN);
        return NULL;
    }
    if ((rc = gnutls_privkey_import_x509_raw(p->key, &k, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        pair_free(p);
        gs_errf(e, GS_EINVAL, "cannot load the key (%s)", gnutls_strerror(rc));
        return NULL;
    }
    return p;
}

/* Reads and checks the TLS files into a pair to serve. */
static struct tls_pair *tls_load(const struct http_server_opts *o, struct timespec *cm,
                                 struct timespec *km, struct gs_err *e)
{
    char *cert = NULL, *key = NULL;
    struct tls_pair *p = NULL;

    if (file_mtime(o->tls_cert_file, cm) < 0 || file_mtime(o->tls_key_file, km) < 0)
        gs_errf(e, GS_EIO, "cannot read '%s' or '%s': %m", o->tls_cert_file, o->tls_key_file);
    else if ((cert = read_file(o->tls_cert_file, e)) && (key = read_file(o->tls_key_file, e)) &&
             tls_check(cert, key, o->tls_cert_file, o->tls_key_file, e) == 0)
        p = pair_make(cert, key, o->tls_cert_file, e);
    free(cert);
    free(key);
    return p;
}

/* Drops one reference to p; a replaced pair nobody holds is freed.
 * Under s->tls_mu. */
static void pair_put(struct http_server *s, struct tls_pair *p)
{
    if (--p->refs > 0 || p == s->tls)
        return;
    for (struct tls_pair **pp = &s->tls->next; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            pair_free(p);
            return;
        }
}

/* gnutls asks which certificate to present (MHD_OPTION_HTTPS_CERT_CALLBACK):
 * the pair loaded last, held by the connection until it closes.
 * libmicrohttpd sets each TLS session's pointer to its connection. */
static int tls_pick(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                    const gnutls_pk_algorithm_t *algos, int nalgos, gnutls_pcert_st **pcert,
                    unsigned int *n, gnutls_privkey_t *key)
{
    struct MHD_Connection *c = gnutls_session_get_ptr(session);
    const union MHD_ConnectionInfo *i =
        c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    struct tls_conn *tc = i ? i->socket_context : NULL;
    (void)req_ca_dn, (void)nreqs, (void)algos, (void)nalgos;

    if (!tc)
        return -1; /* no context (out of memory): the handshake fails */
    struct http_server *s = tc->s;
    pthread_mutex_lock(&s->tls_mu);
    if (!tc->pair) { /* one pair per connection, should gnutls ask twice */
        tc->pair = s->tls;
        tc->pair->refs++;
    }
    *pcert = tc->pair->pcert;
    *n = tc->pair->n;
    *key = tc->pair->key;
    pthread_mutex_unlock(&s->tls_mu);
    return 0;
}

/* Gives every TLS connection its context, and back its pair at the end. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct http_server *s = cls;
    struct tls_conn *tc = *socket_context;
    (void)c;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        if ((tc = calloc(1, sizeof *tc)))
            tc->s = s;
        *socket_context = tc;
        return;
    }
    if (!tc)
        return;
    if (tc->pair) {
        pthread_mutex_lock(&s->tls_mu);
        pair_put(s, tc->pair);
        pthread_mutex_unlock(&s->tls_mu);
    }
    free(tc);
    *socket_context = NULL;
}

/* Each connection's buffer for reading a request. libmicrohttpd's default
 * (32 KB) takes an extender request of 5,000 node names (70 KB) in five
 * reads, each after its own epoll wake-up; 256 KB takes it in one. */
#define HTTP_CONN_MEMORY ((size_t)256 << 10)
#define HTTP_IDLE_TIMEOUT_S 120 /* seconds a connection may stay silent */

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

    const char *addr = opts->addr ? opts->addr : "127.0.0.1";
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&s->ss;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)opts->port);
        if (inet_pton(AF_INET6, addr, &a6->sin6_addr) != 1)
            goto bad_addr;
        /* the IPv6 wildcard takes IPv4 too (IPV6_V6ONLY off) */
        s->flags |= IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
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
    if (opts->tls_cert_file) {
        if (!(s->tls = tls_load(&s->opts, &s->cert_mtime, &s->key_mtime, e))) {
            free(s);
            return -GS_EINVAL;
        }
        s->flags |= MHD_USE_TLS;
    }
    pthread_mutex_init(&s->park_mu, NULL);
    pthread_mutex_init(&s->tls_mu, NULL);

    struct MHD_OptionItem opts_[] = {
        {MHD_OPTION_SOCK_ADDR, 0, &s->ss},
        {MHD_OPTION_THREAD_POOL_SIZE, s->opts.threads, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_CONN_MEMORY, NULL},
        /* above the 90 s Go's clients (kube-scheduler, the API server's
         * webhook calls) keep an idle connection: a server that closes one
         * first races a POST that Go does not retry */
        {MHD_OPTION_CONNECTION_TIMEOUT, HTTP_IDLE_TIMEOUT_S, NULL},
        {s->tls ? MHD_OPTION_NOTIFY_CONNECTION : MHD_OPTION_END, (intptr_t)on_connection, s},
        {MHD_OPTION_HTTPS_CERT_CALLBACK, 0, (void *)tls_pick},
        {MHD_OPTION_END, 0, NULL},
    };
    s->d = MHD_start_daemon(s->flags, 0, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, opts_,
                            MHD_OPTION_END);
    if (!s->d) {
        pair_free(s->tls);
        pthread_mutex_destroy(&s->tls_mu);
        pthread_mutex_destroy(&s->park_mu);
        free(s);
        return gs_errf(e, GS_EIO, "cannot listen on %s:%d%s (address in use?)", addr,
                       opts->port, opts->tls_cert_file ? " with TLS" : "");
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : opts->port;
    *out = s;
    return 0;

bad_addr:
    free(s);
    return gs_errf(e, GS_EINVAL, "listen address '%s' is not an IP address", addr);
}

int http_server_reload_tls(struct http_server *s, struct gs_err *e)
{
    struct timespec cm, km;
    struct tls_pair *p;

    if (!s->tls)
        return 0;
    if (file_mtime(s->opts.tls_cert_file, &cm) < 0 || file_mtime(s->opts.tls_key_file, &km) < 0)
        return gs_errf(e, GS_EIO, "cannot stat '%s' or '%s': %m; keeping the old certificate",
                       s->opts.tls_cert_file, s->opts.tls_key_file);
    if (cm.tv_sec == s->cert_mtime.tv_sec && cm.tv_nsec == s->cert_mtime.tv_nsec &&
        km.tv_sec == s->key_mtime.tv_sec && km.tv_nsec == s->key_mtime.tv_nsec)
        return 0;
    if (!(p = tls_load(&s->opts, &cm, &km, e))) {
        /* a half-written pair: try again on the next change */
        s->cert_mtime = cm;
        s->key_mtime = km;
        gs_err_prefix(e, "keeping the old certificate");
        return -GS_EINVAL;
    }
    /* new handshakes get p; the connections on the old pair keep it and
     * close after their next answer (send_resp) */
    pthread_mutex_lock(&s->tls_mu);
    struct tls_pair *old = s->tls;
    p->next = old;
    s->tls = p;
    old->refs++; /* pair_put frees it if nobody holds it */
    pair_put(s, old);
    pthread_mutex_unlock(&s->tls_mu);
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
    MHD_stop_daemon(s->d); /* every connection gives its pair back */
    while (s->tls) {
        struct tls_pair *next = s->tls->next;
        pair_free(s->tls);
        s->tls = next;
    }
    pthread_mutex_destroy(&s->tls_mu);
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
