/* tests/unit/test_ext_names.c - the NodeNames cache (ext/namelist.h): a
 * repeated array is taken from the cache with the same names and reply
 * text as a fresh scan, bad input is still refused, and the scheduler's
 * answers follow every node added, removed or updated and every bind, for
 * the same request bytes. */
#include <stdlib.h>

#include "ext/namelist.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "test.h"

#define POD(name) "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"d\",\"uid\":\"" name "\"}," \
    "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}"

static void test_namelist(void)
{
    struct ext_namelist *l;
    size_t span = 0;
    const char *names[] = {"a", "bc", "d"};
    const char raw[] = "[\"a\",\"bc\",\"d\"]";

    l = ext_namelist_new(raw, sizeof raw - 1, names, 3);
    ASSERT_TRUE(l != NULL);
    ASSERT_EQ(l->n, 3);
    ASSERT_STREQ(l->names[1], "bc");
    ASSERT_EQ(l->len[1], 2);
    ASSERT_STREQ(l->quoted, "\"a\",\"bc\",\"d\",");
    /* names 1..2 as a JSON list */
    ASSERT_EQ(l->qoff[3] - l->qoff[1] - 1, strlen("\"bc\",\"d\""));
    ASSERT_EQ(memcmp(l->quoted + l->qoff[1], "\"bc\",\"d\"", l->qoff[3] - l->qoff[1] - 1), 0);
    ASSERT_EQ(l->gen, 0);

    struct ext_namecache *c = ext_namecache_new(2);
    ext_namecache_add(c, l);
    const char body[] = "[\"a\",\"bc\",\"d\"]}";
    struct ext_namelist *m = ext_namecache_match(c, body, sizeof body - 1, &span);
    ASSERT_TRUE(m == l);
    ASSERT_EQ(span, sizeof raw - 1);
    ext_namelist_put(m);
    /* one byte short, one byte different: no match */
    ASSERT_TRUE(ext_namecache_match(c, raw, sizeof raw - 2, &span) == NULL);
    ASSERT_TRUE(ext_namecache_match(c, "[\"a\",\"bc\",\"e\"]", 14, &span) == NULL);
    /* two slots: a third list pushes out the least recently used */
    const char r2[] = "[\"x\"]", r3[] = "[\"y\"]";
    struct ext_namelist *l2 = ext_namelist_new(r2, 5, (const char *[]){"x"}, 1);
    struct ext_namelist *l3 = ext_namelist_new(r3, 5, (const char *[]){"y"}, 1);
    ext_namecache_add(c, l2);
    ASSERT_TRUE((m = ext_namecache_match(c, raw, sizeof raw - 1, &span)) == l); /* l: recent */
    ext_namelist_put(m);
    ext_namecache_add(c, l3);
    ASSERT_TRUE(ext_namecache_match(c, r2, 5, &span) == NULL);
    ASSERT_TRUE((m = ext_namecache_match(c, raw, sizeof raw - 1, &span)) == l);
    ext_namelist_put(m);
    /* the lists we hold outlive the cache */
    ext_namecache_free(c);
    ASSERT_STREQ(l2->names[0], "x");
    ext_namelist_put(l);
    ext_namelist_put(l2);
    ext_namelist_put(l3);
    ext_namelist_put(NULL);
}

