/* tests/unit/test_ext_forward.c - the leader's address in a Lease holderIdentity
 * (ext/forward.h): "NAME@HOST:PORT" gives HOST:PORT (a bare IPv6 HOST
 * bracketed), an identity without '@'
 * is not forwarded to, and every malformed address is refused naming the
 * part that is wrong; a replica that leads (or knows no leader) answers
 * every verb itself; a leader that does not answer gets /bind refused (503)
 * and the other verbs answered here, without asking it again for a while. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ext/forward.h"
#include "util/metrics.h"
#include "test.h"

static void test_addr(void)
{
    char out[300];
    struct gs_err e = GS_ERR_INIT;

    ASSERT_EQ(ext_forward_addr("extender-7d9f@10.1.2.3:8888", out, sizeof out, &e), 0);
    ASSERT_STREQ(out, "10.1.2.3:8888");
    ASSERT_EQ(ext_forward_addr("a@b@gpusched-1.gpusched.svc:80", out, sizeof out, &e), 0);
    ASSERT_STREQ(out, "gpusched-1.gpusched.svc:80");
    ASSERT_EQ(ext_forward_addr("x@[fd00::1]:8888", out, sizeof out, &e), 0);
    ASSERT_STREQ(out, "[fd00::1]:8888");
    /* POD_NAME@$(POD_IP):PORT on an IPv6 cluster: the address bracketed */
    ASSERT_EQ(ext_forward_addr("x@fd00::5:8888", out, sizeof out, &e), 0);
    ASSERT_STREQ(out, "[fd00::5]:8888");
    ASSERT_EQ(ext_forward_addr("x@2001:db8:0:1:2:3:4:5:80", out, sizeof out, &e), 0);
    ASSERT_STREQ(out, "[2001:db8:0:1:2:3:4:5]:80");
    ASSERT_EQ(ext_forward_addr("extender-7d9f", out, sizeof out, &e), 1);

    struct {
        const char *id, *why;
    } bad[] = {
        {"a@10.1.2.3", "no :PORT"},         {"a@:8888", "bad host"},
        {"a@10.1.2.3:", "port"},            {"a@10.1.2.3:0", "port"},
        {"a@10.1.2.3:65536", "port"},       {"a@10.1.2.3:88a8", "port"},
        {"a@h/x:80", "bad host"},           {"a@[fd00::1]", "no :PORT"},
        {"a@[zz::1]:80", "bad host"},       {"a@h st:80", "bad host"},
        {"a@1:2:3:4:5:6:7:8:9:80", "bad host"}, {"a@fd00::zz:80", "bad host"},
        {"a@::1:", "port"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct gs_err e2 = GS_ERR_INIT;
        ASSERT_EQ(ext_forward_addr(bad[i].id, out, sizeof out, &e2), -GS_EINVAL);
        ASSERT_TRUE(strstr(e2.msg, bad[i].why) != NULL);
    }
    char longid[400];
    memset(longid, 'h', sizeof longid);
    memcpy(longid, "a@", 2);
    strcpy(longid + sizeof longid - 6, ":80");
    ASSERT_EQ(ext_forward_addr(longid, out, sizeof out, &e), -GS_EINVAL);
}

static int leads(void *ud, char *out, size_t cap)
{
    (void)ud;
    (void)cap;
    *out = 0;
    return 0;
}

static int no_address(void *ud, char *out, size_t cap)
{
    (void)ud;
    snprintf(out, cap, "%s", "other-replica");
    return 1;
}

static int bad_address(void *ud, char *out, size_t cap)
{
    (void)ud;
    snprintf(out, cap, "%s", "other@nowhere");
    return 1;
}

static int dead(void *ud, char *out, size_t cap)
{
    (void)ud;
    snprintf(out, cap, "%s", "other@127.0.0.1:1"); /* nothing listens on port 1 */
    return 1;
}

