/* dp/alloc.c - see alloc.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "deviceplugin.pb-c.h"
#include "dp/alloc.h"
#include "dp/limiter.h"

void dp_assign_key(const struct dp_assign *a, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s/%s", a->ns, a->pod, a->container);
}

void dp_assign_uid_key(const struct dp_assign *a, char *buf, size_t cap)
{
    snprintf(buf, cap, "uid:%s/%.700s", a->uid, a->container);
}

/* ---- matching ------------------------------------------------------------- */

static const char *or_(const char *s, const char *def)
{
    return s ? s : def;
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);
    if (b)
        v = json_object_get(v, b);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static const char *annot(const json_t *pod, const char *prefix, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    return json_string_value(json_object_get(
        json_object_get(json_object_get(pod, "metadata"), "annotations"), key));
}

/* A container's count of `resource` (limits, else requests); extended
 * resources are whole numbers. -1 when the value is not one. */
static long container_count(const json_t *c, const char *resource)
{
    const json_t *res = json_object_get(c, "resources");
    const json_t *v = json_object_get(json_object_get(res, "limits"), resource);
    if (!v)
        v = json_object_get(json_object_get(res, "requests"), resource);
    if (!v)
        return 0;
    if (json_is_integer(v))
        return json_integer_value(v) >= 0 && json_integer_value(v) <= DP_MAX_GPUS * 64
                   ? (long)json_integer_value(v)
                   : -1;
    if (!json_is_string(v))
        return -1;
    const char *s = json_string_value(v);
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < 0 || x > DP_MAX_GPUS * 64)
        return -1;
    return x;
}

static int is_claimed(char *const *claimed, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(claimed[i], key) == 0)
            return 1;
    return 0;
}

static int split_uuids(const char *list, struct dp_assign *a, char uu[][DP_UUID_MAX], int *n,
                       struct gs_err *e)
{
    const char *p = list;

    *n = 0;
    while (*p) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == 0 || len >= DP_UUID_MAX)
            return gs_errf(e, GS_EINVAL, "pod %s/%s: gpu-uuids: entry %d is empty or too long",
                           a->ns, a->pod, *n);
        if (*n == DP_MAX_GPUS)
            return gs_errf(e, GS_EINVAL, "pod %s/%s: gpu-uuids: more than %d GPUs", a->ns, a->pod,
                           DP_MAX_GPUS);
        memcpy(uu[*n], p, len);
        uu[*n][len] = '\0';
        (*n)++;
        p += len + (c ? 1 : 0);
        if (c && !*p)
            return gs_errf(e, GS_EINVAL, "pod %s/%s: gpu-uuids: trailing ','", a->ns, a->pod);
    }
    if (*n == 0)
        return gs_errf(e, GS_EINVAL, "pod %s/%s: gpu-uuids: empty", a->ns, a->pod);
    return 0;
}

static int parse_int_annot(const json_t *pod, const char *prefix, const char *name, long long lo,
                           long long hi, long long *out, const struct dp_assign *a,
                           struct gs_err *e)
{
    const char *s = annot(pod, prefix, name);
    char *end;

    *out = 0;
    if (!s)
        return 0;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi)
        return gs_errf(e, GS_EINVAL, "pod %s/%s: %s%s: '%.40s' is not an integer in %lld..%lld",
                       a->ns, a->pod, prefix, name, s, lo, hi);
    *out = x;
    return 0;
}

/* A restartable init container (restartPolicy: Always): runs until the
 * pod ends, beside everything that starts after it. */
static int is_sidecar(const json_t *c)
{
    const char *rp = str_at(c, "restartPolicy", NULL);
    return rp && strcmp(rp, "Always") == 0;
}

/* Looks for the first unclaimed container of `pod` asking for n_ids
 * devices; fills *out from the pod's annotations (and out->started,
 * out->last). 1 = found, 0 = none, negative = broken annotations. */
