/*
 * sim/sim_trace.c - parse, check and write openb-schema CSV traces.
 *
 * A small strict CSV reader: one record per line (LF or CRLF), fields split
 * on commas, no quoting (the schema has no field that needs it), blank lines
 * skipped, lines and fields bounded. Columns are found by header name.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/request.h"
#include "sim/sim_trace.h"
#include "util/buf.h"

#define LINE_MAX_LEN 65536
#define FIELDS_MAX 64
#define ROWS_MAX 10000000

struct csv {
    const char *p, *end, *file;
    int line;
    int nf;
    int header_nf; /* the header's fields: no row has more */
    const char *f[FIELDS_MAX];
    int flen[FIELDS_MAX];
};

/* Reads the next non-blank record; returns 1, 0 at the end, or <0. */
static int csv_next(struct csv *c, struct gs_err *e)
{
    for (;;) {
        if (c->p >= c->end)
            return 0;
        const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
        const char *stop = nl ? nl : c->end;
        c->line++;
        if (stop - c->p > LINE_MAX_LEN)
            return gs_errf(e, GS_EINVAL, "%s:%d: line longer than %d bytes", c->file, c->line,
                           LINE_MAX_LEN);
        const char *s = c->p;
        const char *t = stop;
        c->p = nl ? nl + 1 : c->end;
        if (t > s && t[-1] == '\r')
            t--;
        const char *q = s;
        while (q < t && (*q == ' ' || *q == '\t'))
            q++;
        if (q == t)
            continue; /* blank line */
        c->nf = 0;
        for (;;) {
            const char *comma = memchr(s, ',', (size_t)(t - s));
            const char *fe = comma ? comma : t;
            if (c->nf == FIELDS_MAX)
                return gs_errf(e, GS_EINVAL, "%s:%d: more than %d fields", c->file, c->line,
                               FIELDS_MAX);
            const char *fs = s;
            while (fs < fe && (*fs == ' ' || *fs == '\t'))
                fs++;
            const char *fz = fe;
            while (fz > fs && (fz[-1] == ' ' || fz[-1] == '\t'))
                fz--;
            for (const char *x = fs; x < fz; x++)
                if (*x == '"' || *x == '\0')
                    return gs_errf(e, GS_EINVAL, "%s:%d: column %d: quotes and NUL bytes are "
                                   "not supported", c->file, c->line, c->nf + 1);
            c->f[c->nf] = fs;
            c->flen[c->nf] = (int)(fz - fs);
            c->nf++;
            if (!comma)
                break;
            s = comma + 1;
        }
        return 1;
    }
}

struct col {
    const char *name;  /* header name */
    const char *alt;   /* accepted alias or NULL */
    int required;
    int idx;           /* 0-based field index, -1 absent */
};

static int csv_header(struct csv *c, struct col *cols, int ncols, struct gs_err *e)
{
    int rc = csv_next(c, e);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return gs_errf(e, GS_EINVAL, "%s: empty file (expected a header line)", c->file);
    c->header_nf = c->nf;
    for (int k = 0; k < ncols; k++) {
        cols[k].idx = -1;
        for (int i = 0; i < c->nf; i++) {
            int len = c->flen[i];
            if ((len == (int)strlen(cols[k].name) && memcmp(c->f[i], cols[k].name, (size_t)len) == 0) ||
                (cols[k].alt && len == (int)strlen(cols[k].alt) &&
                 memcmp(c->f[i], cols[k].alt, (size_t)len) == 0)) {
                cols[k].idx = i;
                break;
            }
        }
        if (cols[k].idx < 0 && cols[k].required)
            return gs_errf(e, GS_EINVAL, "%s:%d: missing column '%s' in the header", c->file,
                           c->line, cols[k].name);
    }
    return 0;
}

static int field_err(const struct csv *c, const struct col *col, struct gs_err *e,
                     const char *what)
{
    return gs_errf(e, GS_EINVAL, "%s:%d: column %d (%s): '%.*s' %s", c->file, c->line,
                   col->idx + 1, col->name, c->flen[col->idx] > 64 ? 64 : c->flen[col->idx],
                   c->f[col->idx], what);
}

