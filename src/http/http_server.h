/*
 * http/http_server.h - the HTTP(S) server every gpusched service sits on.
 *
 * A thin layer over libmicrohttpd: it owns the daemon, gathers a bounded
 * request body, hands the whole request to one handler function, and sends
 * back what the handler filled in. Routing is the handler's job (a table in
 * the service). Bodies larger than max_body are refused with 413 and a JSON
 * error before the handler runs, so no service parses unbounded input.
 *
 * TLS: certificate and key are checked at start (they parse, belong together,
 * the certificate is valid now) and can be reloaded while serving:
 * http_server_reload_tls() compares the files' modification times and, when
 * they changed, gives the new pair to every handshake from then on (gnutls
 * asks for the pair per handshake). A connection keeps the pair it started
 * with, and its next answer closes it, so the client's next request meets
 * the new certificate; the replaced pair is freed once no connection holds
 * it. A bad new pair is refused and the old one kept. Call it from the
 * service's main loop, e.g. every second.
 *
 * Threads: a pool of `threads` workers calls the handler concurrently; the
 * handler must be thread-safe.
 *
 * Waiting without a worker: a handler that cannot answer yet (the
 * extender's /bind waiting for a node) calls http_req_park() and returns
 * without filling the response. The connection is then set aside (no
 * worker held, no timeout) until some thread calls http_wake() with the
 * token, and the same request is handed to the handler again. A wake that
 * comes before the connection is set aside is not lost (the handler runs
 * again at once). Every parked request must be woken exactly once; the
 * server does not stop while one is parked.
 *
 * Ownership: http_server_start() returns a server freed by http_server_stop().
 * resp->body is malloc'd by the handler (or the http_resp_* helpers) and
 * freed by the server, or released through resp->body_free.
 */
#ifndef GPUSCHED_HTTP_SERVER_H
#define GPUSCHED_HTTP_SERVER_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

struct MHD_Connection;

struct http_request {
    const char *method;  /* "GET", "POST", ... */
    const char *path;    /* "/filter", without the query string */
    const char *body;    /* NUL-terminated, may be "" */
    size_t body_len;
    struct MHD_Connection *conn; /* for http_req_header / http_req_arg */
    void *priv;                  /* the server's, for http_req_park */
};

struct http_response {
    int status;               /* 200 unless set */
    const char *content_type; /* static string; "application/json" unless set */
    char *body;               /* malloc'd, freed by the server; NULL = empty */
    size_t body_len;
    /* or, when set, body belongs to body_owner and the server calls
     * body_free(body_owner) once it is sent (a reply shared with a cache) */
    void (*body_free)(void *owner);
    void *body_owner;
};

typedef void (*http_handler)(void *ud, const struct http_request *req,
                             struct http_response *resp);

struct http_server_opts {
    const char *addr;          /* "127.0.0.1", "0.0.0.0", "::" ... */
    int port;                  /* 0 = pick a free port (see http_server_port) */
    const char *tls_cert_file; /* both set: HTTPS; both NULL: plain HTTP */
    const char *tls_key_file;
    size_t max_body;           /* bytes; 0 = 4 MiB */
    unsigned threads;          /* worker threads; 0 = 4 */
    http_handler handler;
    void *ud;
    /* called once when a request that parked ends, answered or not (a
     * client that went away while its request was parked is found when it
     * is woken): what the handler keeps by its token will not be asked for,
     * and the token may come back for another request. NULL: none kept. */
    void (*gone)(void *ud, void *token);
};

struct http_server;

int http_server_start(const struct http_server_opts *opts, struct http_server **out,
                      struct gs_err *e);
int http_server_port(const struct http_server *s);
/* Returns 1 when the TLS files changed and were reloaded, 0 when unchanged
 * (or no TLS), or a negative GS_E* code with *e saying why the old pair is
 * kept. Call it from one thread only. */
int http_server_reload_tls(struct http_server *s, struct gs_err *e);
/* The certificate in the PEM file's public key as curl pins it
 * (CURLOPT_PINNEDPUBLICKEY): "sha256//" and the base64 of the SHA-256 of
 * its DER SubjectPublicKeyInfo, in out. 0 or -GS_E* naming the file. */
int http_tls_pin(const char *cert_file, char *out, size_t cap, struct gs_err *e);
void http_server_stop(struct http_server *s);

/* Splits "HOST:PORT" or "[V6]:PORT" into opts->addr (copied into buf) and
 * opts->port. */
int http_parse_listen(const char *listen, char *buf, size_t cap, int *port, struct gs_err *e);

/* The request's token for http_wake: the same each time the same request
 * is handed to the handler. */
void *http_req_token(const struct http_request *req);
/* Parks the request (see above) when the handler returns. */
void http_req_park(const struct http_request *req);
/* Hands a parked request to the handler again (any thread). */
void http_wake(void *token);

const char *http_req_header(const struct http_request *req, const char *name);
const char *http_req_arg(const struct http_request *req, const char *name);

/* Response helpers: take ownership of nothing the caller still uses. */
void http_resp_json(struct http_response *resp, int status, json_t *obj); /* steals obj */
void http_resp_text(struct http_response *resp, int status, const char *ctype, const char *text);
void http_resp_error(struct http_response *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4))); /* {"error": "..."} */

#endif
