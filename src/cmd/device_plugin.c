/*
 * cmd/device_plugin.c - `gpusched device-plugin`: the node agent.
 *
 * Parses flags, opens the GPU backend (NVML, or --fake-gpus FILE), connects
 * to the API server when there is one (--kubeconfig, or in-cluster), serves
 * /metrics, /healthz and /inventory when asked (--metrics-listen), and runs
 * the plugin until SIGTERM/SIGINT. Exit status: 0 after a signal, 1 when it
 * cannot serve (or finds no GPU with --fail-on-init-error), 2 on bad flags
 * or a bad fake-GPU file.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "core/request.h"
#include "dp/grpc.h"
#include "dp/kube.h"
#include "dp/limiter.h"
#include "dp/plugin.h"
#include "http/http_server.h"
#include "util/log.h"
#include "util/opt.h"

/* the help text states the limits the code uses, so it cannot drift from them */
#define STR_(x) #x
#define XSTR(x) STR_(x)

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void metrics_handler(void *ud, const struct http_request *req, struct http_response *resp)
{
    struct dp_plugin *p = ud;

    if (strcmp(req->method, "GET") != 0) {
        http_resp_error(resp, 405, "method %s not allowed", req->method);
    } else if (strcmp(req->path, "/metrics") == 0) {
        char *m = dp_plugin_metrics(p);
        if (m)
            http_resp_text(resp, 200, "text/plain; version=0.0.4", m);
        else
            http_resp_error(resp, 500, "out of memory");
        free(m);
    } else if (strcmp(req->path, "/healthz") == 0) {
        char why[256];
        if (dp_plugin_serving(p, why, sizeof why))
            http_resp_text(resp, 200, "text/plain", "ok\n");
        else
            http_resp_error(resp, 503, "%s", why);
    } else if (strcmp(req->path, "/inventory") == 0) {
        http_resp_json(resp, 200, dp_plugin_inventory(p));
    } else {
        http_resp_error(resp, 404, "no such path %s", req->path);
    }
}

/* The limiter library to install: --limiter-lib, else the one beside the
 * binary (a build tree), else ../lib/gpusched/ from it (the image's
 * /usr/local/bin and /usr/local/lib/gpusched), else /usr/lib/gpusched/. */
static const char *limiter_source(const char *given, char *buf, size_t cap)
{
    char exe[512];
    if (given)
        return given;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, cap, "%s/%s", exe, DP_LIM_LIB);
            if (access(buf, R_OK) == 0)
                return buf;
            snprintf(buf, cap, "%s/../lib/gpusched/%s", exe, DP_LIM_LIB);
            if (access(buf, R_OK) == 0)
                return buf;
        }
    }
    return "/usr/lib/gpusched/" DP_LIM_LIB;
}

/* Installs the limiter into dir; the directory to inject from, or NULL
 * (injection off) when dir is absent or the install failed. */
static const char *limiter_setup(const char *dir, const char *lib)
{
    char src[600];
    struct stat st;
    struct gs_err e = GS_ERR_INIT;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        log_info("dp", "limiter: %s is not a directory; shared GPUs are not enforced inside "
                 "containers", dir);
        return NULL;
    }
    lib = limiter_source(lib, src, sizeof src);
    if (dp_limiter_install(dir, lib, &e) != 0) {
        log_warn("dp", "limiter: %s; shared GPUs are not enforced inside containers", e.msg);
        return NULL;
    }
    log_info("dp", "limiter: %s installed in %s; shared containers get it", lib, dir);
    return dir;
}

static const char usage[] =
    "gpusched device-plugin [--kubelet-dir DIR] [--fake-gpus FILE] [--node-name NAME] "
    "[--kubeconfig FILE]\n\n"
    "Kubelet device plugin (API v1beta1): discovers GPUs through NVML (or a fake-GPU\n"
    "file), reports their health, and gives each container the GPUs the extender\n"
    "assigned to its pod. Without an API server it behaves like NVIDIA's plugin.";

