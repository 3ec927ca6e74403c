/* tests/unit/test_kube.c - the Kubernetes client: YAML, kubeconfig and
 * in-cluster config, helpers, the watch decoder, and live requests, watches
 * and leader election against tests/blackbox/fake_apiserver.py (started as a
 * child process; skipped when python3 is missing). */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kube/client.h"
#include "kube/lease.h"
#include "kube/watch.h"
#include "kube/yaml.h"
#include "test.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_yaml(void)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *j;
    const char *y = "a: 1\nb: \"1\"\nc: true\nd: ~\ne: [x, 2.5]\nf:\n  g: -3\nh: 0x1f\n";
    ASSERT_EQ(kube_yaml_parse(y, strlen(y), &j, &e), 0);
    ASSERT_EQ(json_integer_value(json_object_get(j, "a")), 1);
    ASSERT_STREQ(json_string_value(json_object_get(j, "b")), "1");
    ASSERT_TRUE(json_is_true(json_object_get(j, "c")));
    ASSERT_TRUE(json_is_null(json_object_get(j, "d")));
    ASSERT_NEAR(json_real_value(json_array_get(json_object_get(j, "e"), 1)), 2.5, 1e-9);
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "f"), "g")), -3);
    ASSERT_STREQ(json_string_value(json_object_get(j, "h")), "0x1f");
    json_decref(j);
    const char *bomb = "a: &x [1]\nb: *x\n";
    ASSERT_TRUE(kube_yaml_parse(bomb, strlen(bomb), &j, &e) < 0);
    ASSERT_CONTAINS(e.msg, "aliases");
    const char *bad = "a: [1\nb: 2\n";
    ASSERT_TRUE(kube_yaml_parse(bad, strlen(bad), &j, &e) < 0);
    ASSERT_CONTAINS(e.msg, "line");
    ASSERT_EQ(kube_yaml_parse("", 0, &j, &e), 0);
    ASSERT_TRUE(json_is_object(j));
    json_decref(j);
    char deep[300];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    ASSERT_TRUE(kube_yaml_parse(deep, strlen(deep), &j, &e) < 0);
}