static int get_int(const struct csv *c, const struct col *col, int64_t lo, int64_t hi,
                   int64_t *out, struct gs_err *e)
{
    const char *s = c->f[col->idx];
    int len = c->flen[col->idx];
    char buf[32];
    if (len == 0)
        return field_err(c, col, e, "is empty, expected an integer");
    if (len >= (int)sizeof buf)
        return field_err(c, col, e, "is too long for an integer");
    memcpy(buf, s, (size_t)len);
    buf[len] = '\0';
    char *endp;
    errno = 0;
    long long v = strtoll(buf, &endp, 10);
    if (*endp || endp == buf || (buf[0] != '-' && (buf[0] < '0' || buf[0] > '9')))
        return field_err(c, col, e, "is not an integer");
    if (errno == ERANGE || v < lo || v > hi) {
        char msg[96];
        snprintf(msg, sizeof msg, "is out of range %lld..%lld", (long long)lo, (long long)hi);
        return field_err(c, col, e, msg);
    }
    *out = v;
    return 0;
}

static int get_str(const struct csv *c, const struct col *col, char *out, size_t size,
                   struct gs_err *e)
{
    if (col->idx < 0) {
        out[0] = '\0';
        return 0;
    }
    int len = c->flen[col->idx];
    if ((size_t)len >= size) {
        char msg[64];
        snprintf(msg, sizeof msg, "is longer than %zu bytes", size - 1);
        return field_err(c, col, e, msg);
    }
    memcpy(out, c->f[col->idx], (size_t)len);
    out[len] = '\0';
    return 0;
}

/* An optional timestamp: absent column or empty field -> -1. */
static int get_time(const struct csv *c, const struct col *col, int64_t *out, struct gs_err *e)
{
    *out = -1;
    if (col->idx < 0 || c->flen[col->idx] == 0)
        return 0;
    return get_int(c, col, 0, SIM_MAX_TIME, out, e);
}

static int check_fields(const struct csv *c, const struct col *cols, int ncols, struct gs_err *e)
{
    /* a ',' where '|' was meant (gpu_spec "V100M16,V100M32") must not drop
     * the rest of the row */
    if (c->nf > c->header_nf)
        return gs_errf(e, GS_EINVAL, "%s:%d: %d fields, the header has %d (a list in a field "
                       "is written with '|')", c->file, c->line, c->nf, c->header_nf);
    for (int k = 0; k < ncols; k++)
        if (cols[k].idx >= c->nf)
            return gs_errf(e, GS_EINVAL, "%s:%d: %d fields, column %d (%s) is missing", c->file,
                           c->line, c->nf, cols[k].idx + 1, cols[k].name);
    return 0;
}

/* Capacity is 64, then doubles: grow when n is 0 or a power of two >= 64. */
static int grow(void **arr, int n, size_t elem)
{
    if (n != 0 && (n < 64 || (n & (n - 1))))
        return 0;
    void *p = realloc(*arr, (size_t)(n ? 2 * n : 64) * elem);
    if (!p)
        return -1;
    *arr = p;
    return 0;
}

static int cmp_node_name(const void *a, const void *b)
{
    const struct sim_node *x = *(const struct sim_node *const *)a;
    const struct sim_node *y = *(const struct sim_node *const *)b;
    return strcmp(x->name, y->name);
}

int sim_trace_parse_nodes(struct sim_trace *t, const char *buf, size_t len, const char *file,
                          struct gs_err *e)
{
    struct csv c = {buf, buf + len, file, 0, 0, 0, {0}, {0}};
    struct col cols[] = {
        {"sn", "name", 1, -1}, {"cpu_milli", NULL, 1, -1}, {"memory_mib", NULL, 1, -1},
        {"gpu", "num_gpu", 1, -1}, {"model", NULL, 1, -1},
    };
    enum { C_SN, C_CPU, C_MEM, C_GPU, C_MODEL, NCOLS };
    int rc, first = t->n_nodes;

