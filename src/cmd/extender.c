/*
 * cmd/extender.c - `gpusched extender`: the kube-scheduler extender.
 *
 * Standalone (--nodes FILE [--state-dir DIR]) or cluster (--kubeconfig FILE
 * or --in-cluster). `gpusched extender release NS/NAME [UID] [--listen ADDR]`
 * asks a running standalone extender to free a pod's GPUs.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "ext/cluster.h"
#include "ext/config.h"
#include "ext/nodelock.h"
#include "ext/sched.h"
#include "ext/server.h"
#include "ext/quotas.h"
#include "ext/bindq.h"
#include "ext/standalone.h"
#include "kube/client.h"
#include "util/log.h"
#include "util/metrics.h"

static const char usage[] =
    "gpusched extender (--nodes FILE [--state-dir DIR] | --kubeconfig FILE | --in-cluster) "
    "[options]\n       gpusched extender release NS/NAME [UID] [--listen HOST:PORT]";

static int release(const struct ext_config *cfg, const char *who, const char *uid)
{
    struct gs_err e = GS_ERR_INIT;
    struct kube_config kc = {0};
    struct kube_client *c = NULL;
    json_t *reply = NULL;
    char server[300], path[600];
    const char *host = cfg->listen;
    int rc;

    if (!strchr(who, '/') || strchr(strchr(who, '/') + 1, '/')) {
        fprintf(stderr, "gpusched extender release: '%s' is not NS/NAME\n", who);
        return 2;
    }
    if (strncmp(host, "0.0.0.0:", 8) == 0)
        host += 7; /* ":PORT" -> 127.0.0.1 below */
    snprintf(server, sizeof server, "%s://%s%s", cfg->tls_cert ? "https" : "http",
             host[0] == ':' ? "127.0.0.1" : "", host);
    if (uid && (!*uid || strlen(uid) > 63 || strpbrk(uid, "/?&#% "))) {
        fprintf(stderr, "gpusched extender release: '%s' is not a pod uid\n", uid);
        return 2;
    }
    snprintf(path, sizeof path, "/allocations/%s%s%s", who, uid ? "?uid=" : "", uid ? uid : "");
    kc.server = server;
    kc.insecure = 1; /* our own server on this host; its certificate may be self-signed */
    if (kube_client_new(&kc, NULL, &c, &e) < 0 ||
        (rc = kube_request(c, "DELETE", path, NULL, NULL, &reply, NULL, &e)) < 0) {
        const json_t *msg = json_object_get(reply, "error");
        fprintf(stderr, "gpusched extender release: %s\n",
                json_is_string(msg) ? json_string_value(msg) : e.msg);
        json_decref(reply);
        kube_client_free(c);
        return 1;
    }
    json_decref(reply);
    kube_client_free(c);
    printf("released %s\n", who);
    return 0;
}

struct running {
    struct ext_sched *s;
    struct ext_cluster *cl;
    struct ext_standalone *sa;
};

static void set_quotas(void *ud, struct core_quotas *set) { ext_sched_set_quotas(ud, set); }

static void collect(void *ud, struct metrics *m)
{
    struct running *r = ud;
    ext_sched_collect(r->s, m);
    ext_standalone_collect(r->sa);
    if (r->cl)
        ext_cluster_collect(r->cl);
}

