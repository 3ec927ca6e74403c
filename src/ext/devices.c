/* ext/devices.c - see devices.h. */
#include <stdio.h>
#include <string.h>

#include "ext/devices.h"
#include "kube/client.h"

static int qty(const json_t *v, const char *node, const char *key, int64_t *out, struct gs_err *e)
{
    char field[400];
    snprintf(field, sizeof field, "node %s: status.allocatable[%s]", node, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = json_integer_value(v);
        return 0;
    }
    if (!json_is_string(v))
        return gs_errf(e, GS_EINVAL, "%s: not a quantity", field);
    return core_quantity_parse(json_string_value(v), 1, out, field, e);
}

int ext_devcap_parse(const json_t *node, const struct core_names *names, struct ext_devcap *out,
                     struct gs_err *e)
{
    const json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
    const char *name = kube_meta_str(node, "name"), *key;
    size_t plen = strlen(names->mig_prefix);
    json_t *v;
    int rc;

    memset(out, 0, sizeof *out);
    if (!name)
        name = "?";
    if (!json_is_object(alloc))
        return 0;
    json_object_foreach((json_t *)alloc, key, v)
    {
        if (strcmp(key, names->gpu) == 0) {
            if ((rc = qty(v, name, key, &out->gpu, e)) < 0)
                return rc;
            out->known = 1;
        } else if (strncmp(key, names->mig_prefix, plen) == 0) {
            const char *profile = key + plen;
            if (!*profile || strlen(profile) >= CORE_MIG_PROFILE_MAX)
                return gs_errf(e, GS_EINVAL, "node %s: status.allocatable[%.100s]: not a MIG "
                               "profile of at most %d characters", name, key,
                               CORE_MIG_PROFILE_MAX - 1);
            if (out->n_mig == EXT_DEV_MIG_MAX)
                return gs_errf(e, GS_EINVAL, "node %s: status.allocatable: more than %d MIG "
                               "resources", name, EXT_DEV_MIG_MAX);
            snprintf(out->mig[out->n_mig].profile, sizeof out->mig[0].profile, "%s", profile);
            if ((rc = qty(v, name, key, &out->mig[out->n_mig].count, e)) < 0)
                return rc;
            out->n_mig++;
            out->known = 1;
        }
    }
    return 0;
}

int ext_dev_need(const struct core_pod *pod, const char **profile)
{
    *profile = NULL;
    switch (pod->req.kind) {
    case CORE_REQ_WHOLE:
    case CORE_REQ_SHARED: return pod->req.num_gpu;
    case CORE_REQ_MIG: *profile = pod->req.mig_profile; return pod->req.mig_count;
    default: return 0;
    }
}

int64_t ext_dev_used(const struct core_node *n, const char *profile)
{
    int64_t used = 0;
    for (int i = 0; i < n->n_gpus; i++) {
        const struct core_gpu *g = &n->gpus[i];
        if (!profile) {
            /* a GPU in MIG mode holds only MIG pods; each other pod holding
             * this GPU took one device (a pod lists a GPU at most once) */
            if (!g->mig_enabled)
                used += g->n_pods;
            continue;
        }
        for (int k = 0; k < g->n_mig; k++)
            used += g->mig[k].used && strcmp(g->mig[k].profile, profile) == 0;
    }
    return used;
}

int ext_devcap_fits(const struct ext_devcap *cap, const struct core_node *n,
                    const struct core_pod *pod, const struct core_names *names,
                    struct core_status *st)
{
    const char *profile;
    int need = ext_dev_need(pod, &profile);
    int64_t total = 0;
    if (!cap || !cap->known || need <= 0)
        return 1;
    if (!profile) {
        total = cap->gpu;
    } else {
        for (int k = 0; k < cap->n_mig; k++)
            if (strcmp(cap->mig[k].profile, profile) == 0)
                total = cap->mig[k].count;
    }
    int64_t used = ext_dev_used(n, profile), left = total - used;
    if (left >= need)
        return 1;
    if (!st)
        return 0;
    st->plugin = "DeviceCount";
    char res[80];
    snprintf(res, sizeof res, "%.40s%.31s", profile ? names->mig_prefix : names->gpu,
             profile ? profile : "");
    if (total < need) {
        st->code = CORE_UNRESOLVABLE;
        snprintf(st->reason, sizeof st->reason, "kubelet has %lld %s devices on the node in all, "
                 "pod needs %d", (long long)total, res, need);
    } else {
        st->code = CORE_UNSCHEDULABLE;
        snprintf(st->reason, sizeof st->reason, "kubelet has %lld of %lld %s devices left on the "
                 "node (the rest held by pods bound there), pod needs %d",
                 (long long)(left < 0 ? 0 : left), (long long)total, res, need);
    }
    return 0;
}
