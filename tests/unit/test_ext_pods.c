/* tests/unit/test_ext_pods.c - the pods the extender remembers for a later
 * /bind are bounded (max_pods): a full table drops the least recently
 * remembered pod that holds nothing, one per new pod, never a pod that
 * holds GPUs, and a pod remembered again counts as new. */
#include <stdlib.h>

#include "ext/sched.h"
#include "test.h"

static void filter_pod(struct ext_sched *s, const char *name)
{
    char b[512];
    struct ext_reply r;
    size_t len;
    snprintf(b, sizeof b, "{\"Pod\":{\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\",\"uid\":"
             "\"%s\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
             "{\"nvidia.com/gpu\":\"1\"}}}]}},\"NodeNames\":[\"n1\"]}", name, name);
    ASSERT_EQ(ext_sched_filter(s, b, strlen(b), &r), 200);
    free(ext_reply_take(&r, &len));
}

static int known(struct ext_sched *s, const char *name)
{
    json_t *j = NULL;
    int st = ext_sched_explain(s, "d", name, &j);
    json_decref(j);
    return st == 200;
}

int test_ext_pods(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    struct ext_reply r;
    size_t len;
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.max_pods = 4}, &s, &e), 0);
    json_t *n = json_pack("{s:{s:s}, s:{s:{s:s, s:s, s:s, s:s}}}", "metadata", "name", "n1",
                          "status", "allocatable", "cpu", "8", "memory", "32Gi", "pods", "110",
                          "nvidia.com/gpu", "8");
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);

    char name[16];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "a%d", i);
        filter_pod(s, name);
    }
    const char *b = "{\"PodName\":\"a0\",\"PodNamespace\":\"d\",\"PodUID\":\"a0\",\"Node\":\"n1\"}";
    ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &r), 200);
    free(ext_reply_take(&r, &len));
    /* a3 is remembered again: it is now newer than a4 and a5 */
    filter_pod(s, "a4");
    filter_pod(s, "a3");
    for (int i = 5; i < 8; i++) {
        snprintf(name, sizeof name, "a%d", i);
        filter_pod(s, name);
    }
    /* four places: a0 holds a GPU, the three newest are the others */
    static const int expect[] = {1, 0, 0, 0, 0, 1, 1, 1};
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "a%d", i);
        if (known(s, name) != expect[i])
            TEST_FAIL_("pod %s: remembered %d, expected %d", name, !expect[i], expect[i]);
    }
    /* a forgotten pod cannot bind; a remembered one can */
    b = "{\"PodName\":\"a1\",\"PodNamespace\":\"d\",\"PodUID\":\"a1\",\"Node\":\"n1\"}";
    ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &r), 404);
    free(ext_reply_take(&r, &len));
    b = "{\"PodName\":\"a7\",\"PodNamespace\":\"d\",\"PodUID\":\"a7\",\"Node\":\"n1\"}";
    ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &r), 200);
    free(ext_reply_take(&r, &len));
    /* released pods are forgotten at once */
    ASSERT_EQ(ext_sched_release(s, "d/a0", &e), 0);
    ASSERT_TRUE(!known(s, "a0"));
    ext_sched_free(s);
    return test_failures;
}
