/*
 * ext/config.h - the extender's settings: defaults, YAML config file, flags.
 *
 * Every setting is one row of a table (key, type, help): the same row
 * serves the config file key ("top_k"), the flag ("--top-k"), and --help.
 * Precedence: defaults < config file < flags. Unknown config keys and
 * values of the wrong type are errors naming the key.
 *
 * Ownership: strings in struct ext_config are owned by it and released by
 * ext_config_clear().
 */
#ifndef GPUSCHED_EXT_CONFIG_H
#define GPUSCHED_EXT_CONFIG_H

#include "core/request.h"
#include "util/err.h"
#include "util/opt.h"

struct ext_config {
    char *listen, *tls_cert, *tls_key, *tls_ca;
    char *policy;
    long top_k;
    long hard_pod_affinity_weight;        /* kube-scheduler's InterPodAffinityArgs */
    char *nodes, *state_dir;              /* standalone */
    char *quotas;                         /* standalone: GPUQuota file */
    char *kubeconfig;                     /* cluster; in_cluster without it */
    long in_cluster;
    double inventory_ttl;                 /* seconds; 0 = never stale */
    long leader_elect;
    char *lease_name, *lease_namespace, *identity;
    double lease_duration;
    char *workload_configmap;             /* cluster: saved learned workload; "" = off */
    double workload_save;                 /* seconds between saves */
    long nudge;                           /* nudge unschedulable GPU pods when GPUs free up */
    long events;                          /* post Events on pods */
    long filter_preemption;               /* cluster: preempt for GPU pods from /filter */
    double node_lock_timeout;             /* seconds a bound GPU pod holds its node; 0 = no lock */
    double bind_wait;                     /* seconds a /bind waits for a held node */
    double filter_wait;                   /* seconds a /filter waits for the bind before it */
    char *log_level, *log_format;
    long threads, max_body;
    /* resource and annotation names */
    char *res_gpu, *res_gpu_memory, *res_gpu_cores, *res_vcuda_core, *res_vcuda_memory,
        *res_mig_prefix, *annotation_prefix;
    struct core_names names;              /* points into the strings above */
};

void ext_config_defaults(struct ext_config *c);
/* Applies a YAML file over *c. */
int ext_config_load(struct ext_config *c, const char *path, struct gs_err *e);
/* Checks values and fills c->names. */
int ext_config_finish(struct ext_config *c, struct gs_err *e);
void ext_config_clear(struct ext_config *c);

/* The flag table: flags write into `flags` (a struct cleared to "unset"),
 * then ext_config_apply_flags copies the set ones over *c. */
struct ext_flags;
const struct opt *ext_config_opts(struct ext_flags **flags);
void ext_config_apply_flags(struct ext_config *c, struct ext_flags *flags);
const char *ext_flags_config_file(const struct ext_flags *flags);
void ext_flags_free(struct ext_flags *flags);

#endif