static void test_parse_cached(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_namecache *c = ext_namecache_new(4);
    struct ext_args a, b, u;
    const char *s1 = "{\"Pod\":" POD("p1") ",\"NodeNames\":[\"n1\",\"n\\u0032\",\"n3\"]}";
    const char *s2 = "{\"NodeNames\":[\"n1\",\"n\\u0032\",\"n3\"],\"Pod\":" POD("p2") "}";

    ASSERT_EQ(ext_args_parse_cached(c, s1, strlen(s1), &a, &e), 0);
    ASSERT_TRUE(a.list != NULL);
    ASSERT_EQ(a.n, 3);
    ASSERT_STREQ(a.names[1], "n2");
    ASSERT_STREQ(a.list->quoted, "\"n1\",\"n2\",\"n3\",");
    /* another pod, the same array bytes elsewhere in the body: the same list */
    ASSERT_EQ(ext_args_parse_cached(c, s2, strlen(s2), &b, &e), 0);
    ASSERT_TRUE(b.list == a.list);
    ASSERT_EQ(b.n, 3);
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(b.pod, "metadata"), "name")),
                 "p2");
    /* a fresh scan agrees name for name */
    ASSERT_EQ(ext_args_parse(s2, strlen(s2), &u, &e), 0);
    ASSERT_TRUE(u.list == NULL);
    ASSERT_EQ(u.n, b.n);
    for (int i = 0; i < u.n && i < b.n; i++)
        ASSERT_STREQ(u.names[i], b.names[i]);
    ext_args_clear(&u);
    ext_args_clear(&b);
    ext_args_clear(&a);

    /* a cached array does not excuse what follows it */
    const char *bad[] = {
        "{\"Pod\":" POD("p3") ",\"NodeNames\":[\"n1\",\"n\\u0032\",\"n3\"]",
        "{\"Pod\":" POD("p3") ",\"NodeNames\":[\"n1\",\"n\\u0032\",\"n3\"]]}",
        "{\"Pod\":" POD("p3") ",\"NodeNames\":[\"n1\",\"n\\u0032\",\"n3\"],\"NodeNames\":[]}",
        "{\"NodeNames\":[\"n1\",\"n\\u0032\",\"n3\"]}",
    };
    const char *why[] = {"expected ',' or '}'", "expected ',' or '}'", "given twice", "Pod"};
    for (int i = 0; i < 4; i++) {
        ASSERT_TRUE(ext_args_parse_cached(c, bad[i], strlen(bad[i]), &a, &e) < 0);
        ASSERT_CONTAINS(e.msg, why[i]);
    }
    /* a rejected request leaves nothing in the cache */
    const char *s4 = "{\"NodeNames\":[\"q1\"]}";
    ASSERT_TRUE(ext_args_parse_cached(c, s4, strlen(s4), &a, &e) < 0);
    size_t span;
    ASSERT_TRUE(ext_namecache_match(c, "[\"q1\"]", 6, &span) == NULL);
    const char *s5 = "{\"Pod\":" POD("p5") ",\"NodeNames\":[\"ok\",\"not ok\"]}";
    ASSERT_TRUE(ext_args_parse_cached(c, s5, strlen(s5), &a, &e) < 0);
    ASSERT_CONTAINS(e.msg, "NodeNames[1]");
    /* an empty array is a list too */
    const char *s6 = "{\"Pod\":" POD("p6") ",\"NodeNames\":[]}";
    ASSERT_EQ(ext_args_parse_cached(c, s6, strlen(s6), &a, &e), 0);
    ASSERT_EQ(a.n, 0);
    ASSERT_STREQ(a.list->quoted, "");
    ext_args_clear(&a);

    /* an array over EXT_NAMELIST_KEEP_MAX is a list for its request only */
    size_t big = EXT_NAMELIST_KEEP_MAX + 64, k = 0;
    char *s7 = malloc(big + 256);
    k += (size_t)sprintf(s7, "{\"Pod\":{\"metadata\":{\"name\":\"p7\"}},\"NodeNames\":[");
    for (int i = 0; k < big; i++)
        k += (size_t)sprintf(s7 + k, "%s\"big-%07d\"", i ? "," : "", i);
    k += (size_t)sprintf(s7 + k, "]}");
    ASSERT_EQ(ext_args_parse_cached(c, s7, k, &a, &e), 0);
    ASSERT_EQ(ext_args_parse_cached(c, s7, k, &b, &e), 0);
    ASSERT_TRUE(a.list != NULL && b.list != NULL && a.list != b.list);
    ASSERT_EQ(a.n, b.n);
    ASSERT_STREQ(b.names[b.n - 1], a.names[a.n - 1]);
    ext_args_clear(&a);
    ext_args_clear(&b);
    free(s7);
    ext_namecache_free(c);
}

static json_t *gpu_node(const char *name, int healthy)
{
    char inv[256];
    snprintf(inv, sizeof inv, "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G-%s\",\"model\":"
             "\"A\",\"memory_mib\":1000,\"healthy\":%s}]}", name, healthy ? "true" : "false");
    return json_pack("{s:{s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}}}", "metadata", "name", name,
                     "annotations", "gpusched.io/gpu-inventory", inv, "status", "allocatable",
                     "cpu", "8", "memory", "32Gi", "pods", "110");
}

static void add_node(struct ext_sched *s, const char *name, int healthy)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *n = gpu_node(name, healthy);
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
}