static int match_pod(const json_t *pod, const char *resource, const char *prefix, int n_ids,
                     char *const *claimed, int n_claimed, struct dp_assign *out, struct gs_err *e)
{
    static const char *const lists[] = {"initContainers", "containers"};
    const json_t *spec = json_object_get(pod, "spec");
    char uu[DP_MAX_GPUS][DP_UUID_MAX];
    int total, found = 0, started = 0, others = 0, n_ctrs = 0;

    memset(out, 0, sizeof *out);
    snprintf(out->ns, sizeof out->ns, "%s", or_(str_at(pod, "metadata", "namespace"), "default"));
    snprintf(out->pod, sizeof out->pod, "%s", or_(str_at(pod, "metadata", "name"), ""));
    snprintf(out->uid, sizeof out->uid, "%s", or_(str_at(pod, "metadata", "uid"), ""));
    const char *kind = annot(pod, prefix, "request-kind");
    const char *at = annot(pod, prefix, "assigned-at");
    if (kind && strcmp(kind, "whole") && strcmp(kind, "shared") && strcmp(kind, "mig"))
        return gs_errf(e, GS_EINVAL, "pod %s/%s: %srequest-kind: '%.20s' is not whole, shared or mig",
                       out->ns, out->pod, prefix, kind);
    snprintf(out->kind, sizeof out->kind, "%s", kind ? kind : "whole");
    snprintf(out->assigned_at, sizeof out->assigned_at, "%s", at ? at : "");

    /* Whole/shared GPUs come as <prefix>gpu, MIG as <prefix>mig-<profile>. */
    int is_mig_res = strstr(resource, "/mig-") != NULL;
    if (is_mig_res != (strcmp(out->kind, "mig") == 0))
        return 0;

    /* Where each container's devices start in gpu-uuids, as the extender
     * sized the list (core/request.c): sidecars (restartable init
     * containers) and then app containers take consecutive places, as they
     * run together; an ordinary init container runs beside the sidecars
     * started before it only, so it starts after them and app containers
     * reuse its places (as kubelet reuses its devices). */
    long side_total = 0, side = 0, app = 0;
    const json_t *c;
    size_t i;
    json_array_foreach(json_object_get(spec, "initContainers"), i, c) {
        long cnt = container_count(c, resource);
        if (cnt > 0 && is_sidecar(c))
            side_total += cnt;
    }
    for (int l = 0; l < 2; l++) {
        const json_t *arr = json_object_get(spec, lists[l]);
        json_array_foreach(arr, i, c) {
            long cnt = container_count(c, resource);
            const char *cname = str_at(c, "name", NULL);
            char key[DP_KEY_MAX];
            if (cnt < 0)
                return gs_errf(e, GS_EINVAL, "pod %s/%s: %s[%zu].resources[%s]: not a whole number",
                               out->ns, out->pod, lists[l], i, resource);
            if (cnt == 0)
                continue;
            n_ctrs++;
            long pos = l == 1 ? side_total + app : side;
            if (l == 1)
                app += cnt;
            else if (is_sidecar(c))
                side += cnt;
            if (!cname)
                return gs_errf(e, GS_EINVAL, "pod %s/%s: %s[%zu].name: missing", out->ns, out->pod,
                               lists[l], i);
            char ukey[DP_KEY_MAX];
            struct dp_assign probe;
            snprintf(probe.ns, sizeof probe.ns, "%s", out->ns);
            snprintf(probe.pod, sizeof probe.pod, "%s", out->pod);
            snprintf(probe.uid, sizeof probe.uid, "%s", out->uid);
            snprintf(probe.container, sizeof probe.container, "%s", cname);
            dp_assign_key(&probe, key, sizeof key);
            dp_assign_uid_key(&probe, ukey, sizeof ukey);
            int done = is_claimed(claimed, n_claimed, key) || is_claimed(claimed, n_claimed, ukey);
            started |= done;
            if (found || done || cnt != n_ids) {
                others += !done; /* a container still to be allocated */
                continue;
            }
            found = 1;
            snprintf(out->container, sizeof out->container, "%s", cname);
            int rc = split_uuids(annot(pod, prefix, "gpu-uuids"), out, uu, &total, e);
            if (rc)
                return rc;
            /* a list shorter than that (written by hand, or by a version
             * that counted otherwise): start again at its beginning */
            int off = pos + cnt > total ? 0 : (int)pos;
            if (cnt > total)
                return gs_errf(e, GS_EINVAL,
                               "pod %s/%s: container %s asks for %ld devices of %s but gpu-uuids "
                               "lists %d",
                               out->ns, out->pod, cname, cnt, resource, total);
            out->n = (int)cnt;
            for (int k = 0; k < out->n; k++)
                snprintf(out->uuids[k], sizeof out->uuids[k], "%s", uu[off + k]);
            long long v;
            if (parse_int_annot(pod, prefix, "gpu-memory", 0, 100000000, &v, out, e))
                return -GS_EINVAL;
            out->mem_mib = v;
            if (parse_int_annot(pod, prefix, "gpu-milli", 0, 1000, &v, out, e))
                return -GS_EINVAL;
            out->milli = (int)v;
            const char *lim = annot(pod, prefix, "limiter");
            if (lim && strcmp(lim, "on") && strcmp(lim, "off"))
                return gs_errf(e, GS_EINVAL, "pod %s/%s: %slimiter: '%.20s' is not on or off",
                               out->ns, out->pod, prefix, lim);
            out->limiter_off = lim && strcmp(lim, "off") == 0;
        }
    }
    out->started = started;
    out->last = others == 0;
    out->n_ctrs = n_ctrs;
    return found;
}