static void test_config(const char *dir)
{
    struct gs_err e = GS_ERR_INIT;
    struct kube_config cfg;
    char path[600], sa[256];

    snprintf(path, sizeof path, "%s/kubeconfig", dir);
    /* "aGVsbG8=" is "hello" */
    write_file(path, "apiVersion: v1\nkind: Config\ncurrent-context: b\n"
                     "clusters:\n- name: c1\n  cluster:\n    server: https://k:6443/\n"
                     "    certificate-authority-data: aGVsbG8=\n"
                     "- name: c2\n  cluster:\n    server: http://x\n"
                     "    certificate-authority: ca.pem\n    insecure-skip-tls-verify: true\n"
                     "contexts:\n- name: a\n  context: {cluster: c2, user: u1}\n"
                     "- name: b\n  context: {cluster: c1, user: u1, namespace: gpu}\n"
                     "users:\n- name: u1\n  user:\n    token: tok\n    client-key: /abs/key\n");
    ASSERT_EQ(kube_config_load_file(path, NULL, &cfg, &e), 0);
    ASSERT_STREQ(cfg.server, "https://k:6443");
    ASSERT_EQ(cfg.ca_len, 5);
    ASSERT_TRUE(cfg.ca_data && memcmp(cfg.ca_data, "hello", 5) == 0);
    ASSERT_STREQ(cfg.token, "tok");
    ASSERT_STREQ(cfg.key_file, "/abs/key");
    ASSERT_STREQ(cfg.namespace, "gpu");
    ASSERT_EQ(cfg.insecure, 0);
    kube_config_clear(&cfg);
    ASSERT_EQ(kube_config_load_file(path, "a", &cfg, &e), 0);
    ASSERT_EQ(cfg.insecure, 1);
    ASSERT_STREQ(cfg.namespace, "default");
    ASSERT_TRUE(cfg.ca_file && strstr(cfg.ca_file, "/ca.pem") && cfg.ca_file[0] == '/');
    kube_config_clear(&cfg);
    ASSERT_TRUE(kube_config_load_file(path, "zzz", &cfg, &e) < 0);
    ASSERT_CONTAINS(e.msg, "context 'zzz' not found");
    write_file(path, "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\n"
                     "clusters:\n- name: c\n  cluster: {server: ftp://x}\n");
    ASSERT_TRUE(kube_config_load_file(path, NULL, &cfg, &e) < 0);
    ASSERT_CONTAINS(e.msg, "server must be an http(s) URL");
    write_file(path, "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\n"
                     "clusters:\n- name: c\n  cluster: {server: 'https://x', "
                     "certificate-authority-data: 'a!b'}\n");
    ASSERT_TRUE(kube_config_load_file(path, NULL, &cfg, &e) < 0);
    ASSERT_CONTAINS(e.msg, "certificate-authority-data");
    /* credentials that cannot be used are refused, not dropped (every request
     * went anonymous): an exec plugin (EKS, GKE, AKS), a user not there, a
     * token YAML reads as a number */
    const char *users[][2] = {
        {"users:\n- name: u\n  user:\n    exec: {command: aws}\n",
         "user 'u': exec credentials are not supported"},
        {"users:\n- name: v\n  user: {token: t}\n", "user 'u' not found"},
        {"users:\n- name: u\n  user: {token: 0123}\n", "token must be a string"},
    };
    for (size_t i = 0; i < sizeof users / sizeof users[0]; i++) {
        char text[400];
        snprintf(text, sizeof text, "current-context: a\ncontexts:\n- name: a\n  context: "
                 "{cluster: c, user: u}\nclusters:\n- name: c\n  cluster: {server: "
                 "'https://x'}\n%s", users[i][0]);
        write_file(path, text);
        ASSERT_TRUE(kube_config_load_file(path, NULL, &cfg, &e) < 0);
        ASSERT_CONTAINS(e.msg, users[i][1]);
    }
    /* an exec entry beside a token: the token is used */
    write_file(path, "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, "
                     "user: u}\nclusters:\n- name: c\n  cluster: {server: 'https://x'}\n"
                     "users:\n- name: u\n  user:\n    token: t\n    exec: {command: aws}\n");
    ASSERT_EQ(kube_config_load_file(path, NULL, &cfg, &e), 0);
    ASSERT_STREQ(cfg.token, "t");
    kube_config_clear(&cfg);
    ASSERT_TRUE(kube_config_load_file("/nonexistent/kc", NULL, &cfg, &e) < 0);
    ASSERT_CONTAINS(e.msg, "/nonexistent/kc");

    snprintf(sa, sizeof sa, "%s/sa", dir);
    mkdir(sa, 0700);
    snprintf(path, sizeof path, "%s/token", sa);
    write_file(path, "sekrit\n");
    snprintf(path, sizeof path, "%s/namespace", sa);
    write_file(path, "kube-system");
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    ASSERT_EQ(kube_config_in_cluster(sa, &cfg, &e), 0);
    ASSERT_STREQ(cfg.server, "https://10.0.0.1:443");
    ASSERT_STREQ(cfg.token, "sekrit");
    ASSERT_STREQ(cfg.namespace, "kube-system");
    ASSERT_CONTAINS(cfg.ca_file, "/sa/ca.crt");
    kube_config_clear(&cfg);
    unsetenv("KUBERNETES_SERVICE_HOST");
    ASSERT_TRUE(kube_config_in_cluster(sa, &cfg, &e) < 0);
    ASSERT_CONTAINS(e.msg, "KUBERNETES_SERVICE_HOST");
}

static int count_lines(void *ud, const char *line, size_t n)
{
    int *k = ud;
    (void)line;
    (*k) += (int)n;
    return 0;
}