    if (len > SIM_MAX_FILE)
        return gs_errf(e, GS_ETOOBIG, "%s: larger than %u MiB", file, SIM_MAX_FILE >> 20);
    if ((rc = csv_header(&c, cols, NCOLS, e)) < 0)
        return rc;
    while ((rc = csv_next(&c, e)) > 0) {
        if (t->n_nodes >= ROWS_MAX)
            return gs_errf(e, GS_ETOOBIG, "%s:%d: more than %d rows", file, c.line, ROWS_MAX);
        if ((rc = check_fields(&c, cols, NCOLS, e)) < 0)
            return rc;
        if (grow((void **)&t->nodes, t->n_nodes, sizeof *t->nodes) < 0)
            return gs_errf(e, GS_ENOMEM, "%s:%d: out of memory", file, c.line);
        struct sim_node *n = &t->nodes[t->n_nodes];
        int64_t v;
        memset(n, 0, sizeof *n);
        n->line = c.line;
        if ((rc = get_str(&c, &cols[C_SN], n->name, sizeof n->name, e)) < 0)
            return rc;
        if (!n->name[0])
            return field_err(&c, &cols[C_SN], e, "is empty, expected a node name");
        if ((rc = get_int(&c, &cols[C_CPU], 0, INT64_C(1) << 40, &n->cpu_milli, e)) < 0 ||
            (rc = get_int(&c, &cols[C_MEM], 0, INT64_C(1) << 40, &n->mem_mib, e)) < 0 ||
            (rc = get_int(&c, &cols[C_GPU], 0, SIM_MAX_GPUS, &v, e)) < 0)
            return rc;
        n->gpus = (int)v;
        if ((rc = get_str(&c, &cols[C_MODEL], n->model, sizeof n->model, e)) < 0)
            return rc;
        if (n->gpus > 0 && !n->model[0])
            return field_err(&c, &cols[C_MODEL], e, "is empty, but the node has GPUs");
        if (strchr(n->model, '|'))
            return field_err(&c, &cols[C_MODEL], e, "contains '|'");
        t->n_nodes++;
        t->total_gpus += n->gpus;
    }
    if (rc < 0)
        return rc;
    if (t->n_nodes == first)
        return gs_errf(e, GS_EINVAL, "%s: no nodes after the header", file);
    /* names must be unique */
    int n = t->n_nodes;
    const struct sim_node **order = malloc((size_t)n * sizeof *order);
    if (!order)
        return gs_errf(e, GS_ENOMEM, "%s: out of memory", file);
    for (int i = 0; i < n; i++)
        order[i] = &t->nodes[i];
    qsort(order, (size_t)n, sizeof *order, cmp_node_name);
    for (int i = 1; i < n; i++)
        if (strcmp(order[i]->name, order[i - 1]->name) == 0) {
            const struct sim_node *a = order[i]->line > order[i - 1]->line ? order[i] : order[i - 1];
            const struct sim_node *b = a == order[i] ? order[i - 1] : order[i];
            rc = gs_errf(e, GS_EINVAL, "%s:%d: column %d (sn): node '%s' already defined on "
                         "line %d", file, a->line, cols[C_SN].idx + 1, a->name, b->line);
            free(order);
            return rc;
        }
    free(order);
    return 0;
}

static int check_spec(const struct csv *c, const struct col *col, const char *spec,
                      struct gs_err *e)
{
    int n = 0;
    const char *p = spec;
    if (!*p)
        return 0;
    for (;;) {
        size_t len = strcspn(p, "|");
        if (len == 0)
            return field_err(c, col, e, "has an empty model name");
        if (len >= CORE_MODEL_MAX)
            return field_err(c, col, e, "has a model name that is too long");
        if (++n > CORE_MAX_TYPES) {
            char msg[64];
            snprintf(msg, sizeof msg, "lists more than %d models", CORE_MAX_TYPES);
            return field_err(c, col, e, msg);
        }
        p += len;
        if (!*p)
            return 0;
        p++;
    }
}

int sim_trace_parse_pods(struct sim_trace *t, const char *buf, size_t len, const char *file,
                         struct gs_err *e)
{
    struct csv c = {buf, buf + len, file, 0, 0, 0, {0}, {0}};
    struct col cols[] = {
        {"name", NULL, 1, -1},      {"cpu_milli", NULL, 1, -1}, {"memory_mib", NULL, 1, -1},
        {"num_gpu", NULL, 1, -1},   {"gpu_milli", NULL, 1, -1}, {"gpu_spec", NULL, 0, -1},
        {"creation_time", NULL, 0, -1}, {"deletion_time", NULL, 0, -1},
        {"scheduled_time", NULL, 0, -1},
    };
    enum { C_NAME, C_CPU, C_MEM, C_NGPU, C_MILLI, C_SPEC, C_CREATE, C_DELETE, C_SCHED, NCOLS };
    int rc, first = t->n_pods;