int dp_alloc_match(const json_t *pods, const char *node, const char *resource,
                   const char *annot_prefix, int n_ids, char *const *claimed, int n_claimed,
                   struct dp_assign *out, struct gs_err *e)
{
    const json_t *items = json_is_array(pods) ? pods : json_object_get(pods, "items");
    struct dp_assign cand;
    int found = 0, n_started = 0;
    char names[3][520];
    size_t i;
    const json_t *pod;
    char done_key[160];

    snprintf(done_key, sizeof done_key, "%sallocated-at", annot_prefix);

    if (!json_is_array(items))
        return gs_errf(e, GS_EPROTO, "pod list: no items array");
    json_array_foreach(items, i, pod) {
        const char *phase = str_at(pod, "status", "phase");
        const char *on = annot(pod, annot_prefix, "node");
        const char *uuids = annot(pod, annot_prefix, "gpu-uuids");
        const char *spec_node = str_at(pod, "spec", "nodeName");
        const json_t *md = json_object_get(pod, "metadata");
        if (!uuids || json_object_get(md, "deletionTimestamp") ||
            json_object_get(json_object_get(md, "annotations"), done_key))
            continue; /* no assignment, going, or every container served */
        if (phase && strcmp(phase, "Pending") != 0)
            continue;
        /* admitted: kubelet allocates every container of a pod inside its
         * admission, and sets startTime after it. The extender takes
         * startTime as the end of the pod's admission too (its node lock),
         * and may bind the node's next GPU pod: this one must not be taken
         * for it (a pod whose allocated-at mark failed, still Pending in
         * an image pull or an init container's backoff) */
        if (str_at(pod, "status", "startTime"))
            continue;
        if (!(on && strcmp(on, node) == 0) && !(spec_node && strcmp(spec_node, node) == 0))
            continue;
        if (on && strcmp(on, node) != 0)
            continue; /* bound here, but assigned elsewhere: not ours to serve */
        int rc = match_pod(pod, resource, annot_prefix, n_ids, claimed, n_claimed, &cand, e);
        if (rc < 0)
            return rc;
        if (rc == 0)
            continue;
        /* kubelet allocates a pod's containers one after another: a pod
         * with a container served is the one being admitted */
        if (cand.started && !n_started++)
            *out = cand;
        else if (!found)
            *out = cand;
        if (found < 3)
            snprintf(names[found], sizeof names[found], "%s/%s", cand.ns, cand.pod);
        found++;
    }
    if (!found)
        return gs_errf(e, GS_ENOENT,
                       "no pending pod on node %s has a container, not yet allocated, that asks "
                       "for %d %s and has a gpusched assignment (%sgpu-uuids)",
                       node, n_ids, resource, annot_prefix);
    if (n_started == 1 || found == 1)
        return 0;
    /* a guess could give this container another pod's GPUs: refuse */
    return gs_errf(e, GS_ECONFLICT,
                   "%d pods on node %s wait for %d %s (%s, %s%s): cannot tell which one kubelet "
                   "is admitting; the extender binds one GPU pod per node at a time (node lock "
                   "off, expired, or pods bound around it?); delete the pod to retry",
                   found, node, n_ids, resource, names[0], names[1], found > 2 ? ", ..." : "");
}

/* ---- the Allocate answer -------------------------------------------------- */