/* The /filter reply to body, parsed. */
static json_t *filter(struct ext_sched *s, const char *body)
{
    struct ext_reply r;
    size_t len;
    ASSERT_EQ(ext_sched_filter(s, body, strlen(body), &r), 200);
    char *txt = ext_reply_take(&r, &len);
    json_t *j = json_loadb(txt, len, 0, NULL);
    ASSERT_TRUE(j != NULL);
    free(txt);
    return j;
}

static int fits(const json_t *reply, const char *node)
{
    size_t i;
    const json_t *v;
    json_array_foreach(json_object_get(reply, "NodeNames"), i, v)
        if (strcmp(json_string_value(v), node) == 0)
            return 1;
    return 0;
}

/* The reason a node was rejected for ("" when it was not). */
static const char *failed(const json_t *reply, const char *node)
{
    const json_t *r = json_object_get(json_object_get(reply, "FailedNodes"), node);
    if (!r)
        r = json_object_get(json_object_get(reply, "FailedAndUnresolvableNodes"), node);
    return r ? json_string_value(r) : "";
}

static void test_sched_stale(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    struct ext_reply r;
    size_t len;
    json_t *j;
    const char *fq = "{\"Pod\":" POD("q") ",\"NodeNames\":[\"n1\",\"n2\",\"n3\"]}";
    const char *pq = "{\"Pod\":" POD("q") ",\"NodeNames\":[\"n1\",\"n2\",\"n3\"]}";

    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){0}, &s, &e), 0);
    add_node(s, "n1", 1);
    add_node(s, "n2", 1);
    j = filter(s, fq);
    ASSERT_TRUE(fits(j, "n1") && fits(j, "n2") && !fits(j, "n3"));
    ASSERT_CONTAINS(failed(j, "n3"), "unknown");
    json_decref(j);

    /* a node comes: the same bytes now find it */
    add_node(s, "n3", 1);
    j = filter(s, fq);
    ASSERT_TRUE(fits(j, "n1") && fits(j, "n2") && fits(j, "n3"));
    json_decref(j);

    /* a node goes (the last one takes its position): unknown again, and
     * the others still answer for themselves */
    ASSERT_EQ(ext_sched_remove_node(s, "n1", &e), 0);
    j = filter(s, fq);
    ASSERT_TRUE(!fits(j, "n1") && fits(j, "n2") && fits(j, "n3"));
    ASSERT_CONTAINS(failed(j, "n1"), "unknown");
    json_decref(j);

    /* a node updated in place: its new inventory decides */
    add_node(s, "n2", 0);
    j = filter(s, fq);
    ASSERT_TRUE(!fits(j, "n2") && fits(j, "n3"));
    ASSERT_TRUE(strlen(failed(j, "n2")) > 0);
    json_decref(j);

    /* /prioritize on the same list: scores for the nodes there are */
    ASSERT_EQ(ext_sched_prioritize(s, pq, strlen(pq), &r), 200);
    char *txt = ext_reply_take(&r, &len);
    j = json_loadb(txt, len, 0, NULL);
    free(txt);
    ASSERT_EQ(json_array_size(j), 3);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(j, 2), "Host")), "n3");
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(j, 0), "Score")), 0);
    json_decref(j);

    /* /bind takes n3's only GPU: the same /filter body must now reject n3 */
    const char *b = "{\"PodName\":\"q\",\"PodNamespace\":\"d\",\"PodUID\":\"q\",\"Node\":\"n3\"}";
    ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &r), 200);
    free(ext_reply_take(&r, &len));
    j = filter(s, fq);
    ASSERT_TRUE(!fits(j, "n3"));
    ASSERT_TRUE(strlen(failed(j, "n3")) > 0);
    json_decref(j);
    /* released: n3 fits again */
    ASSERT_EQ(ext_sched_release(s, "d/q", &e), 0);
    j = filter(s, fq);
    ASSERT_TRUE(fits(j, "n3"));
    json_decref(j);

    /* a relist that drops n3 and brings n1 back */
    json_t *items = json_array();
    json_array_append_new(items, gpu_node("n1", 1));
    json_array_append_new(items, gpu_node("n2", 1));
    ASSERT_EQ(ext_sched_replace_nodes(s, items), 0);
    json_decref(items);
    j = filter(s, fq);
    ASSERT_TRUE(fits(j, "n1") && fits(j, "n2") && !fits(j, "n3"));
    ASSERT_CONTAINS(failed(j, "n3"), "unknown");
    json_decref(j);
    ext_sched_free(s);
}

int test_ext_names(void)
{
    test_namelist();
    test_parse_cached();
    test_sched_stale();
    return test_failures;
}
