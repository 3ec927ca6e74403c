/*
 * cmd/webhook.c - `gpusched webhook`: the admission webhook server, and
 * `gpusched webhook gen-certs`: the CA and serving certificate it needs.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "http/http_server.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/opt.h"
#include "wh/wh_certs.h"
#include "wh/wh_server.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static int write_file(const char *dir, const char *name, const char *text, mode_t mode)
{
    char path[4096];
    int fd;
    size_t len = strlen(text), off = 0;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        fprintf(stderr, "gpusched webhook gen-certs: cannot write '%s': %s\n", path,
                strerror(errno));
        return -1;
    }
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "gpusched webhook gen-certs: cannot write '%s': %s\n", path,
                    strerror(errno));
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    if (close(fd) != 0)
        return -1;
    return 0;
}

/* Splits a comma-separated flag value into at most `max` pieces (in place). */
static int split_list(char *s, const char **out, int max, const char *flag)
{
    int n = 0;
    char *save = NULL;

    for (char *tok = s ? strtok_r(s, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max) {
            fprintf(stderr, "gpusched webhook gen-certs: %s: at most %d entries\n", flag, max);
            return -1;
        }
        out[n++] = tok;
    }
    return n;
}

static int gen_certs(int argc, char **argv)
{
    const char *service = "gpusched-webhook", *ns = "gpusched", *out = NULL;
    const char *dns = NULL, *ips = NULL, *ca_dir = NULL;
    long days = 365;
    int npos;
    struct gs_err e = GS_ERR_INIT;
    const struct opt opts[] = {
        OPT_STR("service", &service, "NAME", "the webhook's Service (default gpusched-webhook)"),
        OPT_STR("namespace", &ns, "NS", "its namespace (default gpusched)"),
        OPT_STR("out", &out, "DIR", "write ca.crt, ca.key, tls.crt, tls.key, ca-bundle.txt here"),
        OPT_STR("dns", &dns, "NAMES", "extra DNS names, comma-separated"),
        OPT_STR("ip", &ips, "ADDRS", "IP addresses, comma-separated (e.g. 127.0.0.1)"),
        OPT_INT("days", &days, "N", "validity in days (default 365)", 1, 3650),
        OPT_STR("ca", &ca_dir, "DIR",
                "sign with the CA in DIR (ca.crt, ca.key) instead of a new one: the "
                "caBundle stays valid"),
        OPT_END(),
    };
    const char *usage =
        "gpusched webhook gen-certs --out DIR [--service NAME] [--namespace NS] [--ca DIR]";

    int rc = cmd_flags("webhook gen-certs", argc, argv, opts, usage, 0, &npos);
    if (rc >= 0)
        return rc;
    if (!out) {
        fprintf(stderr, "gpusched webhook gen-certs: --out DIR is required\n");
        return 2;
    }
    struct wh_certs_opts co = {0};
    char *dns_buf = dns ? strdup(dns) : NULL, *ip_buf = ips ? strdup(ips) : NULL;
    co.service = service;
    co.ns = ns;
    co.days = (int)days;
    co.n_dns = split_list(dns_buf, co.dns, WH_CERTS_MAX_NAMES, "--dns");
    co.n_ips = split_list(ip_buf, co.ips, WH_CERTS_MAX_NAMES, "--ip");
    if (co.n_dns < 0 || co.n_ips < 0) {
        free(dns_buf);
        free(ip_buf);
        return 2;
    }
    struct gs_buf ca_crt = {0}, ca_key = {0};
    char path[4096];
    rc = 0;
    if (ca_dir) {
        snprintf(path, sizeof path, "%s/ca.crt", ca_dir);
        rc = gs_buf_read_file(&ca_crt, path, 1 << 20, &e);
        snprintf(path, sizeof path, "%s/ca.key", ca_dir);
        if (rc == 0)
            rc = gs_buf_read_file(&ca_key, path, 1 << 20, &e);
        co.ca_crt = ca_crt.buf ? ca_crt.buf : "";
        co.ca_key = ca_key.buf ? ca_key.buf : "";
    }
    struct wh_certs c;
    if (rc == 0 && (rc = wh_certs_generate(&co, &c, &e)) < 0 && ca_dir)
        gs_err_prefix(&e, "--ca %s", ca_dir);
    free(dns_buf);
    free(ip_buf);
    gs_buf_free(&ca_crt);
    gs_buf_free(&ca_key);
    if (rc < 0) {
        fprintf(stderr, "gpusched webhook gen-certs: %s\n", e.msg);
        return rc == -GS_EINVAL ? 2 : 1;
    }
    if (mkdir(out, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "gpusched webhook gen-certs: cannot create '%s': %s\n", out,
                strerror(errno));
        wh_certs_free(&c);
        return 1;
    }
    char bundle[8192];
    snprintf(bundle, sizeof bundle, "%s\n", c.ca_bundle);
    if (write_file(out, "ca.crt", c.ca_crt, 0644) < 0 ||
        write_file(out, "ca.key", c.ca_key, 0600) < 0 ||
        write_file(out, "tls.crt", c.tls_crt, 0644) < 0 ||
        write_file(out, "tls.key", c.tls_key, 0600) < 0 ||
        write_file(out, "ca-bundle.txt", bundle, 0644) < 0) {
        wh_certs_free(&c);
        return 1;
    }
    printf("wrote %s/{ca.crt,ca.key,tls.crt,tls.key,ca-bundle.txt} for %s.%s.svc (valid %d "
           "days)\n\n"
           "kubectl -n %s create secret tls %s-tls --cert=%s/tls.crt --key=%s/tls.key\n"
           "then set every caBundle in deploy/webhook.yaml (its three webhooks) to:\n%s\n",
           out, service, ns, c.days, ns, service, out, out, c.ca_bundle);
    wh_certs_free(&c);
    return 0;
}