struct kvs {
    int n;
    V1beta1__ContainerAllocateResponse__EnvsEntry env[12];
    V1beta1__ContainerAllocateResponse__EnvsEntry *envp[12];
    V1beta1__ContainerAllocateResponse__AnnotationsEntry ann[4];
    V1beta1__ContainerAllocateResponse__AnnotationsEntry *annp[4];
    int n_ann;
    /* nvidiactl, uvm, uvm-tools, modeset; a node per GPU; two per MIG instance */
    V1beta1__DeviceSpec dev[3 * DP_MAX_GPUS + 4];
    V1beta1__DeviceSpec *devp[3 * DP_MAX_GPUS + 4];
    int n_dev;
    V1beta1__Mount mnt[DP_LIM_MOUNTS + DP_MAX_GPUS]; /* the limiter's; one per GPU */
    V1beta1__Mount *mntp[DP_LIM_MOUNTS + DP_MAX_GPUS];
    struct dp_limiter_mount lm[DP_LIM_MOUNTS];
    int n_mnt;
    V1beta1__CDIDevice cdi[DP_MAX_GPUS];
    V1beta1__CDIDevice *cdip[DP_MAX_GPUS];
    int n_cdi;
    char cdi_names[DP_MAX_GPUS * (128 + DP_UUID_MAX)]; /* the CDI annotation's value */
    /* up to 16 UUIDs joined; two per device spec; one per GPU for its mount
     * and one for its CDI name */
    char strs[192][1600];
    int n_str;
};

/* Strings the packed message points to live in the kvs until packing. */
static char *keep_s(struct kvs *k, const char *a, const char *b)
{
    char *s = k->strs[k->n_str++];
    snprintf(s, sizeof k->strs[0], "%s%s", a, b);
    return s;
}

static char *keep_i(struct kvs *k, long long x, const char *suffix)
{
    char *s = k->strs[k->n_str++];
    snprintf(s, sizeof k->strs[0], "%lld%s", x, suffix);
    return s;
}

static void env(struct kvs *k, const char *key, char *val)
{
    v1beta1__container_allocate_response__envs_entry__init(&k->env[k->n]);
    k->env[k->n].key = (char *)key;
    k->env[k->n].value = val;
    k->envp[k->n] = &k->env[k->n];
    k->n++;
}

static void ann(struct kvs *k, char *key, char *val)
{
    v1beta1__container_allocate_response__annotations_entry__init(&k->ann[k->n_ann]);
    k->ann[k->n_ann].key = key;
    k->ann[k->n_ann].value = val;
    k->annp[k->n_ann] = &k->ann[k->n_ann];
    k->n_ann++;
}

static void mount(struct kvs *k, char *host, char *container, int read_only)
{
    V1beta1__Mount *m = &k->mnt[k->n_mnt];
    v1beta1__mount__init(m);
    m->host_path = host;
    m->container_path = container;
    m->read_only = read_only;
    k->mntp[k->n_mnt++] = m;
}

/* ---- device list strategies --------------------------------------------- */

int dp_alloc_parse_lists(const char *s, unsigned *out, struct gs_err *e)
{
    static const struct {
        const char *name;
        unsigned bit;
    } words[] = {{"envvar", DP_LIST_ENVVAR},
                 {"volume-mounts", DP_LIST_MOUNTS},
                 {"cdi-annotations", DP_LIST_CDI_ANNOTATIONS},
                 {"cdi-cri", DP_LIST_CDI_CRI}};
    unsigned bits = 0;
    const char *p = s;
    for (;;) {
        size_t len = strcspn(p, ",");
        size_t w = 0;
        while (w < sizeof words / sizeof words[0] &&
               (strlen(words[w].name) != len || strncmp(words[w].name, p, len) != 0))
            w++;
        if (w == sizeof words / sizeof words[0])
            return gs_errf(e, GS_EINVAL,
                           "\"%.*s\": not a device list strategy (envvar, volume-mounts, "
                           "cdi-annotations, cdi-cri)",
                           (int)(len > 64 ? 64 : len), p);
        bits |= words[w].bit;
        if (!p[len])
            break;
        p += len + 1;
    }
    *out = bits;
    return 0;
}

static int alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* One part of a CDI kind: 1..63 characters of alnum and `extra`, starting
 * and ending with a letter or digit. */
