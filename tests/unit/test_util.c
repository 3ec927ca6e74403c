/* Unit tests for util/: errors, flags, the growable buffer, the stoppable worker. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "util/err.h"
#include "util/opt.h"
#include "util/buf.h"
#include "util/worker.h"
#include "http/http_server.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct napper {
    struct gs_worker wk;
    atomic_int flag, rounds;
};

/* Sleeps 30 s a round: only a wake flag or a stop can end a round early. */
static void *napper_main(void *arg)
{
    struct napper *n = arg;
    while (!gs_worker_sleep(&n->wk, 30.0, &n->flag)) {
        atomic_store(&n->flag, 0);
        atomic_fetch_add(&n->rounds, 1);
    }
    return NULL;
}

static int worker_tests(void)
{
    struct napper n = {0};
    double t0 = now_s();
    ASSERT_EQ(gs_worker_start(&n.wk, napper_main, &n), 0);
    ASSERT_EQ(gs_worker_stopping(&n.wk), 0);
    atomic_store(&n.flag, 1);
    gs_worker_wake(&n.wk);
    for (int i = 0; i < 2000 && atomic_load(&n.rounds) == 0; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    ASSERT_EQ(atomic_load(&n.rounds), 1); /* the flag ended one round, not the timeout */
    gs_worker_stop(&n.wk);                 /* wakes the 30 s sleep at once */
    ASSERT_TRUE(now_s() - t0 < 5.0);
    ASSERT_EQ(atomic_load(&n.rounds), 1);
    return 0;
}

static int buf_tests(void)
{
    struct gs_buf b = {0};
    gs_buf_str(&b, "ab");
    gs_buf_put(&b, "cdef", 2);
    ASSERT_STREQ(b.buf, "abcd");
    ASSERT_EQ(b.len, 4);
    for (int i = 0; i < 2000; i++) /* grows past the first 4096 bytes */
        gs_buf_printf(&b, "%04d", i);
    ASSERT_EQ(b.len, 4 + 8000);
    ASSERT_TRUE(memcmp(b.buf + b.len - 8, "19981999", 8) == 0 && b.buf[b.len] == '\0');
    gs_buf_free(&b);
    ASSERT_TRUE(b.buf == NULL && b.len == 0);
    gs_buf_json_str(&b, "a\"b\\c\n\x01z");
    ASSERT_STREQ(b.buf, "\"a\\\"b\\\\c\\u000a\\u0001z\"");
    gs_buf_free(&b);
    gs_buf_json_str(&b, "");
    ASSERT_STREQ(b.buf, "\"\"");
    gs_buf_free(&b);
    /* bounded file reads: whole, too big, missing; a failure leaves b as it was */
    char path[] = "/tmp/gs-buf-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    for (int i = 0; i < 10000; i++) /* 70,000 bytes: more than one 64 KiB read */
        ASSERT_EQ(write(fd, "line-x\n", 7), 7);
    close(fd);
    struct gs_err e = GS_ERR_INIT;
    gs_buf_str(&b, "head:");
    ASSERT_EQ(gs_buf_read_file(&b, path, 70000, &e), 0);
    ASSERT_EQ(b.len, 5 + 70000);
    ASSERT_TRUE(memcmp(b.buf, "head:line-x\n", 12) == 0 && b.buf[b.len] == '\0');
    ASSERT_EQ(gs_buf_read_file(&b, path, 69999, &e), -GS_ETOOBIG);
    ASSERT_CONTAINS(e.msg, "larger than 69999 bytes");
    ASSERT_EQ(b.len, 5 + 70000);
    unlink(path);
    ASSERT_EQ(gs_buf_read_file(&b, path, 100, &e), -GS_EIO);
    ASSERT_CONTAINS(e.msg, path);
    ASSERT_EQ(b.len, 5 + 70000);
    gs_buf_free(&b);
    b.oom = 1; /* after a failed allocation appends do nothing */
    gs_buf_str(&b, "x");
    ASSERT_TRUE(b.buf == NULL && b.len == 0);
    return 0;
}

int test_util(void)
{
    if (worker_tests() || buf_tests())
        return 1;
    struct gs_err e = GS_ERR_INIT;
    ASSERT_EQ(gs_errf(&e, GS_EINVAL, "field %s", "x"), -GS_EINVAL);
    ASSERT_STREQ(e.msg, "field x");
    gs_err_prefix(&e, "file.csv:%d", 3);
    ASSERT_STREQ(e.msg, "file.csv:3: field x");
    ASSERT_STREQ(gs_err_name(-GS_ENOFIT), "ENOFIT");

    const char *s = NULL;
    long n = 5;
    int b = 0;
    const struct opt opts[] = {
        OPT_STR("nodes", &s, "FILE", "nodes"),
        OPT_INT("count", &n, "N", "count", 1, 10),
        OPT_BOOL("verbose", &b, "talk"),
        OPT_END(),
    };
    char a0[] = "pos1", a1[] = "--nodes=x.csv", a2[] = "--count", a3[] = "7",
         a4[] = "--verbose", a5[] = "pos2";
    char *argv[] = {a0, a1, a2, a3, a4, a5};
    int npos = 0;
    ASSERT_EQ(opt_parse(6, argv, opts, &npos, &e), 0);
    ASSERT_STREQ(s, "x.csv");
    ASSERT_EQ(n, 7);
    ASSERT_EQ(b, 1);
    ASSERT_EQ(npos, 2);
    ASSERT_STREQ(argv[1], "pos2");

    char c0[] = "--count", c1[] = "11";
    char *bad[] = {c0, c1};
    ASSERT_EQ(opt_parse(2, bad, opts, &npos, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "--count");
    char d0[] = "--nope";
    char *bad2[] = {d0};
    ASSERT_EQ(opt_parse(1, bad2, opts, &npos, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "--nope");

    const char *o = NULL;
    const struct opt sopts[] = {OPT_STR("o", &o, "FMT", "output"), OPT_END()};
    char s0[] = "-o", s1[] = "json";
    char *sargv[] = {s0, s1};
    ASSERT_EQ(opt_parse(2, sargv, sopts, &npos, &e), 0);
    ASSERT_STREQ(o, "json");
    char t0[] = "-x";
    char *targv[] = {t0};
    ASSERT_EQ(opt_parse(1, targv, sopts, &npos, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "'-x'");

    char host[64];
    int port = 0;
    ASSERT_EQ(http_parse_listen("127.0.0.1:8080", host, sizeof host, &port, &e), 0);
    ASSERT_STREQ(host, "127.0.0.1");
    ASSERT_EQ(port, 8080);
    ASSERT_EQ(http_parse_listen("[::1]:9", host, sizeof host, &port, &e), 0);
    ASSERT_STREQ(host, "::1");
    ASSERT_TRUE(http_parse_listen("nocolon", host, sizeof host, &port, &e) < 0);
    ASSERT_TRUE(http_parse_listen("h:99999", host, sizeof host, &port, &e) < 0);
    return 0;
}