static int load_nodes(const char *path, const struct core_names *names, struct wh_cluster *out)
{
    json_error_t je;
    struct gs_err e = GS_ERR_INIT;
    json_t *j = json_load_file(path, 0, &je);

    if (!j) {
        fprintf(stderr, "gpusched webhook: %s:%d: %s\n", path, je.line, je.text);
        return -1;
    }
    int rc = wh_cluster_from_nodes(j, names, out, &e);
    json_decref(j);
    if (rc < 0)
        fprintf(stderr, "gpusched webhook: %s: %s\n", path, e.msg);
    return rc;
}

int cmd_webhook(int argc, char **argv)
{
    const char *listen = "0.0.0.0:8443", *cert = NULL, *key = NULL, *quotas = NULL;
    const char *nodes = NULL, *max_mem = NULL, *max_model = NULL, *sched = "gpu-scheduler";
    const char *defaults = NULL, *level = "info", *format = "text", *kubeconfig = NULL;
    const char *assigners = NULL, *res_prefix = CORE_RES_PREFIX_DEFAULT;
    const char *annot_prefix = CORE_ANNOT_PREFIX_DEFAULT;
    struct core_names_store names;
    long max_gpus = 0, max_body = 4 << 20;
    int in_cluster = 0;
    int npos;
    struct gs_err e = GS_ERR_INIT;
    const struct opt opts[] = {
        OPT_STR("listen", &listen, "ADDR:PORT", "HTTPS address (default 0.0.0.0:8443)"),
        OPT_STR("tls-cert", &cert, "FILE", "serving certificate, PEM (reloaded on change)"),
        OPT_STR("tls-key", &key, "FILE", "its private key, PEM (reloaded on change)"),
        OPT_STR("quotas", &quotas, "FILE", "GPUQuota objects, JSON or YAML (reloaded on change)"),
        OPT_STR("kubeconfig", &kubeconfig, "FILE", "watch GPUQuota objects in this cluster"),
        OPT_BOOL("in-cluster", &in_cluster, "... in the cluster of the pod's service account"),
        OPT_STR("nodes", &nodes, "FILE", "NodeList JSON: learn the largest GPU and node from it"),
        OPT_STR("max-gpu-memory", &max_mem, "QTY", "memory of the largest GPU (e.g. 80Gi)"),
        OPT_STR("max-gpu-model", &max_model, "NAME", "its model name, for messages"),
        OPT_INT("max-gpus-per-node", &max_gpus, "N", "GPUs of the largest node", 0, 16),
        OPT_STR("scheduler-name", &sched, "NAME",
                "schedulerName for GPU pods (default gpu-scheduler; \"\" = leave alone)"),
        OPT_STR("default-policy", &defaults, "NS=POLICY,...", "policy for pods that name none"),
        OPT_STR("assigners", &assigners, "USERS",
                "the only users who may write GPU assignment annotations, comma-separated "
                "(the extender's service account; default: anyone)"),
        OPT_INT("max-body", &max_body, "BYTES", "largest AdmissionReview accepted (default 4 MiB)",
                4096, 64 << 20),
        OPT_STR("resource-prefix", &res_prefix, "PREFIX", "resource names' prefix (nvidia.com/)"),
        OPT_STR("annotation-prefix", &annot_prefix, "PREFIX", "annotation prefix (gpusched.io/)"),
        OPT_STR("log-level", &level, "LEVEL", "debug, info, warn or error"),
        OPT_STR("log-format", &format, "FORMAT", "text or json"),
        OPT_END(),
    };
    const char *usage =
        "gpusched webhook --tls-cert FILE --tls-key FILE [--listen ADDR:PORT] [options]\n"
        "       gpusched webhook gen-certs --out DIR [--service NAME] [--namespace NS]";

    if (argc > 1 && strcmp(argv[1], "gen-certs") == 0)
        return gen_certs(argc - 2, argv + 2);
    int rc = cmd_flags("webhook", argc - 1, argv + 1, opts, usage, 0, &npos);
    if (rc >= 0)
        return rc;
    enum log_level lv;
    enum log_format lf;
    if (log_parse_level(level, &lv) < 0 || log_parse_format(format, &lf) < 0) {
        fprintf(stderr, "gpusched webhook: bad --log-level or --log-format\n");
        return 2;
    }
    log_set_level(lv);
    log_set_format(lf);
    if (!cert || !key) {
        fprintf(stderr, "gpusched webhook: --tls-cert and --tls-key are required (admission "
                        "webhooks are HTTPS only; see `gpusched webhook gen-certs`)\n");
        return 2;
    }

    struct wh_server_opts o;
    char host[256];
    memset(&o, 0, sizeof o);
    if (http_parse_listen(listen, host, sizeof host, &o.port, &e) < 0) {
        fprintf(stderr, "gpusched webhook: --listen: %s\n", e.msg);
        return 2;
    }
    o.addr = host;
    o.tls_cert = cert;
    o.tls_key = key;
    o.quota_file = quotas;
    o.max_body = (size_t)max_body;
    if (core_names_prefixed(&names, res_prefix, annot_prefix, &e) < 0) {
        fprintf(stderr, "gpusched webhook: %s\n", e.msg);
        return 2;
    }
    o.config.names = names.names;
    o.config.scheduler_name = sched;
    o.config.assigners = assigners;
    if (defaults && wh_parse_defaults(defaults, &o.config, &e) < 0) {
        fprintf(stderr, "gpusched webhook: %s\n", e.msg);
        return 2;
    }
    if (nodes && load_nodes(nodes, &o.config.names, &o.config.cluster) < 0)
        return 2;
    if (max_mem) {
        int64_t bytes;
        if (core_quantity_parse(max_mem, 1, &bytes, "--max-gpu-memory", &e) < 0) {
            fprintf(stderr, "gpusched webhook: %s\n", e.msg);
            return 2;
        }
        if (bytes < (1 << 20)) { /* 0 MiB would switch the check off */
            fprintf(stderr, "gpusched webhook: --max-gpu-memory: '%s' is less than 1 MiB; "
                            "plain numbers are bytes (did you mean '%sGi'?)\n", max_mem,
                    max_mem);
            return 2;
        }
        o.config.cluster.max_gpu_mem_mib = bytes >> 20;
    }
    if (max_model)
        snprintf(o.config.cluster.max_gpu_model, sizeof o.config.cluster.max_gpu_model, "%s",
                 max_model);
    if (max_gpus)
        o.config.cluster.max_gpus_per_node = (int)max_gpus;

    struct kube_client *kc = NULL;
    if (quotas && (kubeconfig || in_cluster)) {
        fprintf(stderr, "gpusched webhook: --quotas and --kubeconfig/--in-cluster exclude each "
                        "other\n");
        return 2;
    }
    if (kubeconfig || in_cluster) {
        struct kube_config kcfg;
        int rc2 = kubeconfig ? kube_config_load_file(kubeconfig, NULL, &kcfg, &e)
                             : kube_config_in_cluster(NULL, &kcfg, &e);
        if (rc2 == 0)
            rc2 = kube_client_new(&kcfg, NULL, &kc, &e);
        kube_config_clear(&kcfg);
        if (rc2 < 0) {
            fprintf(stderr, "gpusched webhook: %s\n", e.msg);
            return 2;
        }
    }
    o.kc = kc;
    struct wh_server *s;
    if (wh_server_start(&o, &s, &e) < 0) {
        fprintf(stderr, "gpusched webhook: %s\n", e.msg);
        kube_client_free(kc);
        return 1;
    }
    cmd_on_signals(on_signal);
    if (kc && (!o.config.cluster.max_gpu_mem_mib || !o.config.cluster.max_gpus_per_node))
        log_info("webhook", "listening on https://%s:%d (largest GPU and node: learned from the "
                 "cluster's Nodes where no flag sets them)", host, wh_server_port(s));
    else
        log_info("webhook", "listening on https://%s:%d (largest GPU %s %lld MiB, %d GPUs per node)",
                 host, wh_server_port(s),
                 o.config.cluster.max_gpu_model[0] ? o.config.cluster.max_gpu_model : "unknown",
                 (long long)o.config.cluster.max_gpu_mem_mib, o.config.cluster.max_gpus_per_node);
    while (!stop_flag) {
        sleep(1);
        wh_server_tick(s);
    }
    log_info("webhook", "stopping");
    wh_server_stop(s);
    kube_client_free(kc);
    return 0;
}