/* kube_pod_done: finished, or deleted with every container stopped */
static void test_pod_done(void)
{
    static const char *cases[][2] = {
        {"{\"status\":{\"phase\":\"Succeeded\"}}", "1"},
        {"{\"status\":{\"phase\":\"Failed\"}}", "1"},
        /* evicted by a kubelet before 1.27: Failed, then its containers stop */
        {"{\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\",\"containerStatuses\":"
         "[{\"state\":{\"terminated\":{}}},{\"state\":{\"running\":{}}}]}}", "0"},
        {"{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":"
         "[{\"state\":{\"terminated\":{}}}],\"initContainerStatuses\":"
         "[{\"state\":{\"running\":{}}}]}}", "0"},
        {"{\"status\":{\"phase\":\"Succeeded\",\"containerStatuses\":"
         "[{\"state\":{\"terminated\":{}}}]}}", "1"},
        {"{\"status\":{\"phase\":\"Running\",\"containerStatuses\":"
         "[{\"state\":{\"terminated\":{}}}]}}", "0"}, /* restarts: not deleted */
        {"{\"metadata\":{\"deletionTimestamp\":\"2026-11-25T10:00:00Z\"},"
         "\"status\":{\"phase\":\"Running\",\"containerStatuses\":"
         "[{\"state\":{\"terminated\":{}}},{\"state\":{\"terminated\":{}}}]}}", "1"},
        {"{\"metadata\":{\"deletionTimestamp\":\"2026-11-25T10:00:00Z\"},"
         "\"status\":{\"phase\":\"Running\",\"containerStatuses\":"
         "[{\"state\":{\"terminated\":{}}},{\"state\":{\"running\":{}}}]}}", "0"},
        {"{\"metadata\":{\"deletionTimestamp\":\"2026-11-25T10:00:00Z\"},"
         "\"status\":{\"phase\":\"Pending\"}}", "0"}, /* kubelet has not reported */
        {"{\"metadata\":{\"deletionTimestamp\":\"2026-11-25T10:00:00Z\"},"
         "\"status\":{\"containerStatuses\":[{\"state\":{\"terminated\":3}}]}}", "0"},
        {"{\"metadata\":{\"deletionTimestamp\":\"2026-11-25T10:00:00Z\"},"
         "\"status\":{\"containerStatuses\":[{\"state\":{\"terminated\":{}}}],"
         "\"initContainerStatuses\":[{\"state\":{\"running\":{}}}]}}", "0"}, /* sidecar */
        {"{\"metadata\":{\"deletionTimestamp\":\"2026-11-25T10:00:00Z\"},"
         "\"status\":{\"containerStatuses\":[{\"state\":{\"terminated\":{}}}],"
         "\"initContainerStatuses\":[{\"state\":{\"terminated\":{}}}]}}", "1"},
        {"{\"status\":{\"phase\":7}}", "0"},
        {"[]", "0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *pod = json_loads(cases[i][0], 0, NULL);
        ASSERT_TRUE(pod != NULL);
        if (kube_pod_done(pod) != (cases[i][1][0] == '1'))
            TEST_FAIL_("kube_pod_done(%s) != %s", cases[i][0], cases[i][1]);
        json_decref(pod);
    }
}

static void test_helpers(void)
{
    struct gs_err e = GS_ERR_INIT;
    char buf[64];
    double t;
    ASSERT_EQ(kube_escape("a=b,c in (x)", buf, sizeof buf, &e), 0);
    ASSERT_STREQ(buf, "a%3Db%2Cc%20in%20%28x%29");
    ASSERT_TRUE(kube_escape("a=b", buf, 4, &e) < 0);
    ASSERT_EQ(kube_parse_time("2026-11-22T15:20:01Z", &t), 0);
    ASSERT_NEAR(t, 1795360801.0, 0.001);
    ASSERT_EQ(kube_parse_time("2026-11-22T15:20:01.5+01:00", &t), 0);
    ASSERT_NEAR(t, 1795360801.5 - 3600, 0.001);
    ASSERT_TRUE(kube_parse_time("2026-11-22 15:20", &t) < 0);
    ASSERT_TRUE(kube_parse_time("2026-11-22T15:20:01", &t) < 0);
    kube_now_micro(buf, sizeof buf);
    ASSERT_EQ(strlen(buf), 27);
    ASSERT_EQ(kube_parse_time(buf, &t), 0);
    ASSERT_TRUE(t > 1.7e9);

    struct kube_lines l = {.max = 10};
    int total = 0;
    ASSERT_EQ(kube_lines_feed(&l, "abc\r\nde", 7, count_lines, &total, &e), 0);
    ASSERT_EQ(total, 3);
    ASSERT_EQ(kube_lines_feed(&l, "f\n\n", 3, count_lines, &total, &e), 0);
    ASSERT_EQ(total, 6);
    ASSERT_TRUE(kube_lines_feed(&l, "0123456789abc", 13, count_lines, &total, &e) < 0);
    ASSERT_CONTAINS(e.msg, "longer than 10");
    kube_lines_clear(&l);

    enum kube_event_type ty;
    json_t *obj;
    const char *ev = "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"x\"}}}";
    ASSERT_EQ(kube_watch_decode(ev, strlen(ev), &ty, &obj, &e), 0);
    ASSERT_EQ(ty, KUBE_EV_MODIFIED);
    ASSERT_STREQ(kube_meta_str(obj, "name"), "x");
    json_decref(obj);
    /* a NUL in a string, which Kubernetes stores (an annotation, an env
     * value) and sends as \u0000: the event is read, not dropped */
    ev = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"n\","
         "\"annotations\":{\"a\":\"x\\u0000y\"}}}}";
    ASSERT_EQ(kube_watch_decode(ev, strlen(ev), &ty, &obj, &e), 0);
    ASSERT_EQ(json_string_length(json_object_get(
                  json_object_get(json_object_get(obj, "metadata"), "annotations"), "a")),
              3);
    json_decref(obj);
    ev = "{\"type\":\"WHAT\",\"object\":{}}";
    ASSERT_TRUE(kube_watch_decode(ev, strlen(ev), &ty, &obj, &e) < 0);
    ASSERT_CONTAINS(e.msg, "type");
    ev = "{\"type\":\"ADDED\",\"object\":3}";
    ASSERT_TRUE(kube_watch_decode(ev, strlen(ev), &ty, &obj, &e) < 0);
    ASSERT_CONTAINS(e.msg, "object");
    ASSERT_TRUE(kube_watch_decode("{", 1, &ty, &obj, &e) < 0);
}

/* ---- live tests against the fake API server ---------------------------- */

struct fake {
    pid_t pid;
    int in_fd;
    char url[128];
};

static int fake_start(struct fake *f)
{
    const char *src = getenv("GPUSCHED_SOURCE_DIR");
    char script[1024];
    int in[2], out[2];
    snprintf(script, sizeof script, "%s/tests/blackbox/fake_apiserver.py", src ? src : ".");
    if (access("/usr/bin/python3", X_OK) != 0 || access(script, R_OK) != 0)
        return -1;
    if (pipe(in) < 0 || pipe(out) < 0)
        return -1;
    f->pid = fork();
    if (f->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl("/usr/bin/python3", "python3", script, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    f->in_fd = in[1];
    FILE *r = fdopen(out[0], "r");
    if (!fgets(f->url, sizeof f->url, r)) {
        fclose(r);
        return -1;
    }
    fclose(r);
    f->url[strcspn(f->url, "\n")] = '\0';
    return 0;
}

static void fake_stop(struct fake *f)
{
    close(f->in_fd);
    kill(f->pid, SIGTERM);
    waitpid(f->pid, NULL, 0);
}

static void fake_control(struct kube_client *c, const char *what, json_t *body)
{
    struct gs_err e = GS_ERR_INIT;
    char path[128];
    snprintf(path, sizeof path, "/_fake/%s", what);
    if (!body)
        body = json_object();
    kube_create(c, path, body, NULL, &e);
    json_decref(body);
}

struct seen {
    pthread_mutex_t mu;
    int replaces, added, modified, deleted, last_items;
};

static void on_replace(void *ud, const json_t *items, const char *rv)
{
    struct seen *s = ud;
    (void)rv;
    pthread_mutex_lock(&s->mu);
    s->replaces++;
    s->last_items = (int)json_array_size(items);
    pthread_mutex_unlock(&s->mu);
}

static void on_event(void *ud, const char *type, const json_t *obj)
{
    struct seen *s = ud;
    (void)obj;
    pthread_mutex_lock(&s->mu);
    if (!strcmp(type, "ADDED"))
        s->added++;
    else if (!strcmp(type, "MODIFIED"))
        s->modified++;
    else
        s->deleted++;
    pthread_mutex_unlock(&s->mu);
}

static int get_seen(struct seen *s, int which)
{
    int v;
    pthread_mutex_lock(&s->mu);
    v = which == 0 ? s->replaces : which == 1 ? s->added : which == 2 ? s->modified : s->deleted;
    pthread_mutex_unlock(&s->mu);
    return v;
}

/* Waits up to 5 s for get_seen(which) >= want. */
static int wait_seen(struct seen *s, int which, int want)
{
    for (int i = 0; i < 500; i++) {
        if (get_seen(s, which) >= want)
            return 1;
        usleep(10000);
    }
    return 0;
}

static void test_requests(struct kube_client *c)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *out = NULL;
    long status;

    json_t *node = json_pack("{s:{s:s}}", "metadata", "name", "n1");
    ASSERT_EQ(kube_create(c, "/api/v1/nodes", node, &out, &e), 0);
    ASSERT_STREQ(kube_meta_str(out, "name"), "n1");
    json_decref(out);
    ASSERT_EQ(kube_create(c, "/api/v1/nodes", node, NULL, &e), -GS_ECONFLICT);
    ASSERT_CONTAINS(e.msg, "409");
    ASSERT_CONTAINS(e.msg, "already exists");
    json_decref(node);

    ASSERT_EQ(kube_get(c, "/api/v1/nodes/nope", &out, &e), -GS_ENOENT);
    json_decref(out);
    ASSERT_EQ(kube_get(c, "/api/v1/nodes", &out, &e), 0);
    ASSERT_EQ(json_array_size(json_object_get(out, "items")), 1);
    json_decref(out);

    json_t *mp = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", "gpusched.io/x", "1");
    ASSERT_EQ(kube_patch(c, "/api/v1/nodes/n1", KUBE_PATCH_MERGE, mp, &out, &e), 0);
    ASSERT_STREQ(kube_annotation(out, "gpusched.io/x"), "1");
    json_decref(out);
    ASSERT_EQ(kube_patch(c, "/api/v1/nodes/n1", KUBE_PATCH_STRATEGIC, mp, NULL, &e), 0);
    ASSERT_TRUE(kube_patch(c, "/api/v1/nodes/n1", KUBE_PATCH_JSON, mp, NULL, &e) < 0);
    ASSERT_CONTAINS(e.msg, "array");
    json_decref(mp);
    json_t *jp = json_pack("[{s:s, s:s, s:s}]", "op", "add", "path", "/metadata/labels",
                           "value", "x");
    json_object_set_new(json_array_get(jp, 0), "value", json_pack("{s:s}", "a", "b"));
    ASSERT_EQ(kube_patch(c, "/api/v1/nodes/n1", KUBE_PATCH_JSON, jp, &out, &e), 0);
    ASSERT_STREQ(kube_label(out, "a"), "b");
    json_decref(jp);

    /* a stale resourceVersion on PUT is a conflict */
    json_t *stale = json_deep_copy(out);
    json_decref(out);
    json_object_set_new(json_object_get(stale, "metadata"), "resourceVersion", json_string("1"));
    ASSERT_EQ(kube_replace(c, "/api/v1/nodes/n1", stale, NULL, &e), -GS_ECONFLICT);
    json_decref(stale);

    fake_control(c, "fail", json_pack("{s:s, s:s, s:i}", "method", "GET", "pattern",
                                      "/nodes/n1$", "status", 500));
    ASSERT_EQ(kube_request(c, "GET", "/api/v1/nodes/n1", NULL, NULL, NULL, &status, &e),
              -GS_EUNAVAIL);
    ASSERT_EQ(status, 500);
    ASSERT_CONTAINS(e.msg, "injected failure");
    ASSERT_EQ(kube_get(c, "/api/v1/nodes/n1", NULL, &e), 0);
    /* 429 (API Priority and Fairness): not served, so sent again, three
     * times at most */
    fake_control(c, "fail", json_pack("{s:s, s:s, s:i, s:i}", "method", "GET", "pattern",
                                      "/nodes/n1$", "status", 429, "times", 2));
    ASSERT_EQ(kube_get(c, "/api/v1/nodes/n1", NULL, &e), 0);
    fake_control(c, "fail", json_pack("{s:s, s:s, s:i, s:i}", "method", "GET", "pattern",
                                      "/nodes/n1$", "status", 429, "times", 4));
    ASSERT_EQ(kube_request(c, "GET", "/api/v1/nodes/n1", NULL, NULL, NULL, &status, &e),
              -GS_EUNAVAIL);
    ASSERT_EQ(status, 429);
    ASSERT_EQ(kube_get(c, "/api/v1/nodes/n1", NULL, &e), 0);

    ASSERT_EQ(kube_event(c, "Pod", "default", "p1", "uid-1", "Warning", "FailedScheduling",
                         "no GPU fits", &e), 0);
    ASSERT_EQ(kube_get(c, "/api/v1/namespaces/default/events", &out, &e), 0);
    json_t *ev = json_array_get(json_object_get(out, "items"), 0);
    ASSERT_STREQ(json_string_value(json_object_get(ev, "reason")), "FailedScheduling");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(ev, "involvedObject"), "uid")),
                 "uid-1");
    json_decref(out);

    ASSERT_EQ(kube_delete(c, "/api/v1/nodes/n1", &e), 0);
    ASSERT_EQ(kube_delete(c, "/api/v1/nodes/n1", &e), -GS_ENOENT);
    ASSERT_TRUE(kube_get(c, "nodes", NULL, &e) < 0);
}

