/*
 * tests/unit/test_ext_bindq.c - binds handed to the bind threads
 * (ext/bindq.h): each request is woken once, after its reply is there; the
 * reply goes to its own token only, once; one left by a request that went
 * away is dropped by ext_bindq_forget and never handed out; binds run
 * side by side; stopping finishes and wakes every bind handed over.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "ext/bindq.h"
#include "test.h"

enum { JOBS = 24 };

struct fake {
    pthread_mutex_t mu;
    int woken[JOBS + 1];  /* per token index */
    int running, most;    /* binds running now, and at most */
};

static struct fake F = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0};
static char tokens[JOBS + 1]; /* &tokens[i] is request i's token */

static int fake_bind(void *ud, const char *body, size_t len, struct ext_reply *r)
{
    (void)ud;
    memset(r, 0, sizeof *r);
    pthread_mutex_lock(&F.mu);
    if (++F.running > F.most)
        F.most = F.running;
    pthread_mutex_unlock(&F.mu);
    nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL); /* a flush */
    pthread_mutex_lock(&F.mu);
    F.running--;
    pthread_mutex_unlock(&F.mu);
    r->json = json_pack("{s:s%}", "echo", body, len);
    return 200 + (int)len;
}

static void fake_wake(void *token)
{
    pthread_mutex_lock(&F.mu);
    F.woken[(char *)token - tokens]++;
    pthread_mutex_unlock(&F.mu);
}

static int woken(int i)
{
    pthread_mutex_lock(&F.mu);
    int n = F.woken[i];
    pthread_mutex_unlock(&F.mu);
    return n;
}

static void body_of(int i, char *buf, size_t cap) { snprintf(buf, cap, "bind-%d%*s", i, i, ""); }

int test_ext_bindq(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_bindq *q;
    struct ext_reply r;
    char body[64];
    int status;
    double since = -1;

    ASSERT_TRUE(ext_bindq_new(fake_bind, NULL, fake_wake, 0, &q, &e) < 0);
    ASSERT_CONTAINS(e.msg, "bind threads");
    ASSERT_EQ(ext_bindq_new(fake_bind, NULL, fake_wake, 8, &q, &e), 0);
    for (int i = 0; i < JOBS; i++) {
        body_of(i, body, sizeof body);
        ASSERT_EQ(ext_bindq_submit(q, &tokens[i], body, strlen(body)), 0);
    }
    for (int i = 0; i < JOBS; i++) {
        for (int k = 0; k < 4000 && !woken(i); k++)
            nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
        ASSERT_EQ(woken(i), 1);
        body_of(i, body, sizeof body);
        ASSERT_EQ(ext_bindq_take(q, &tokens[i], &status, &r, &since), 1);
        ASSERT_EQ(status, 200 + (int)strlen(body));
        ASSERT_TRUE(since >= 0.004); /* the bind's 5 ms, from hand-over to take */
        ASSERT_STREQ(json_string_value(json_object_get(r.json, "echo")), body);
        json_decref(r.json);
        ASSERT_EQ(ext_bindq_take(q, &tokens[i], &status, &r, &since), 0); /* once */
    }
    pthread_mutex_lock(&F.mu);
    int most = F.most;
    pthread_mutex_unlock(&F.mu);
    ASSERT_TRUE(most > 1); /* side by side, not one after another */
    ASSERT_TRUE(most <= 8);
    /* a reply left behind by a request that ended: forgotten, its token's
     * next request finds none (the other tokens' replies stay) */
    ASSERT_EQ(ext_bindq_submit(q, &tokens[JOBS], "gone", 4), 0);
    ASSERT_EQ(ext_bindq_submit(q, &tokens[0], "kept", 4), 0);
    for (int k = 0; k < 4000 && (!woken(JOBS) || woken(0) < 2); k++)
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    ext_bindq_forget(q, &tokens[JOBS]);
    ext_bindq_forget(q, &tokens[JOBS]); /* none left: nothing happens */
    ASSERT_EQ(ext_bindq_take(q, &tokens[JOBS], &status, &r, &since), 0);
    ASSERT_EQ(ext_bindq_take(q, &tokens[0], &status, &r, &since), 1);
    ASSERT_STREQ(json_string_value(json_object_get(r.json, "echo")), "kept");
    json_decref(r.json);
    /* stopping runs what was handed over and wakes it, then refuses */
    for (int i = 0; i < JOBS; i++) {
        body_of(i, body, sizeof body);
        ASSERT_EQ(ext_bindq_submit(q, &tokens[i], body, strlen(body)), 0);
    }
    ext_bindq_stop(q);
    for (int i = 0; i < JOBS; i++)
        ASSERT_EQ(woken(i), i == 0 ? 3 : 2);
    ASSERT_EQ(ext_bindq_submit(q, &tokens[0], "late", 4), -GS_EUNAVAIL);
    body_of(3, body, sizeof body);
    ASSERT_EQ(ext_bindq_take(q, &tokens[3], &status, &r, &since), 1);
    json_decref(r.json);
    ext_bindq_free(q); /* frees the replies never taken */
    return test_failures;
}
