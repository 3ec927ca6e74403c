/*
 * tests/unit/test_http.c - the HTTP(S) server under certificate reloads.
 *
 * A reload hands the listening socket to a new daemon (MHD_quiesce_daemon).
 * On an epoll daemon with worker threads libmicrohttpd 0.9.75 races its own
 * workers there and can abort the process ("Failed to remove listen FD from
 * epoll set"): an extender died that way in a blackbox run. Here clients
 * keep requests going while the certificate is reloaded hundreds of times;
 * the process must live and every request be answered.
 */
#include <curl/curl.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        long code = 0;
        if (curl_easy_perform(h) == CURLE_OK &&
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200)
            c->answered++;
        else
            c->failed++;
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* Gives both files a new modification time, as a rotation does. */
static void touch(const char *cert, const char *key, long k)
{
    struct timespec ts[2] = {{1700000000 + k, 0}, {1700000000 + k, 0}};
    utimensat(AT_FDCWD, cert, ts, 0);
    utimensat(AT_FDCWD, key, ts, 0);
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
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-days 2 -subj /CN=127.0.0.1 -keyout %s -out %s >/dev/null 2>&1",
             key, cert);
    if (system(cmd) != 0) {
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
    for (long k = 1; reloads < 300; k++) {
        touch(cert, key, k);
        int rc = http_server_reload_tls(s, &e);
        ASSERT_TRUE(rc >= 0);
        reloads += rc == 1;
        nanosleep(&(struct timespec){0, 200 * 1000}, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 20) /* old daemons kept their clients too long */
            break;
    }
    long answered = 0, failed = 0;
    for (int i = 0; i < 3; i++) {
        __atomic_store_n(&cl[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(cl[i].t, NULL);
        answered += cl[i].answered;
        failed += cl[i].failed;
    }
    http_server_stop(s);
    printf("test_reloads_under_load: %d reloads, %ld requests answered, %ld failed\n", reloads,
           answered, failed);
    ASSERT_TRUE(reloads >= 100);
    ASSERT_TRUE(answered > reloads);
    ASSERT_EQ(failed, 0);
    (void)system(cmd);
}

int test_http(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_reloads_under_load();
    return 0;
}