int cmd_extender(int argc, char **argv)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_flags *flags = NULL;
    const struct opt *opts = ext_config_opts(&flags);
    struct ext_config cfg;
    struct metrics *m = NULL;
    struct ext_sched *s = NULL;
    struct ext_standalone *sa = NULL;
    struct ext_cluster *cl = NULL;
    struct ext_forward *fwd = NULL;
    struct ext_quotas *quotas = NULL;
    struct kube_client *kc = NULL;
    struct ext_server *srv = NULL;
    struct ext_nodelock *lock = NULL;
    enum log_level lv;
    enum log_format lf;
    int npos = 0, rc, status = 1;
    sigset_t sigs;

    if (!opts) {
        fprintf(stderr, "gpusched extender: out of memory\n");
        return 1;
    }
    ext_config_defaults(&cfg);
    rc = opt_parse(argc - 1, argv + 1, opts, &npos, &e);
    if (rc == OPT_HELP) {
        opt_usage(stdout, usage, opts);
        status = 0;
        goto out;
    }
    if (rc < 0) {
        fprintf(stderr, "gpusched extender: %s\n", e.msg);
        status = 2;
        goto out;
    }
    if (ext_flags_config_file(flags) && ext_config_load(&cfg, ext_flags_config_file(flags), &e) < 0) {
        fprintf(stderr, "gpusched extender: %s\n", e.msg);
        status = 2;
        goto out;
    }
    ext_config_apply_flags(&cfg, flags);
    if (ext_config_finish(&cfg, &e) < 0) {
        fprintf(stderr, "gpusched extender: %s\n", e.msg);
        status = 2;
        goto out;
    }
    if (npos > 0) {
        if (strcmp(argv[1], "release") == 0 && (npos == 2 || npos == 3)) {
            status = release(&cfg, argv[2], npos == 3 ? argv[3] : NULL);
        } else {
            fprintf(stderr, "gpusched extender: unexpected argument '%s'\n", argv[1]);
            status = 2;
        }
        goto out;
    }
    log_parse_level(cfg.log_level, &lv);
    log_parse_format(cfg.log_format, &lf);
    log_set_level(lv);
    log_set_format(lf);
    if (!cfg.nodes && !cfg.kubeconfig && !cfg.in_cluster) {
        fprintf(stderr, "gpusched extender: give --nodes FILE (standalone), --kubeconfig FILE or "
                        "--in-cluster\n");
        status = 2;
        goto out;
    }
    if (cfg.nodes && cfg.filter_preemption) {
        fprintf(stderr, "gpusched extender: filter_preemption: needs cluster mode (--kubeconfig "
                        "or --in-cluster): standalone has no pods to preempt\n");
        status = 2;
        goto out;
    }
    /* Every /filter and /prioritize allocates and frees buffers of 70-200 KB
     * (5,000 node names in and out). glibc would return that memory to the
     * kernel after each request (mmap/munmap, or madvise on a thread's
     * arena) and fault it back in on the next: a third of the server's CPU
     * time at 5,000 nodes. Keep it. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    /* signals go to sigwait below, not to the server threads */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    m = metrics_new();
    if (!m || ext_sched_new(&(struct ext_sched_opts){.names = &cfg.names, .policy = cfg.policy,
                                                     .top_k = (int)cfg.top_k, .metrics = m,
                                                     .filter_wait = cfg.filter_wait,
                                                     .filter_preemption =
                                                         (int)cfg.filter_preemption,
                                                     .hard_pod_affinity_weight =
                                                         cfg.hard_pod_affinity_weight
                                                             ? (int)cfg.hard_pod_affinity_weight
                                                             : EXT_HARD_AFFINITY_NONE},
                            &s, &e) < 0) {
        fprintf(stderr, "gpusched extender: %s\n", m ? e.msg : "out of memory");
        status = 2;
        goto out;
    }
    struct running running = {s, NULL, NULL};
    metrics_on_collect(m, collect, &running);
    struct ext_server_opts so = {.listen = cfg.listen, .tls_cert = cfg.tls_cert,
                                 .tls_key = cfg.tls_key, .threads = (unsigned)cfg.threads,
                                 .max_body = (size_t)cfg.max_body, .sched = s, .metrics = m};
    if (cfg.nodes) {
        if (ext_standalone_open(s, cfg.nodes, cfg.state_dir, &sa, &e) < 0 ||
            ext_standalone_metrics(sa, m, &e) < 0) {
            fprintf(stderr, "gpusched extender: %s\n", e.msg);
            status = 2;
            goto out;
        }
        running.sa = sa;
        so.allow_release = 1;
        so.bind_threads = cfg.state_dir ? EXT_BIND_THREADS : 0;
    } else {
        struct kube_config kcfg;
        rc = cfg.kubeconfig ? kube_config_load_file(cfg.kubeconfig, NULL, &kcfg, &e)
                            : kube_config_in_cluster(NULL, &kcfg, &e);
        if (rc == 0)
            rc = kube_client_new(&kcfg, NULL, &kc, &e);
        kube_config_clear(&kcfg);
        /* the node lock before the watches: their first list registers the
         * pods bound and not yet admitted as the holders of their nodes */
        if (rc == 0 && cfg.node_lock_timeout > 0) {
            rc = ext_nodelock_new(cfg.node_lock_timeout, ext_server_wake, &lock, &e);
            ext_sched_set_nodelock(s, lock);
            so.lock = lock;
            so.bind_wait_s = cfg.bind_wait;
        }
        if (rc < 0 || ext_cluster_start(kc, s, &cfg, m, &cl, &e) < 0) {
            fprintf(stderr, "gpusched extender: %s\n", e.msg);
            status = 2;
            goto out;
        }
        running.cl = cl;
        so.bind_threads = EXT_BIND_THREADS; /* binds talk to the API server */
        so.ready = ext_cluster_ready;
        so.ready_ud = cl;
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        if (cfg.leader_elect && (ext_forward_new(ext_cluster_leader, cl, cfg.identity ? cfg.identity
                                                 : host, 9, m, &fwd, &e) < 0 ||
                                 (cfg.tls_cert && ext_forward_tls(fwd, cfg.tls_cert, &e) < 0) ||
                                 (cfg.tls_ca && ext_forward_ca(fwd, cfg.tls_ca, &e) < 0))) {
            fprintf(stderr, "gpusched extender: %s\n", e.msg);
            status = 2;
            goto out;
        }
        so.forward = fwd;
    }
    if ((cfg.nodes && cfg.quotas &&
         ext_quotas_from_file(cfg.quotas, set_quotas, s, m, &quotas, &e) < 0) ||
        (!cfg.nodes && ext_quotas_watch(kc, (int)cfg.events, set_quotas, s, m, &quotas, &e) < 0)) {
        fprintf(stderr, "gpusched extender: quotas: %s\n", e.msg);
        status = 2;
        goto out;
    }
    if (ext_server_start(&so, &srv, &e) < 0) {
        fprintf(stderr, "gpusched extender: %s\n", e.msg);
        goto out;
    }
    {
        int nodes, allocs;
        ext_sched_counts(s, &nodes, &allocs);
        log_info("extender", "listening on %s (port %d), policy %s, %s mode: %d nodes, %d "
                 "allocations", cfg.listen, ext_server_port(srv), cfg.policy,
                 cfg.nodes ? "standalone" : "cluster", nodes, allocs);
    }
    int sig;
    while ((sig = sigtimedwait(&sigs, NULL, &(struct timespec){1, 0})) < 0) {
        if ((rc = ext_server_tick(srv, &e)) > 0)
            log_info("extender", "TLS certificate reloaded from %s", cfg.tls_cert);
        else if (rc < 0)
            log_error("extender", "%s", e.msg);
    }
    log_info("extender", "signal %d: shutting down", sig);
    status = 0;
out:
    ext_nodelock_shutdown(lock); /* parked binds answer before the server stops */
    ext_server_stop(srv);
    ext_forward_free(fwd);
    ext_quotas_stop(quotas);
    ext_cluster_stop(cl);
    ext_standalone_close(sa);
    kube_client_free(kc);
    ext_sched_free(s);
    ext_nodelock_free(lock);
    metrics_free(m);
    ext_config_clear(&cfg);
    ext_flags_free(flags);
    return status;
}