int cmd_device_plugin(int argc, char **argv)
{
    const char *kubelet_dir = "/var/lib/kubelet/device-plugins";
    const char *podres = "/var/lib/kubelet/pod-resources/kubelet.sock";
    const char *fake = NULL, *node = NULL, *kubeconfig = NULL, *nvml_lib = NULL;
    const char *prefix = CORE_RES_PREFIX_DEFAULT, *annot_prefix = CORE_ANNOT_PREFIX_DEFAULT;
    const char *ignore_xids = NULL, *health_xids = NULL;
    const char *metrics = NULL, *dev_dir = "/dev", *log_level = "info", *log_format = "text";
    const char *caps_dir = "/proc/driver/nvidia/capabilities";
    const char *lists = "envvar", *cdi_kind = DP_CDI_KIND_DEFAULT;
    const char *limiter_dir = "/var/lib/gpusched/limiter", *limiter_lib = NULL;
    int no_limiter = 0;
    long replicas = 0, transient_s = 10, fatal_s = 0, publish_s = 60, api_wait_s = 20,
         grace_s = 60;
    int no_api = 0, fail_on_init = 0, no_device_specs = 0, npos = 0;
    char host[256];
    struct gs_err e = GS_ERR_INIT;
    const struct opt opts[] = {
        OPT_STR("kubelet-dir", &kubelet_dir, "DIR", "kubelet's device-plugin directory"),
        OPT_STR("fake-gpus", &fake, "FILE", "describe GPUs in a JSON file instead of NVML"),
        OPT_STR("node-name", &node, "NAME", "this node (default $NODE_NAME, else the hostname)"),
        OPT_STR("kubeconfig", &kubeconfig, "FILE",
                "API server access (default: in-cluster when run in a pod)"),
        OPT_BOOL("no-api", &no_api, "never use the API server: NVIDIA-compatible mode"),
        OPT_INT("replicas", &replicas, "N",
                "devices advertised per GPU, for shared pods (1.." XSTR(DP_MAX_REPLICAS)
                "; default " XSTR(DP_DEFAULT_API_REPLICAS) " with an API server, 1 without)",
                1, DP_MAX_REPLICAS),
        OPT_STR("resource-prefix", &prefix, "PREFIX", "resource names' prefix (nvidia.com/)"),
        OPT_STR("annotation-prefix", &annot_prefix, "PREFIX", "annotation prefix (gpusched.io/)"),
        OPT_STR("ignore-xids", &ignore_xids, "LIST",
                "XIDs to ignore besides 13,31,43,45,68,109; 'all' disables health checks"),
        OPT_STR("health-xids", &health_xids, "LIST",
                "XIDs that count even when ignored (e.g. 43 for a GPU that must not run "
                "faulting jobs); not with --ignore-xids all"),
        OPT_INT("reprobe-transient", &transient_s, "SECONDS",
                "re-probe a GPU this long after a transient XID", 1, 86400),
        OPT_INT("reprobe-fatal", &fatal_s, "SECONDS",
                "re-probe a GPU this long after a fatal XID (default 0: never, it stays "
                "unhealthy until the plugin restarts)", 0, 7 * 86400),
        OPT_STR("pod-resources-socket", &podres, "PATH", "kubelet's pod-resources socket"),
        OPT_STR("dev-dir", &dev_dir, "DIR", "where the NVIDIA device nodes are on the host"),
        OPT_STR("nvidia-caps-dir", &caps_dir, "DIR",
                "the driver's MIG capability list (/proc/driver/nvidia/capabilities)"),
        OPT_BOOL("no-device-specs", &no_device_specs,
                 "leave device nodes to the NVIDIA container runtime"),
        OPT_STR("device-list-strategy", &lists, "LIST",
                "how containers' GPUs are named to the runtime, any of envvar (default), "
                "volume-mounts, cdi-annotations, cdi-cri, comma-separated"),
        OPT_STR("cdi-kind", &cdi_kind, "KIND",
                "CDI kind of the device names, which are the GPU and MIG UUIDs "
                "(nvidia.com/gpu)"),
        OPT_INT("publish-interval", &publish_s, "SECONDS",
                "refresh the node's inventory annotation this often; keep it below the "
                "extender's inventory_ttl (300 s), which takes older inventories as stale",
                1, 86400),
        OPT_INT("healthz-grace", &grace_s, "SECONDS",
                "/healthz fails once a resource has gone this long without being served "
                "and registered with kubelet, or the control loop this long without a turn",
                1, 86400),
        OPT_INT("api-wait", &api_wait_s, "SECONDS",
                "how long Allocate waits for an API server or kubelet that does not answer "
                "(kubelet never asks again)", 1, 600),
        OPT_STR("metrics-listen", &metrics, "ADDR:PORT",
                "serve /metrics, /healthz and /inventory over HTTP"),
        OPT_STR("nvml-lib", &nvml_lib, "PATH", "NVML library to load (libnvidia-ml.so.1)"),
        OPT_BOOL("fail-on-init-error", &fail_on_init,
                 "exit 1 when NVML cannot be loaded or there is no GPU"),
        OPT_STR("limiter-dir", &limiter_dir, "DIR",
                "host directory of the in-container limiter (/var/lib/gpusched/limiter); "
                "injection is on when it exists"),
        OPT_STR("limiter-lib", &limiter_lib, "PATH",
                "libgpusched-cuda.so to install there (default: beside the binary, else "
                "../lib/gpusched/ from it, else /usr/lib/gpusched/)"),
        OPT_BOOL("no-limiter", &no_limiter, "do not inject the limiter into shared containers"),
        OPT_STR("log-level", &log_level, "LEVEL", "debug, info, warn or error"),
        OPT_STR("log-format", &log_format, "FORMAT", "text or json"),
        OPT_END(),
    };

    int rc = cmd_flags("device-plugin", argc - 1, argv + 1, opts, usage, 0, &npos);
    if (rc >= 0)
        return rc;
    enum log_level lv;
    enum log_format lf;
    if (log_parse_level(log_level, &lv) || log_parse_format(log_format, &lf)) {
        fprintf(stderr, "gpusched device-plugin: --log-level/--log-format: bad value\n");
        return 2;
    }
    log_set_level(lv);
    log_set_format(lf);
    struct core_names_store names; /* the prefixes checked as the webhook and status do */
    if (core_names_prefixed(&names, prefix, annot_prefix, &e) < 0) {
        fprintf(stderr, "gpusched device-plugin: %s\n", e.msg);
        return 2;
    }

    struct dp_plugin_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kubelet_dir = kubelet_dir;
    cfg.podres_socket = podres;
    if (!node)
        node = getenv("NODE_NAME");
    if (!node || !*node) {
        if (gethostname(host, sizeof host) != 0)
            snprintf(host, sizeof host, "localhost");
        host[sizeof host - 1] = '\0';
        node = host;
    }
    cfg.node_name = node;
    snprintf(cfg.devices.prefix, sizeof cfg.devices.prefix, "%s", prefix);
    dp_health_cfg_default(&cfg.health);
    cfg.health.transient_ms = transient_s * 1000;
    cfg.health.fatal_ms = fatal_s * 1000;
    if ((ignore_xids && dp_health_parse_ignored(&cfg.health, ignore_xids, &e) != 0) ||
        (health_xids && dp_health_parse_forced(&cfg.health, health_xids, &e) != 0)) {
        fprintf(stderr, "gpusched device-plugin: %s\n", e.msg);
        return 2;
    }
    if (health_xids && cfg.health.disabled) {
        fprintf(stderr, "gpusched device-plugin: --health-xids: health checks are off "
                        "(--ignore-xids all)\n");
        return 2;
    }
    if (dp_alloc_parse_lists(lists, &cfg.alloc.lists, &e) != 0) {
        fprintf(stderr, "gpusched device-plugin: --device-list-strategy: %s\n", e.msg);
        return 2;
    }
    if (dp_alloc_check_cdi_kind(cdi_kind, &e) != 0) {
        fprintf(stderr, "gpusched device-plugin: --cdi-kind: %s\n", e.msg);
        return 2;
    }
    cfg.alloc.cdi_kind = cdi_kind;
    cfg.alloc.dev_dir = no_device_specs ? NULL : dev_dir;
    cfg.alloc.caps_dir = caps_dir;
    cfg.alloc.annot_prefix = annot_prefix;
    if (!no_limiter)
        cfg.alloc.limiter_dir = limiter_setup(limiter_dir, limiter_lib);
    if (publish_s >= 300)
        log_warn("dp", "--publish-interval %lld s: at or past the extender's default "
                 "inventory_ttl (300 s), the node goes stale between refreshes unless "
                 "inventory_ttl is raised", (long long)publish_s);
    cfg.publish_interval_s = (int)publish_s;
    cfg.api_wait_s = (int)api_wait_s;
    cfg.healthz_grace_s = (int)grace_s;
    cfg.register_timeout_ms = 15000;

    struct dp_backend *b = NULL;
    if (fake) {
        if (dp_backend_open_fake(fake, &b, &e) != 0) {
            fprintf(stderr, "gpusched device-plugin: --fake-gpus %s\n", e.msg);
            return 2;
        }
    } else if (dp_backend_open_nvml(nvml_lib, &b, &e) != 0) {
        if (fail_on_init) {
            fprintf(stderr, "gpusched device-plugin: %s\n", e.msg);
            return 1;
        }
        log_warn("dp", "%s; advertising no GPUs and waiting (--fail-on-init-error to exit)", e.msg);
        if (dp_backend_open_none(&b, &e) != 0) {
            fprintf(stderr, "gpusched device-plugin: %s\n", e.msg);
            return 1;
        }
    }

    struct dp_kube *kube = NULL;
    struct dp_api api;
    if (!no_api) {
        rc = dp_kube_open(kubeconfig, node, annot_prefix, &kube, &e);
        if (rc == 0) {
            dp_kube_api(kube, &api);
            cfg.api = &api;
            log_info("dp", "API server: on; GPUs come from the pods' %sgpu-uuids", annot_prefix);
        } else if (kubeconfig || rc != -GS_ENOENT) {
            fprintf(stderr, "gpusched device-plugin: %s\n", e.msg);
            b->close(b);
            return kubeconfig ? 2 : 1;
        } else {
            log_info("dp", "no API server (%s): IDs kubelet picks are the GPUs containers get",
                     e.msg);
        }
    }

    /* kubelet admits at most as many pods per node as there are devices; with
     * an API server the extender shares GPUs and never binds past that count
     * (docs/device-plugin.md), so room for 10 pods per GPU, as HAMi's split
     * count; without one, kubelet's IDs are the GPUs containers get, so one
     * device per GPU (two replicas of one GPU would pass as two GPUs) */
    cfg.devices.replicas = replicas ? (int)replicas : cfg.api ? DP_DEFAULT_API_REPLICAS : 1;
    log_info("dp", "%d device%s per GPU for %sgpu", cfg.devices.replicas,
             cfg.devices.replicas == 1 ? "" : "s", prefix);

    dp_grpc_init();
    struct dp_plugin *p = NULL;
    struct http_server *hs = NULL;
    int code = 0;
    if (dp_plugin_new(&cfg, b, &p, &e) != 0) {
        fprintf(stderr, "gpusched device-plugin: %s\n", e.msg);
        code = 1;
        goto out;
    }
    json_t *inv = dp_plugin_inventory(p);
    size_t ngpu = json_array_size(json_object_get(inv, "gpus"));
    json_decref(inv);
    if (ngpu == 0) {
        if (fail_on_init) {
            fprintf(stderr, "gpusched device-plugin: no GPU found on node %s\n", node);
            code = 1;
            goto out;
        }
        log_warn("dp", "no GPU found on node %s: advertising nothing", node);
    } else {
        log_info("dp", "node %s: %zu GPUs (%s backend)", node, ngpu, b->name);
    }
    if (metrics) {
        char addr[128];
        struct http_server_opts ho;
        memset(&ho, 0, sizeof ho);
        if (http_parse_listen(metrics, addr, sizeof addr, &ho.port, &e) != 0) {
            fprintf(stderr, "gpusched device-plugin: --metrics-listen: %s\n", e.msg);
            code = 2;
            goto out;
        }
        ho.addr = addr;
        ho.threads = 2;
        ho.max_body = 4096;
        ho.handler = metrics_handler;
        ho.ud = p;
        if (http_server_start(&ho, &hs, &e) != 0) {
            fprintf(stderr, "gpusched device-plugin: --metrics-listen %s: %s\n", metrics, e.msg);
            code = 1;
            goto out;
        }
        log_info("dp", "metrics on http://%s:%d/metrics", addr, http_server_port(hs));
    }

    cmd_on_signals(on_signal);
    if (dp_plugin_run(p, &stop_flag, &e) != 0) {
        fprintf(stderr, "gpusched device-plugin: %s\n", e.msg);
        code = 1;
    }
out:
    http_server_stop(hs);
    if (p)
        dp_plugin_free(p);
    dp_kube_close(kube);
    dp_grpc_shutdown();
    if (code == 0)
        log_info("dp", "stopped");
    return code;
}