    if (len > SIM_MAX_FILE)
        return gs_errf(e, GS_ETOOBIG, "%s: larger than %u MiB", file, SIM_MAX_FILE >> 20);
    if ((rc = csv_header(&c, cols, NCOLS, e)) < 0)
        return rc;
    while ((rc = csv_next(&c, e)) > 0) {
        if (t->n_pods >= ROWS_MAX)
            return gs_errf(e, GS_ETOOBIG, "%s:%d: more than %d rows", file, c.line, ROWS_MAX);
        if ((rc = check_fields(&c, cols, NCOLS, e)) < 0)
            return rc;
        if (grow((void **)&t->pods, t->n_pods, sizeof *t->pods) < 0)
            return gs_errf(e, GS_ENOMEM, "%s:%d: out of memory", file, c.line);
        struct sim_pod *p = &t->pods[t->n_pods];
        int64_t ng, gm;
        memset(p, 0, sizeof *p);
        p->line = c.line;
        if ((rc = get_str(&c, &cols[C_NAME], p->name, sizeof p->name, e)) < 0)
            return rc;
        if (!p->name[0])
            return field_err(&c, &cols[C_NAME], e, "is empty, expected a pod name");
        if ((rc = get_int(&c, &cols[C_CPU], 0, INT64_C(1) << 40, &p->cpu_milli, e)) < 0 ||
            (rc = get_int(&c, &cols[C_MEM], 0, INT64_C(1) << 40, &p->mem_mib, e)) < 0 ||
            (rc = get_int(&c, &cols[C_NGPU], 0, SIM_MAX_GPUS, &ng, e)) < 0 ||
            (rc = get_int(&c, &cols[C_MILLI], 0, 1000, &gm, e)) < 0)
            return rc;
        if (ng > 0 && gm == 0)
            return field_err(&c, &cols[C_MILLI], e, "is 0 but num_gpu is not");
        if (ng == 0 && gm > 0)
            return field_err(&c, &cols[C_MILLI], e, "is set but num_gpu is 0");
        if (ng > 1 && gm < 1000)
            return field_err(&c, &cols[C_MILLI], e, "is below 1000 for a multi-GPU pod (only "
                             "single-GPU pods share a GPU)");
        p->num_gpu = (int)ng;
        p->gpu_milli = (int)gm;
        if ((rc = get_str(&c, &cols[C_SPEC], p->gpu_spec, sizeof p->gpu_spec, e)) < 0 ||
            (rc = check_spec(&c, &cols[C_SPEC], p->gpu_spec, e)) < 0 ||
            (rc = get_time(&c, &cols[C_CREATE], &p->t_create, e)) < 0 ||
            (rc = get_time(&c, &cols[C_DELETE], &p->t_delete, e)) < 0 ||
            (rc = get_time(&c, &cols[C_SCHED], &p->t_sched, e)) < 0)
            return rc;
        t->n_pods++;
    }
    if (rc < 0)
        return rc;
    if (t->n_pods == first)
        return gs_errf(e, GS_EINVAL, "%s: no pods after the header", file);
    t->has_times = cols[C_CREATE].idx >= 0;
    return 0;
}

/* Does model name `m` appear in "A|B|C"? */
static int spec_has(const char *spec, const char *m)
{
    size_t ml = strlen(m);
    for (const char *p = spec; *p;) {
        size_t len = strcspn(p, "|");
        if (len == ml && memcmp(p, m, len) == 0)
            return 1;
        p += len;
        if (*p)
            p++;
    }
    return 0;
}

int sim_trace_check(const struct sim_trace *t, const char *pods_file, int *n_unfit,
                    struct gs_err *e)
{
    if (n_unfit)
        *n_unfit = 0;
    for (int i = 0; i < t->n_pods; i++) {
        const struct sim_pod *p = &t->pods[i];
        /* every model named must exist */
        for (const char *s = p->gpu_spec; *s;) {
            size_t len = strcspn(s, "|");
            int found = 0;
            for (int k = 0; k < t->n_nodes && !found; k++)
                found = strlen(t->nodes[k].model) == len && memcmp(t->nodes[k].model, s, len) == 0;
            if (!found)
                return gs_errf(e, GS_EINVAL, "%s:%d: column gpu_spec: unknown GPU model '%.*s' "
                               "(no node has it)", pods_file, p->line, (int)len, s);
            s += len;
            if (*s)
                s++;
        }
        /* a pod no node could hold even empty, whatever its models, is bad
         * input; one that only its gpu_spec keeps off the nodes big enough
         * is part of the workload (it fails in the replay, as in the
         * benchmark) and is counted */
        int fits = 0, fits_model = 0;
        int64_t max_cpu = 0, max_mem = 0;
        for (int k = 0; k < t->n_nodes && !fits_model; k++) {
            const struct sim_node *n = &t->nodes[k];
            if (n->cpu_milli > max_cpu)
                max_cpu = n->cpu_milli;
            if (n->mem_mib > max_mem)
                max_mem = n->mem_mib;
            int big = p->cpu_milli <= n->cpu_milli && p->mem_mib <= n->mem_mib &&
                      p->num_gpu <= n->gpus;
            fits |= big;
            fits_model = big && (p->num_gpu == 0 || !p->gpu_spec[0] ||
                                 spec_has(p->gpu_spec, n->model));
        }
        if (fits_model)
            continue;
        if (fits) {
            if (n_unfit)
                (*n_unfit)++;
            continue;
        }
        for (int k = 0; k < t->n_nodes; k++) {
            if (t->nodes[k].cpu_milli > max_cpu)
                max_cpu = t->nodes[k].cpu_milli;
            if (t->nodes[k].mem_mib > max_mem)
                max_mem = t->nodes[k].mem_mib;
        }
        if (p->cpu_milli > max_cpu)
            return gs_errf(e, GS_EINVAL, "%s:%d: column cpu_milli: pod %s needs %lldm CPU, the "
                           "largest node has %lldm", pods_file, p->line, p->name,
                           (long long)p->cpu_milli, (long long)max_cpu);
        if (p->mem_mib > max_mem)
            return gs_errf(e, GS_EINVAL, "%s:%d: column memory_mib: pod %s needs %lld MiB, the "
                           "largest node has %lld MiB", pods_file, p->line, p->name,
                           (long long)p->mem_mib, (long long)max_mem);
        return gs_errf(e, GS_EINVAL, "%s:%d: column num_gpu: pod %s (%lldm CPU, %lld MiB, %d GPUs) "
                       "is bigger than every node", pods_file, p->line, p->name,
                       (long long)p->cpu_milli, (long long)p->mem_mib, p->num_gpu);
    }
    return 0;
}