static void test_watch(struct kube_client *c)
{
    struct gs_err e = GS_ERR_INIT;
    struct seen s = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0};
    struct kube_watch_ops ops = {on_replace, on_event, NULL, NULL};
    struct kube_watch_opts wo = {.path = "/api/v1/namespaces/w/pods", .timeout_s = 30,
                                 .backoff_min_s = 0.05, .backoff_max_s = 0.2};
    struct kube_watch *w;
    struct kube_watch_stats st;
    json_t *pod = json_pack("{s:{s:s}}", "metadata", "name", "a");

    kube_create(c, "/api/v1/namespaces/w/pods", pod, NULL, &e);
    ASSERT_EQ(kube_watch_start(c, &wo, &ops, &s, &w, &e), 0);
    ASSERT_TRUE(wait_seen(&s, 0, 1));
    ASSERT_EQ(s.last_items, 1);
    json_object_set_new(json_object_get(pod, "metadata"), "name", json_string("b"));
    kube_create(c, "/api/v1/namespaces/w/pods", pod, NULL, &e);
    kube_create(c, "/api/v1/namespaces/other/pods", pod, NULL, &e); /* not watched */
    ASSERT_TRUE(wait_seen(&s, 1, 1));

    /* a dropped stream is re-opened from the last version: nothing lost,
     * nothing repeated, no relist */
    fake_control(c, "drop-watches", NULL);
    usleep(100000);
    json_object_set_new(json_object_get(pod, "metadata"), "name", json_string("c"));
    kube_create(c, "/api/v1/namespaces/w/pods", pod, NULL, &e);
    ASSERT_TRUE(wait_seen(&s, 1, 2));
    kube_watch_get_stats(w, &st);
    ASSERT_TRUE(st.restarts >= 1);
    ASSERT_EQ(st.lists, 1);
    ASSERT_EQ(get_seen(&s, 1), 2);

    /* an ERROR 410 event: list again */
    kube_delete(c, "/api/v1/namespaces/w/pods/a", &e);
    ASSERT_TRUE(wait_seen(&s, 3, 1));
    fake_control(c, "drop-watches", json_pack("{s:b}", "gone", 1));
    ASSERT_TRUE(wait_seen(&s, 0, 2));
    ASSERT_EQ(s.last_items, 2);
    kube_watch_get_stats(w, &st);
    ASSERT_EQ(st.gone, 1);
    /* HTTP 410 on the watch request: list again */
    fake_control(c, "fail", json_pack("{s:s, s:s, s:i}", "method", "GET", "pattern", "watch=1",
                                      "status", 410));
    fake_control(c, "drop-watches", NULL);
    ASSERT_TRUE(wait_seen(&s, 0, 3));
    kube_watch_get_stats(w, &st);
    ASSERT_EQ(st.gone, 2);
    ASSERT_TRUE(st.synced);
    kube_watch_stop(w);

    ASSERT_TRUE(kube_watch_start(c, &(struct kube_watch_opts){.path = "pods"}, &ops, &s, &w, &e) <
                0);

    /* streams cut after they served (a proxy's idle timeout) are opened
     * again at once: the back-off (here 0.2 s doubling to 30 s) is for
     * streams that fail at once, and six cuts had grown it to 6.4 s */
    struct seen s3 = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0};
    ASSERT_EQ(kube_watch_start(c, &(struct kube_watch_opts){.path = "/api/v1/namespaces/cut/pods",
                                                            .timeout_s = 30,
                                                            .backoff_min_s = 0.2,
                                                            .backoff_max_s = 30},
                               &ops, &s3, &w, &e), 0);
    ASSERT_TRUE(wait_seen(&s3, 0, 1));
    for (int i = 0; i < 6; i++) {
        usleep(1200000);
        fake_control(c, "drop-watches", NULL);
    }
    usleep(100000);
    json_object_set_new(json_object_get(pod, "metadata"), "name", json_string("after-cuts"));
    kube_create(c, "/api/v1/namespaces/cut/pods", pod, NULL, &e);
    for (int i = 0; i < 150 && get_seen(&s3, 1) < 1; i++)
        usleep(10000);
    ASSERT_EQ(get_seen(&s3, 1), 1);
    kube_watch_stop(w);

    /* a list in pages of 2: five pods in three requests; a continue token
     * that expired (410) is followed by one whole list (limit=0) */
    struct seen s2 = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0};
    for (int i = 0; i < 5; i++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        json_object_set_new(json_object_get(pod, "metadata"), "name", json_string(name));
        kube_create(c, "/api/v1/namespaces/pg/pods", pod, NULL, &e);
    }
    fake_control(c, "fail", json_pack("{s:s, s:s, s:i}", "method", "GET", "pattern",
                                      "continue=", "status", 410));
    wo.path = "/api/v1/namespaces/pg/pods";
    wo.page = 2;
    ASSERT_EQ(kube_watch_start(c, &wo, &ops, &s2, &w, &e), 0);
    ASSERT_TRUE(wait_seen(&s2, 0, 1));
    ASSERT_EQ(s2.last_items, 5);
    kube_watch_get_stats(w, &st);
    ASSERT_EQ(st.lists, 1);
    ASSERT_EQ(st.pages, 2); /* one page before the 410, then the whole list */
    kube_watch_stop(w);
    json_decref(pod);
}