static void test_bind_here_or_refuse(void)
{
    struct ext_forward *f;
    struct gs_err e = GS_ERR_INIT;
    int status = 0;
    char *out = NULL;
    size_t len = 0;

    ASSERT_EQ(ext_forward_new(leads, NULL, "me", 1, NULL, &f, &e), 0);
    ASSERT_EQ(ext_forward(f, "bind", "{}", 2, &status, &out, &len), 0);
    ext_forward_free(f);
    ASSERT_EQ(ext_forward_new(no_address, NULL, "me", 1, NULL, &f, &e), 0);
    ASSERT_EQ(ext_forward(f, "bind", "{}", 2, &status, &out, &len), 0);
    ext_forward_free(f);
    ASSERT_EQ(ext_forward_new(bad_address, NULL, "me", 1, NULL, &f, &e), 0);
    ASSERT_EQ(ext_forward(f, "bind", "{}", 2, &status, &out, &len), 1);
    ASSERT_EQ(status, 503);
    ASSERT_TRUE(out && strstr(out, "no :PORT") && strstr(out, "\"Error\""));
    ASSERT_EQ(len, out ? strlen(out) : 0);
    free(out);
    out = NULL;
    ASSERT_EQ(ext_forward(f, "filter", "{}", 2, &status, &out, &len), 0);
    ext_forward_free(f);
    ASSERT_EQ(ext_forward_new(NULL, NULL, "me", 1, NULL, &f, &e), -GS_EINVAL);
    /* HTTPS: the certificate to pin must be there and hold a public key */
    ASSERT_EQ(ext_forward_new(leads, NULL, "me", 1, NULL, &f, &e), 0);
    ASSERT_EQ(ext_forward_tls(f, "/nonexistent/tls.crt", &e), -GS_EIO);
    ASSERT_CONTAINS(e.msg, "/nonexistent/tls.crt");
    char junk[] = "/tmp/gs-fwd-junk-XXXXXX";
    int fd = mkstemp(junk);
    ASSERT_TRUE(fd >= 0);
    ASSERT_EQ(write(fd, "not a certificate\n", 18), 18);
    close(fd);
    struct gs_err e2 = GS_ERR_INIT;
    ASSERT_EQ(ext_forward_tls(f, junk, &e2), -GS_EINVAL);
    ASSERT_CONTAINS(e2.msg, "no public key to pin");
    unlink(junk);
    ext_forward_free(f);
}

static void test_leader_not_answering(void)
{
    struct metrics *m = metrics_new();
    struct ext_forward *f;
    struct gs_err e = GS_ERR_INIT;
    int status = 0;
    char *out = NULL, *text;
    size_t len = 0;

    ASSERT_TRUE(m != NULL);
    ASSERT_EQ(ext_forward_new(dead, NULL, "me", 1, m, &f, &e), 0);
    /* /filter: tried once, then answered here without asking again */
    ASSERT_EQ(ext_forward(f, "filter", "{}", 2, &status, &out, &len), 0);
    ASSERT_EQ(ext_forward(f, "prioritize", "{}", 2, &status, &out, &len), 0);
    ASSERT_TRUE(out == NULL);
    /* /bind is always tried, and refused when the leader does not answer */
    ASSERT_EQ(ext_forward(f, "bind", "{}", 2, &status, &out, &len), 1);
    ASSERT_EQ(status, 503);
    ASSERT_TRUE(out && strstr(out, "did not answer"));
    free(out);
    text = metrics_render(m, &len);
    ASSERT_TRUE(text && strstr(text, "gpusched_extender_forwarded_total{verb=\"filter\",code=\"0\"} 1"));
    ASSERT_TRUE(text && !strstr(text, "verb=\"prioritize\""));
    ASSERT_TRUE(text && strstr(text, "gpusched_extender_forwarded_total{verb=\"bind\",code=\"0\"} 1"));
    free(text);
    ext_forward_free(f);
    metrics_free(m);
}

int test_ext_forward(void)
{
    test_addr();
    test_bind_here_or_refuse();
    test_leader_not_answering();
    return test_failures;
}
