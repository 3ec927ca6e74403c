/*
 * dp/busy.c - each shared container's own GPU utilisation (dp/busy.h).
 */
#include "dp/busy.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dp/limiter.h"
#include "limiter/lim_ledger.h"
#include "limiter/lim_util.h"

#define MAX_CTRS 256
#define MAX_PROCS 128 /* per container: the ledger's slots */

struct ctr {
    char dir[1100];
    char pod[64]; /* the pod UID: the directory's name up to '_' */
    int n_gpus;
    char uuid[LIM_MAX_DEV][DP_UUID_MAX];
    int n_procs;
    uint64_t ns[MAX_PROCS];
    int pid[MAX_PROCS];
    int permille[LIM_MAX_DEV];
    int sampled[LIM_MAX_DEV];
};

/* The pod UID in a line of /proc/PID/cgroup: cgroupfs ".../pod<uid>/..." or
 * systemd "...-pod<uid with '_' for '-'>.slice". */
static void pod_of(const char *line, char *uid)
{
    const char *p = line;
    while ((p = strstr(p, "pod"))) {
        p += 3;
        size_t n = 0;
        while (n < 36 && ((p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'f') ||
                          p[n] == '-' || p[n] == '_'))
            n++;
        if (n == 36 && (p[n] == '/' || p[n] == '.' || p[n] == '\n' || p[n] == '\0')) {
            for (size_t i = 0; i < n; i++)
                uid[i] = p[i] == '_' ? '-' : p[i];
            uid[n] = '\0';
            return;
        }
    }
}

int dp_busy_proc(const char *proc_root, int pid, uint64_t *ns, int *nspid, char *pod_uid)
{
    char path[300], buf[1024];
    pod_uid[0] = '\0';
    snprintf(path, sizeof path, "%s/%d/ns/pid", proc_root, pid);
    *ns = lim_pidns(path);
    snprintf(path, sizeof path, "%s/%d/status", proc_root, pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int found = -1;
    while (fgets(buf, sizeof buf, f))
        if (strncmp(buf, "NSpid:", 6) == 0) {
            char *tok, *save = NULL;
            for (tok = strtok_r(buf + 6, " \t\n", &save); tok;
                 tok = strtok_r(NULL, " \t\n", &save))
                found = atoi(tok); /* the innermost namespace's, last */
            break;
        }
    fclose(f);
    if (found <= 0)
        return -1;
    *nspid = found;
    snprintf(path, sizeof path, "%s/%d/cgroup", proc_root, pid);
    if ((f = fopen(path, "r"))) {
        while (!pod_uid[0] && fgets(buf, sizeof buf, f))
            pod_of(buf, pod_uid);
        fclose(f);
    }
    return 0;
}

static void add_proc(void *ud, uint64_t ns, int pid)
{
    struct ctr *c = ud;
    if (c->n_procs < MAX_PROCS) {
        c->ns[c->n_procs] = ns;
        c->pid[c->n_procs++] = pid;
    }
}

/* The container under containers/<name>: its GPUs (owner file, third line)
 * and the processes of its ledger. 0, or -1 when it has neither. */
static int read_ctr(const char *dir, const char *name, struct ctr *c)
{
    char path[1200], line[DP_MAX_GPUS * DP_UUID_MAX + 16], err[300];
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s/containers/%.300s", dir, name);
    snprintf(c->pod, sizeof c->pod, "%.*s", (int)strcspn(name, "_"), name);
    snprintf(path, sizeof path, "%s/owner", c->dir);
    FILE *f = dp_limiter_fopen(path);
    if (!f)
        return -1;
    for (int i = 0; i < 3 && fgets(line, sizeof line, f); i++)
        if (i == 2) {
            char *tok, *save = NULL;
            for (tok = strtok_r(line, ",\n", &save); tok && c->n_gpus < LIM_MAX_DEV;
                 tok = strtok_r(NULL, ",\n", &save))
                snprintf(c->uuid[c->n_gpus++], DP_UUID_MAX, "%s", tok);
        }
    fclose(f);
    struct lim_ledger l;
    snprintf(path, sizeof path, "%s/ledger", c->dir);
    if (!c->n_gpus || lim_ledger_open_ro(&l, path, err, sizeof err) < 0)
        return -1;
    lim_ledger_foreach_proc(&l, add_proc, c);
    lim_ledger_close(&l);
    return c->n_procs ? 0 : -1;
}

static uint64_t *last_of(struct dp_busy *st, const char *uuid)
{
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->uuid[i], uuid) == 0)
            return &st->last_us[i];
    if (st->n == (int)(sizeof st->last_us / sizeof st->last_us[0]))
        return NULL;
    snprintf(st->uuid[st->n], DP_UUID_MAX, "%s", uuid);
    st->last_us[st->n] = 0;
    return &st->last_us[st->n++];
}