static int kind_part(const char *p, size_t len, const char *extra)
{
    if (len == 0 || len > 63 || !alnum(p[0]) || !alnum(p[len - 1]))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!alnum(p[i]) && !strchr(extra, p[i]))
            return 0;
    return 1;
}

int dp_alloc_check_cdi_kind(const char *kind, struct gs_err *e)
{
    const char *slash = strchr(kind, '/');
    if (!slash || !kind_part(kind, (size_t)(slash - kind), "-_.") ||
        !kind_part(slash + 1, strlen(slash + 1), "-_"))
        return gs_errf(e, GS_EINVAL,
                       "\"%.100s\": not a CDI kind (vendor/class, e.g. nvidia.com/gpu)", kind);
    return 0;
}

/* The device names: NVIDIA_VISIBLE_DEVICES (the UUIDs, the mount
 * directory, or "void"), the mounts, the CDI annotation and CDIDevices. */
static void device_lists(struct kvs *k, const struct dp_alloc_opts *o, const struct dp_assign *a,
                         char *list)
{
    unsigned lists = o->lists ? o->lists : DP_LIST_ENVVAR;
    const char *kind = o->cdi_kind ? o->cdi_kind : DP_CDI_KIND_DEFAULT;
    if (lists & DP_LIST_MOUNTS) {
        env(k, "NVIDIA_VISIBLE_DEVICES", (char *)DP_LIST_MOUNT_DIR);
        for (int i = 0; i < a->n; i++)
            mount(k, (char *)"/dev/null", keep_s(k, DP_LIST_MOUNT_DIR "/", a->uuids[i]), 1);
    } else {
        env(k, "NVIDIA_VISIBLE_DEVICES", lists & DP_LIST_ENVVAR ? list : (char *)"void");
    }
    if (!(lists & (DP_LIST_CDI_ANNOTATIONS | DP_LIST_CDI_CRI)))
        return;
    char *names = k->cdi_names;
    size_t len = 0;
    for (int i = 0; i < a->n; i++) {
        char *name = keep_s(k, kind, "=");
        size_t nl = strlen(name);
        snprintf(name + nl, sizeof k->strs[0] - nl, "%s", a->uuids[i]);
        /* fits: 16 names of a checked kind (<= 127) '=' a UUID (< DP_UUID_MAX) */
        if (len < sizeof k->cdi_names)
            len += (size_t)snprintf(names + len, sizeof k->cdi_names - len, "%s%s",
                                    i ? "," : "", name);
        v1beta1__cdidevice__init(&k->cdi[k->n_cdi]);
        k->cdi[k->n_cdi].name = name;
        k->cdip[k->n_cdi] = &k->cdi[k->n_cdi];
        k->n_cdi++;
    }
    if (!(lists & DP_LIST_CDI_CRI))
        k->n_cdi = 0;
    if (lists & DP_LIST_CDI_ANNOTATIONS) {
        /* cdi.k8s.io/<plugin>_<id>: one key per container and resource,
         * its name part (<= 63 characters) of the first UUID's name-safe
         * characters */
        char *key = keep_s(k, "cdi.k8s.io/gpusched_", "");
        size_t kl = strlen(key);
        for (const char *c = a->uuids[0]; *c && kl < 11 + 63; c++)
            if (alnum(*c) || *c == '-' || *c == '_' || *c == '.')
                key[kl++] = *c;
        while (!alnum(key[kl - 1])) /* a name ends with a letter or digit */
            kl--;
        key[kl] = '\0';
        ann(k, key, names);
    }
}

/* Adds /dev/<name> when <dev_dir>/<name> exists: dev_dir is where the
 * plugin sees the host's /dev (itself, or a mount of it), and the spec
 * names the host path kubelet will use. */
static void devspec(struct kvs *k, const char *dev_dir, const char *name)
{
    struct stat st;
    char *seen = keep_s(k, dev_dir, "/");
    size_t sl = strlen(seen);

    snprintf(seen + sl, sizeof k->strs[0] - sl, "%s", name);
    if (stat(seen, &st) != 0)
        return;
    V1beta1__DeviceSpec *d = &k->dev[k->n_dev];
    v1beta1__device_spec__init(d);
    d->container_path = keep_s(k, "/dev/", name);
    d->host_path = d->container_path;
    d->permissions = (char *)"rw";
    k->devp[k->n_dev++] = d;
}

