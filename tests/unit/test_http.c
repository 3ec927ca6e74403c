/*
 * tests/unit/test_http.c - the HTTP(S) server under certificate reloads.
 *
 * A reload swaps the pair that new TLS handshakes get; connections keep the
 * pair they started with and close after their next answer. Here clients
 * keep requests going while the certificate is reloaded hundreds of times
 * (every request must be answered; an earlier design that handed the
 * listening socket to a new daemon lost one request in a few thousand under
 * load), and a rotation to another key is followed connection by
 * connection.
 */
#include <curl/curl.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http/http_server.h"
#include "test.h"

static void ok_handler(void *ud, const struct http_request *req, struct http_response *resp)
{
    (void)ud;
    (void)req;
    http_resp_text(resp, 200, "text/plain", "ok");
}

struct client {
    int port, stop;
    long answered, failed;
    char why[CURL_ERROR_SIZE + 64]; /* the first failure */
    pthread_t t;
};

static size_t sink(char *p, size_t n, size_t m, void *ud)
{
    (void)p;
    (void)ud;
    return n * m;
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    char url[64];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/", c->port);
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    char err[CURL_ERROR_SIZE];
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        long code = 0;
        err[0] = '\0';
        CURLcode rc = curl_easy_perform(h);
        if (rc == CURLE_OK &&
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200) {
            __atomic_add_fetch(&c->answered, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (!c->failed++)
            snprintf(c->why, sizeof c->why, "curl %d (%s), status %ld, after %ld answered",
                     (int)rc, err[0] ? err : curl_easy_strerror(rc), code,
                     __atomic_load_n(&c->answered, __ATOMIC_RELAXED));
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* A fresh self-signed pair in cert/key; 0 when openssl could not make one. */
static int make_pair(const char *cert, const char *key)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-days 2 -subj /CN=127.0.0.1 -keyout %s -out %s >/dev/null 2>&1",
             key, cert);
    return system(cmd) == 0;
}

/* Gives both files a new modification time, as a rotation does. */
static void touch(const char *cert, const char *key, long k)
{
    struct timespec ts[2] = {{1700000000 + k, 0}, {1700000000 + k, 0}};
    utimensat(AT_FDCWD, cert, ts, 0);
    utimensat(AT_FDCWD, key, ts, 0);
}

static long answered_so_far(struct client *cl, int n)
{
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += __atomic_load_n(&cl[i].answered, __ATOMIC_RELAXED);
    return sum;
}

static void test_reloads_under_load(void)
{
    char dir[] = "/tmp/gs-http-XXXXXX", cert[64], key[64], cmd[512];
    if (!mkdtemp(dir)) {
        ASSERT_TRUE(0);
        return;
    }
    snprintf(cert, sizeof cert, "%s/tls.crt", dir);
    snprintf(key, sizeof key, "%s/tls.key", dir);
    if (!make_pair(cert, key)) {
        printf("SKIP: test_reloads_under_load: openssl could not make a certificate\n");
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        (void)system(cmd);
        return;
    }
    struct gs_err e = GS_ERR_INIT;
    struct http_server *s = NULL;
    struct http_server_opts o = {.addr = "127.0.0.1", .tls_cert_file = cert,
                                 .tls_key_file = key, .threads = 4, .handler = ok_handler};
    ASSERT_EQ(http_server_start(&o, &s, &e), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!s) {
        (void)system(cmd);
        return;
    }
    struct client cl[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        cl[i].port = http_server_port(s);
        pthread_create(&cl[i].t, NULL, client_main, &cl[i]);
    }
    int reloads = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* 300 reloads or more, until the clients have had 1,000 answers */
    for (long k = 1; reloads < 300 || answered_so_far(cl, 3) < 1000; k++) {
        touch(cert, key, k);
        int rc = http_server_reload_tls(s, &e);
        ASSERT_TRUE(rc >= 0);
        reloads += rc == 1;
        nanosleep(&(struct timespec){0, 200 * 1000}, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 30) /* requests stall */
            break;
    }
    long answered = 0, failed = 0;
    for (int i = 0; i < 3; i++) {
        __atomic_store_n(&cl[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(cl[i].t, NULL);
        answered += cl[i].answered;
        failed += cl[i].failed;
        if (cl[i].failed)
            printf("test_reloads_under_load: client %d: %ld failed, first: %s\n", i,
                   cl[i].failed, cl[i].why);
    }
    http_server_stop(s);
    printf("test_reloads_under_load: %d reloads, %ld requests answered, %ld failed\n", reloads,
           answered, failed);
    ASSERT_TRUE(reloads >= 300);
    ASSERT_TRUE(answered >= 1000);
    ASSERT_EQ(failed, 0);
    (void)system(cmd);
}

/* Counts "Connection: close" among an answer's headers. */
static size_t on_header(char *p, size_t n, size_t m, void *ud)
{
    if (n * m >= 17 && strncasecmp(p, "Connection: close", 17) == 0)
        (*(int *)ud)++;
    return n * m;
}

/* One GET on h (a kept handle: curl reuses its connection). Returns the
 * curl code; *fresh: whether it opened a connection, *closing: whether the
 * answer said it closes. */
static CURLcode get(CURL *h, const char *pin, int *fresh, int *closing)
{
    long conns = 0;
    *closing = 0;
    curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, pin);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, closing);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &conns);
    *fresh = conns > 0;
    return rc;
}