/* Adds GPU uuid's samples to the containers whose processes they name. */
static void sample_gpu(struct dp_busy *st, struct dp_backend *b, const char *uuid,
                       const char *proc_root, struct ctr *c, int nc)
{
    struct dp_proc_sample s[DP_PROC_SAMPLES_MAX];
    struct gs_err e = GS_ERR_INIT;
    uint64_t *last = last_of(st, uuid);
    int n = last ? b->proc_util(b, uuid, last, s, DP_PROC_SAMPLES_MAX, &e) : -1;
    if (n <= 0)
        return; /* nothing new (or unreadable): no sample for this GPU */
    /* the sampling periods since the last pass: their samples share a stamp */
    int periods = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < i && s[j].ts_us != s[i].ts_us)
            j++;
        periods += j == i;
    }
    /* a container's part is its processes' sum over those periods, a period
     * that names none of them counting 0: some drivers name one process a
     * period, the one that ran most (an H200 named either of two busy
     * processes at 99 %, never both), so one period alone says little */
    for (int i = 0; i < n; i++) {
        if (s[i].pid <= 0)
            continue;
        int sum = s[i].sm;
        for (int j = i + 1; j < n; j++)
            if (s[j].pid == s[i].pid) {
                sum += s[j].sm;
                s[j].pid = 0;
            }
        uint64_t ns;
        int nspid;
        char pod[64];
        if (dp_busy_proc(proc_root, s[i].pid, &ns, &nspid, pod) < 0)
            continue;
        /* by namespace and pid; else by pod and pid, when one container has it */
        int who = -1, many = 0;
        for (int k = 0; k < nc; k++)
            for (int p = 0; p < c[k].n_procs; p++)
                if (c[k].pid[p] == nspid &&
                    (ns ? c[k].ns[p] == ns : pod[0] && strcmp(c[k].pod, pod) == 0)) {
                    many += who >= 0 && who != k;
                    who = k;
                }
        for (int d = 0; who >= 0 && !many && d < c[who].n_gpus; d++)
            if (strcmp(c[who].uuid[d], uuid) == 0)
                c[who].permille[d] += sum * 10;
    }
    for (int k = 0; k < nc; k++)
        for (int d = 0; d < c[k].n_gpus; d++)
            if (strcmp(c[k].uuid[d], uuid) == 0) {
                c[k].permille[d] /= periods;
                c[k].sampled[d] = 1;
            }
}

int dp_busy_pass(struct dp_busy *st, const char *dir, struct dp_backend *b,
                 const char *proc_root)
{
    if (!b->proc_util)
        return -1;
    char path[1100];
    snprintf(path, sizeof path, "%s/containers", dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct ctr *c = NULL, one;
    int nc = 0, cap = 0, written = 0;
    struct dirent *de;
    while (nc < MAX_CTRS && (de = readdir(d))) {
        if (de->d_name[0] == '.' || read_ctr(dir, de->d_name, &one) < 0)
            continue;
        if (nc == cap) { /* most nodes hold a few shared containers */
            struct ctr *m = realloc(c, (size_t)(cap = cap ? 2 * cap : 4) * sizeof *c);
            if (!m)
                break;
            c = m;
        }
        c[nc++] = one;
    }
    closedir(d);
    /* each GPU once, in the order the containers name them */
    for (int k = 0; k < nc; k++)
        for (int g = 0; g < c[k].n_gpus; g++) {
            int seen = 0;
            for (int j = 0; j <= k && !seen; j++)
                for (int h = 0; h < (j == k ? g : c[j].n_gpus) && !seen; h++)
                    seen = strcmp(c[j].uuid[h], c[k].uuid[g]) == 0;
            if (!seen)
                sample_gpu(st, b, c[k].uuid[g], proc_root, c, nc);
        }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the limiter's clock too */
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    for (int k = 0; k < nc; k++) {
        struct lim_util u;
        int any = 0;
        if (lim_util_read(c[k].dir, &u) < 0) /* GPUs without a new sample keep theirs */
            memset(&u, 0, sizeof u);
        for (int g = 0; g < c[k].n_gpus; g++)
            if (c[k].sampled[g]) {
                uint32_t v = (uint32_t)(c[k].permille[g] > 1000 ? 1000 : c[k].permille[g]);
                uint64_t prev = u.dev[g].stamp_ns;
                double dt = prev && prev < now ? (double)(now - prev) / 1e9 : 0;
                double avg = u.dev[g].avg_ppm > 1000000 ? 1000000 : u.dev[g].avg_ppm;
                if (dt > 0 && dt < 3 * LIM_UTIL_AVG_S) /* else start from this sample */
                    avg = lim_util_avg(avg, v * 1000.0, dt, LIM_UTIL_AVG_S);
                else
                    avg = v * 1000.0;
                u.dev[g].stamp_ns = now;
                u.dev[g].permille = v;
                u.dev[g].avg_ppm = (uint32_t)(avg + 0.5);
                any = 1;
            }
        if (any && lim_util_write(c[k].dir, &u) == 0)
            written++;
    }
    free(c);
    return written;
}