/* The device-file minor the driver gave a MIG capability: the
 * "DeviceFileMinor: N" line of <caps_dir>/<path>/access; -1 when absent. */
static int cap_minor(const char *caps_dir, const char *path)
{
    char file[512], line[128];
    int minor = -1;
    snprintf(file, sizeof file, "%s/%s/access", caps_dir, path);
    FILE *f = fopen(file, "r");
    if (!f)
        return -1;
    while (minor < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "DeviceFileMinor: %d", &minor) != 1 || minor < 0)
            minor = -1;
    fclose(f);
    return minor;
}

/* A MIG instance's two capability nodes (its GPU instance's and its
 * compute instance's /dev/nvidia-caps/nvidia-cap<N>), which a container
 * needs to open it when no NVIDIA container runtime adds them. */
static void mig_devspecs(struct kvs *k, const struct dp_alloc_opts *o, const struct dp_gpu *g,
                         const struct dp_mig *mi)
{
    char path[128], name[64];
    snprintf(path, sizeof path, "gpu%d/mig/gi%u", g->minor, mi->gi);
    for (int level = 0; level < 2; level++) {
        if (level)
            snprintf(path + strlen(path), sizeof path - strlen(path), "/ci%u", mi->ci);
        int minor = cap_minor(o->caps_dir, path);
        if (minor >= 0) {
            snprintf(name, sizeof name, "nvidia-caps/nvidia-cap%d", minor);
            devspec(k, o->dev_dir, name);
        }
    }
}

/* The in-container limiter for a container holding a GPU share: the
 * library, /etc/ld.so.preload naming it, and the container's ledger. */
static int limiter(struct kvs *k, const struct dp_alloc_opts *o, const struct dp_assign *a,
                   char *uuids, struct gs_err *e)
{
    int shares = a->mem_mib > 0 || (a->milli > 0 && a->milli < 1000);
    if (!o->limiter_dir || a->limiter_off || !shares || strcmp(a->kind, "shared") || !a->uid[0])
        return 0;
    /* what the environment says, for processes started without it */
    char limits[1400];
    int w = snprintf(limits, sizeof limits, "GPUSCHED_GPU_UUIDS=%s\n", uuids);
    if (a->mem_mib > 0 && w < (int)sizeof limits)
        w += snprintf(limits + w, sizeof limits - (size_t)w, "CUDA_DEVICE_MEMORY_LIMIT=%lldm\n",
                      (long long)a->mem_mib);
    if (a->milli > 0 && a->milli < 1000 && w < (int)sizeof limits)
        snprintf(limits + w, sizeof limits - (size_t)w,
                 "GPUSCHED_GPU_MILLI=%d\nCUDA_DEVICE_SM_LIMIT=%d\n", a->milli,
                 (a->milli + 9) / 10);
    int rc = dp_limiter_container(o->limiter_dir, a->uid, a->ns, a->pod, a->container, a->n,
                                  a->uuids, limits, k->lm, e);
    if (rc)
        return rc;
    for (int i = 0; i < DP_LIM_MOUNTS; i++)
        mount(k, k->lm[i].host, k->lm[i].container, k->lm[i].read_only);
    env(k, "GPUSCHED_LIMITER_DIR", (char *)DP_LIM_CTR_LEDGER);
    /* the GPUs by the numbering of the ledger and the util file, whatever a
     * process of the container sets CUDA_VISIBLE_DEVICES to */
    env(k, "GPUSCHED_GPU_UUIDS", uuids);
    return 0;
}