/* A rotation to another key, connection by connection: a connection made
 * before it keeps its pair for the answer under way, which closes it; the
 * client's next request, and every new client, meets the new key. A broken
 * pair afterwards changes nothing. */
static void test_rotation(void)
{
    char dir[] = "/tmp/gs-http-XXXXXX", cert[64], key[64], cert2[64], key2[64], cmd[512];
    char pin1[128], pin2[128], url[64];
    struct gs_err e = GS_ERR_INIT;
    struct http_server *s = NULL;
    int fresh, closing;

    if (!mkdtemp(dir)) {
        ASSERT_TRUE(0);
        return;
    }
    snprintf(cert, sizeof cert, "%s/tls.crt", dir);
    snprintf(key, sizeof key, "%s/tls.key", dir);
    snprintf(cert2, sizeof cert2, "%s/new.crt", dir);
    snprintf(key2, sizeof key2, "%s/new.key", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!make_pair(cert, key) || !make_pair(cert2, key2)) {
        printf("SKIP: test_rotation: openssl could not make a certificate\n");
        (void)system(cmd);
        return;
    }
    ASSERT_EQ(http_tls_pin(cert, pin1, sizeof pin1, &e), 0);
    ASSERT_EQ(http_tls_pin(cert2, pin2, sizeof pin2, &e), 0);
    struct http_server_opts o = {.addr = "127.0.0.1", .tls_cert_file = cert,
                                 .tls_key_file = key, .threads = 2, .handler = ok_handler};
    ASSERT_EQ(http_server_start(&o, &s, &e), 0);
    if (!s) {
        (void)system(cmd);
        return;
    }
    snprintf(url, sizeof url, "https://127.0.0.1:%d/", http_server_port(s));
    CURL *old = curl_easy_init(), *late = curl_easy_init();
    CURL *hs[] = {old, late};
    for (int i = 0; i < 2; i++) {
        curl_easy_setopt(hs[i], CURLOPT_URL, url);
        curl_easy_setopt(hs[i], CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(hs[i], CURLOPT_SSL_VERIFYHOST, 0L);
        curl_easy_setopt(hs[i], CURLOPT_TIMEOUT, 10L);
        curl_easy_setopt(hs[i], CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(hs[i], CURLOPT_WRITEFUNCTION, sink);
    }
    ASSERT_EQ(get(old, pin1, &fresh, &closing), CURLE_OK);
    ASSERT_TRUE(fresh && !closing);
    ASSERT_EQ(get(old, pin1, &fresh, &closing), CURLE_OK); /* kept alive */
    ASSERT_TRUE(!fresh && !closing);

    ASSERT_EQ(rename(cert2, cert), 0);
    ASSERT_EQ(rename(key2, key), 0);
    touch(cert, key, 1);
    ASSERT_EQ(http_server_reload_tls(s, &e), 1);
    ASSERT_EQ(http_server_reload_tls(s, &e), 0); /* unchanged */

    /* the kept connection: its answer closes it; then a new one, new key */
    ASSERT_EQ(get(old, pin1, &fresh, &closing), CURLE_OK);
    ASSERT_TRUE(!fresh && closing == 1);
    ASSERT_EQ(get(old, pin2, &fresh, &closing), CURLE_OK);
    ASSERT_TRUE(fresh && !closing);
    ASSERT_EQ(get(late, pin1, &fresh, &closing), CURLE_SSL_PINNEDPUBKEYNOTMATCH);
    ASSERT_EQ(get(late, pin2, &fresh, &closing), CURLE_OK);

    /* a key that does not parse: refused, the pair served stays */
    FILE *f = fopen(key, "w");
    ASSERT_TRUE(f != NULL);
    if (f) {
        fputs("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", f);
        fclose(f);
    }
    touch(cert, key, 2);
    ASSERT_TRUE(http_server_reload_tls(s, &e) < 0);
    ASSERT_TRUE(strstr(e.msg, "keeping the old certificate") != NULL);
    ASSERT_EQ(get(late, pin2, &fresh, &closing), CURLE_OK);
    ASSERT_TRUE(!fresh && !closing);

    curl_easy_cleanup(old);
    curl_easy_cleanup(late);
    http_server_stop(s);
    (void)system(cmd);
}

/* /park parks a request the first time its token is seen, and answers
 * when run again; anything else is answered at once. */
static void *parked_tok;
static void *gone_tok;
static int gone_count;
static pthread_mutex_t gone_mu = PTHREAD_MUTEX_INITIALIZER;

static void park_handler(void *ud, const struct http_request *req, struct http_response *resp)
{
    (void)ud;
    void *tok = http_req_token(req);
    pthread_mutex_lock(&gone_mu);
    int again = tok == parked_tok;
    if (strcmp(req->path, "/park") == 0 && !again)
        parked_tok = tok;
    else if (again)
        parked_tok = NULL;
    pthread_mutex_unlock(&gone_mu);
    if (strcmp(req->path, "/park") == 0 && !again)
        http_req_park(req);
    else
        http_resp_text(resp, 200, "text/plain", again ? "again" : "ok");
}

static void on_gone(void *ud, void *tok)
{
    (void)ud;
    pthread_mutex_lock(&gone_mu);
    gone_tok = tok;
    gone_count++;
    pthread_mutex_unlock(&gone_mu);
}

static int gone_seen(void)
{
    pthread_mutex_lock(&gone_mu);
    int n = gone_count;
    pthread_mutex_unlock(&gone_mu);
    return n;
}

static void *parked_now(void)
{
    pthread_mutex_lock(&gone_mu);
    void *t = parked_tok;
    pthread_mutex_unlock(&gone_mu);
    return t;
}

static long get_at(const char *host, int port, const char *path, long timeout_ms, CURLcode *rc)
{
    char url[96];
    long code = 0;
    snprintf(url, sizeof url, "http://%s:%d%s", host, port, path);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    *rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return code;
}

static long get_path(int port, const char *path, long timeout_ms, CURLcode *rc)
{
    return get_at("127.0.0.1", port, path, timeout_ms, rc);
}

struct waiter {
    int port;
    long code;
    CURLcode rc;
};

static void *get_parked(void *arg)
{
    struct waiter *w = arg;
    w->code = get_path(w->port, "/park", 10000, &w->rc);
    return NULL;
}

/* opts.gone: once for each request that parked, when it ends, answered or
 * its client gone while it was parked (found when woken); never for one that
 * did not park. What a handler keeps by token goes then (ext/server.c): the
 * token may come back for another request. */
static void test_gone(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct http_server *s = NULL;
    CURLcode rc;
    struct http_server_opts o = {.addr = "127.0.0.1", .threads = 1, .handler = park_handler,
                                 .gone = on_gone};
    ASSERT_EQ(http_server_start(&o, &s, &e), 0);
    if (!s)
        return;
    int port = http_server_port(s);
    ASSERT_EQ(get_path(port, "/plain", 5000, &rc), 200);
    ASSERT_EQ(gone_seen(), 0);
    /* the client gives up while its request is parked */
    get_path(port, "/park", 300, &rc);
    ASSERT_EQ(rc, CURLE_OPERATION_TIMEDOUT);
    void *tok = parked_now();
    ASSERT_TRUE(tok != NULL);
    ASSERT_EQ(gone_seen(), 0); /* parked: not ended until woken */
    http_wake(tok);
    for (int i = 0; i < 500 && gone_seen() < 1; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    ASSERT_EQ(gone_seen(), 1);
    pthread_mutex_lock(&gone_mu);
    ASSERT_TRUE(gone_tok == tok);
    parked_tok = NULL;
    pthread_mutex_unlock(&gone_mu);
    /* parked, woken and answered */
    struct waiter w = {port, 0, CURLE_OK};
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, get_parked, &w), 0);
    for (int i = 0; i < 500 && !(tok = parked_now()); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    ASSERT_TRUE(tok != NULL);
    http_wake(tok);
    pthread_join(t, NULL);
    ASSERT_EQ(w.rc, CURLE_OK);
    ASSERT_EQ(w.code, 200);
    for (int i = 0; i < 500 && gone_seen() < 2; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    ASSERT_EQ(gone_seen(), 2);
    ASSERT_EQ(get_path(port, "/plain", 5000, &rc), 200);
    ASSERT_EQ(gone_seen(), 2);
    http_server_stop(s);
}

/* "::" (listen [::]:PORT, an IPv6 cluster) takes IPv4 connections too: one
 * manifest for single- and dual-stack clusters. */
static void test_dual_stack(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct http_server *s = NULL;
    CURLcode rc;
    struct http_server_opts o = {.addr = "::", .threads = 1, .handler = park_handler};
    if (http_server_start(&o, &s, &e) < 0) {
        printf("SKIP: test_dual_stack: no IPv6 here (%s)\n", e.msg);
        return;
    }
    int port = http_server_port(s);
    long code = get_at("[::1]", port, "/plain", 5000, &rc);
    if (rc == CURLE_COULDNT_CONNECT) { /* IPv6 off by sysctl: :: binds, ::1 is not there */
        printf("SKIP: test_dual_stack: [::1] cannot be reached here\n");
        http_server_stop(s);
        return;
    }
    ASSERT_EQ(code, 200);
    ASSERT_EQ(get_at("127.0.0.1", port, "/plain", 5000, &rc), 200);
    http_server_stop(s);
}

int test_http(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_dual_stack();
    test_gone();
    test_reloads_under_load();
    test_rotation();
    return 0;
}