static int read_file(const char *path, char **buf, size_t *len, struct gs_err *e)
{
    struct gs_buf b = {0};
    int rc = gs_buf_read_file(&b, path, SIM_MAX_FILE, e);
    if (rc < 0) {
        gs_buf_free(&b);
        return rc;
    }
    *buf = b.buf ? b.buf : strdup("");
    *len = b.len;
    return *buf ? 0 : gs_errf(e, GS_ENOMEM, "%s: out of memory", path);
}

int sim_trace_load(struct sim_trace *t, const char *nodes_file, const char *pods_file,
                   int *n_unfit, struct gs_err *e)
{
    char *buf;
    size_t len;
    int rc = read_file(nodes_file, &buf, &len, e);
    if (rc < 0)
        return rc;
    rc = sim_trace_parse_nodes(t, buf, len, nodes_file, e);
    free(buf);
    if (rc < 0)
        return rc;
    if ((rc = read_file(pods_file, &buf, &len, e)) < 0)
        return rc;
    rc = sim_trace_parse_pods(t, buf, len, pods_file, e);
    free(buf);
    if (rc < 0)
        return rc;
    return sim_trace_check(t, pods_file, n_unfit, e);
}

int sim_trace_write_nodes(const struct sim_trace *t, FILE *f)
{
    fprintf(f, "sn,cpu_milli,memory_mib,gpu,model\n");
    for (int i = 0; i < t->n_nodes; i++) {
        const struct sim_node *n = &t->nodes[i];
        fprintf(f, "%s,%lld,%lld,%d,%s\n", n->name, (long long)n->cpu_milli,
                (long long)n->mem_mib, n->gpus, n->model);
    }
    return ferror(f) ? -GS_EIO : 0;
}

int sim_trace_write_pods(const struct sim_trace *t, FILE *f)
{
    fprintf(f, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n");
    for (int i = 0; i < t->n_pods; i++) {
        const struct sim_pod *p = &t->pods[i];
        fprintf(f, "%s,%lld,%lld,%d,%d,%s\n", p->name, (long long)p->cpu_milli,
                (long long)p->mem_mib, p->num_gpu, p->gpu_milli, p->gpu_spec);
    }
    return ferror(f) ? -GS_EIO : 0;
}

void sim_trace_clear(struct sim_trace *t)
{
    free(t->nodes);
    free(t->pods);
    memset(t, 0, sizeof *t);
}

int sim_pod_same_shape(const struct sim_pod *a, const struct sim_pod *b)
{
    return a->num_gpu == b->num_gpu && a->gpu_milli == b->gpu_milli &&
           a->cpu_milli == b->cpu_milli && a->mem_mib == b->mem_mib &&
           strcmp(a->gpu_spec, b->gpu_spec) == 0;
}

int sim_node_same_shape(const struct sim_node *a, const struct sim_node *b)
{
    return a->gpus == b->gpus && a->cpu_milli == b->cpu_milli && a->mem_mib == b->mem_mib &&
           strcmp(a->model, b->model) == 0;
}