static int fill(const struct dp_inventory *inv, const struct dp_assign *a,
                const struct dp_alloc_opts *o, struct kvs *k,
                V1beta1__ContainerAllocateResponse *cr, struct gs_err *e)
{
    char list[1600] = "";
    int minors[DP_MAX_GPUS], n_minor = 0;

    memset(k, 0, sizeof *k);
    if (a->n < 1 || a->n > DP_MAX_GPUS)
        return gs_errf(e, GS_EINVAL, "assignment has %d GPUs", a->n);
    for (int i = 0; i < a->n; i++) {
        const struct dp_gpu *g = dp_inventory_find(inv, a->uuids[i]);
        if (!g)
            return gs_errf(e, GS_ENOENT, "GPU %s (assigned to %s/%s) is not on this node",
                           a->uuids[i], a->pod[0] ? a->ns : "-", a->pod[0] ? a->pod : "-");
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i ? "," : "", a->uuids[i]);
        int seen = 0;
        for (int m = 0; m < n_minor; m++)
            seen |= minors[m] == g->minor;
        if (!seen && g->minor >= 0)
            minors[n_minor++] = g->minor;
    }
    char *l = keep_s(k, list, "");
    device_lists(k, o, a, l);
    env(k, "CUDA_VISIBLE_DEVICES", l);
    if (a->mem_mib > 0 && strcmp(a->kind, "shared") == 0) {
        env(k, "GPUSCHED_GPU_MEMORY_MIB", keep_i(k, a->mem_mib, ""));
        env(k, "CUDA_DEVICE_MEMORY_LIMIT", keep_i(k, a->mem_mib, "m"));
    }
    if (a->milli > 0 && a->milli < 1000 && strcmp(a->kind, "shared") == 0) {
        env(k, "GPUSCHED_GPU_MILLI", keep_i(k, a->milli, ""));
        env(k, "CUDA_DEVICE_SM_LIMIT", keep_i(k, (a->milli + 9) / 10, ""));
    }
    int lrc = limiter(k, o, a, l, e);
    if (lrc)
        return lrc;
    if (a->pod[0]) {
        char *who = keep_s(k, a->ns, "/");
        size_t wl = strlen(who);
        snprintf(who + wl, sizeof k->strs[0] - wl, "%s", a->pod);
        env(k, "GPUSCHED_POD", who);
        ann(k, keep_s(k, o->annot_prefix, "pod"), who);
    }
    ann(k, keep_s(k, o->annot_prefix, "gpu-uuids"), l);
    if (o->dev_dir) {
        devspec(k, o->dev_dir, "nvidiactl");
        devspec(k, o->dev_dir, "nvidia-uvm");
        devspec(k, o->dev_dir, "nvidia-uvm-tools");
        devspec(k, o->dev_dir, "nvidia-modeset");
        for (int m = 0; m < n_minor; m++) {
            char name[32];
            snprintf(name, sizeof name, "nvidia%d", minors[m]);
            devspec(k, o->dev_dir, name);
        }
        for (int i = 0; i < a->n && o->caps_dir; i++) {
            const struct dp_gpu *g = dp_inventory_find(inv, a->uuids[i]);
            for (int m = 0; g && g->minor >= 0 && m < g->n_mig; m++)
                if (strcmp(g->mig[m].uuid, a->uuids[i]) == 0)
                    mig_devspecs(k, o, g, &g->mig[m]);
        }
    }
    v1beta1__container_allocate_response__init(cr);
    cr->n_envs = (size_t)k->n;
    cr->envs = k->envp;
    cr->n_annotations = (size_t)k->n_ann;
    cr->annotations = k->annp;
    cr->n_devices = (size_t)k->n_dev;
    cr->devices = k->devp;
    cr->n_mounts = (size_t)k->n_mnt;
    cr->mounts = k->mntp;
    cr->n_cdi_devices = (size_t)k->n_cdi;
    cr->cdi_devices = k->cdip;
    return 0;
}

int dp_alloc_pack(const struct dp_inventory *inv, const struct dp_assign *a, int n,
                  const struct dp_alloc_opts *o, uint8_t **out, size_t *len, struct gs_err *e)
{
    V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
    struct kvs *k = calloc((size_t)n, sizeof *k);
    V1beta1__ContainerAllocateResponse *cr = calloc((size_t)n, sizeof *cr);
    V1beta1__ContainerAllocateResponse **crp = calloc((size_t)n, sizeof *crp);
    int rc = 0;

    *out = NULL;
    *len = 0;
    if (!k || !cr || !crp) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n && !rc; i++) {
        rc = fill(inv, &a[i], o, &k[i], &cr[i], e);
        crp[i] = &cr[i];
    }
    if (rc)
        goto done;
    resp.n_container_responses = (size_t)n;
    resp.container_responses = crp;
    *len = v1beta1__allocate_response__get_packed_size(&resp);
    *out = malloc(*len ? *len : 1);
    if (!*out) {
        *len = 0;
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto done;
    }
    v1beta1__allocate_response__pack(&resp, *out);
done:
    free(k);
    free(cr);
    free(crp);
    return rc;
}
