/* Unit tests for util/: errors, flags. */
#include "test.h"
#include "util/err.h"
#include "util/opt.h"
#include "http/http_server.h"

int test_util(void)
{
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