static void test_lease(struct kube_client *c)
{
    struct gs_err e = GS_ERR_INIT;
    struct kube_leader *a, *b;
    struct kube_leader_opts o = {.ns = "kube-system", .name = "ext", .identity = "a",
                                 .lease_s = 3, .renew_s = 0.2, .retry_s = 0.1};
    ASSERT_EQ(kube_leader_start(c, &o, &a, &e), 0);
    for (int i = 0; i < 300 && !kube_leader_is_leader(a); i++)
        usleep(10000);
    ASSERT_TRUE(kube_leader_is_leader(a));
    o.identity = "b";
    ASSERT_EQ(kube_leader_start(c, &o, &b, &e), 0);
    usleep(3300000); /* longer than the lease: a keeps renewing, b must wait */
    ASSERT_TRUE(kube_leader_is_leader(a));
    ASSERT_TRUE(!kube_leader_is_leader(b));
    kube_leader_stop(a); /* releases the lease */
    for (int i = 0; i < 300 && !kube_leader_is_leader(b); i++)
        usleep(10000);
    ASSERT_TRUE(kube_leader_is_leader(b));
    ASSERT_EQ(kube_leader_transitions(b), 1);
    json_t *lease = NULL;
    ASSERT_EQ(kube_get(c, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ext", &lease,
                       &e), 0);
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(lease, "spec"),
                                                   "holderIdentity")), "b");
    json_decref(lease);
    kube_leader_stop(b);

    /* a renew stuck in a slow request: the replica stops leading at 2/3 of
     * the lease, before anyone else may take it, not when the request ends */
    o.identity = "c";
    ASSERT_EQ(kube_leader_start(c, &o, &a, &e), 0);
    for (int i = 0; i < 300 && !kube_leader_is_leader(a); i++)
        usleep(10000);
    ASSERT_TRUE(kube_leader_is_leader(a));
    fake_control(c, "delay", json_pack("{s:s, s:s, s:f, s:i}", "method", "GET", "pattern",
                                       "/leases/ext$", "seconds", 3.5, "times", 1));
    usleep(2600000);
    ASSERT_TRUE(!kube_leader_is_leader(a));
    char who[64] = "x";
    kube_leader_holder(a, who, sizeof who);
    ASSERT_STREQ(who, ""); /* its own stale lease: nobody to forward to */
    for (int i = 0; i < 300 && !kube_leader_is_leader(a); i++)
        usleep(10000);
    ASSERT_TRUE(kube_leader_is_leader(a));
    kube_leader_stop(a);
}

int test_kube(void)
{
    char dir[] = "/tmp/gs_kube_XXXXXX";
    struct fake f;

    test_yaml();
    test_helpers();
    test_pod_done();
    if (!mkdtemp(dir))
        return 1;
    test_config(dir);

    if (fake_start(&f) < 0) {
        printf("SKIP live kube tests: python3 or the fake API server is missing\n");
        return test_failures;
    }
    struct kube_config cfg = {0};
    struct kube_client *c = NULL;
    struct gs_err e = GS_ERR_INIT;
    cfg.server = f.url;
    cfg.token = "t";
    ASSERT_EQ(kube_client_new(&cfg, &(struct kube_client_opts){.timeout_ms = 5000}, &c, &e), 0);
    ASSERT_STREQ(kube_client_namespace(c), "default");
    if (c) {
        test_requests(c);
        test_watch(c);
        test_lease(c);
        kube_client_free(c);
    }
    fake_stop(&f);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        test_failures++;
    return test_failures;
}
