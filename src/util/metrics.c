/* util/metrics.c - see metrics.h. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/metrics.h"
#include "util/buf.h"

struct series {
    char *values[METRICS_MAX_LABELS];
    uint64_t hash;       /* of the label values, for the index */
    struct series *chain; /* next in the same index bucket */
    double v;            /* counter / gauge value */
    uint64_t *buckets;   /* histogram: nbuckets + 1 cumulative-at-render counts */
    double sum;
    uint64_t count;
    struct series *next;
};

struct metric {
    enum metric_type type;
    char *name, *help;
    int nlabels;
    char *labels[METRICS_MAX_LABELS];
    int nbuckets;
    double bounds[METRICS_MAX_BUCKETS];
    struct series *series, *tail; /* in creation order, for rendering */
    struct series **index;        /* hash buckets over the series */
    size_t nindex, nseries;
    struct metrics *reg;
    struct metric *next;
};

struct metrics {
    pthread_mutex_t mu;
    pthread_mutex_t render_mu; /* one collect-and-render at a time: a collect
                                  resets gauges it then sets again, and a
                                  second scrape would print them empty */
    struct metric *head, *tail;
    metrics_collect_fn collect;
    void *collect_ud;
};

struct metrics *metrics_new(void)
{
    struct metrics *m = calloc(1, sizeof *m);
    if (m) {
        pthread_mutex_init(&m->mu, NULL);
        pthread_mutex_init(&m->render_mu, NULL);
    }
    return m;
}

static void series_free(struct series *s, int nlabels)
{
    for (int i = 0; i < nlabels; i++)
        free(s->values[i]);
    free(s->buckets);
    free(s);
}

static void metric_free(struct metric *mt)
{
    struct series *s = mt->series, *n;
    for (; s; s = n) {
        n = s->next;
        series_free(s, mt->nlabels);
    }
    for (int i = 0; i < mt->nlabels; i++)
        free(mt->labels[i]);
    free(mt->index);
    free(mt->name);
    free(mt->help);
    free(mt);
}

void metrics_free(struct metrics *m)
{
    struct metric *mt, *n;
    if (!m)
        return;
    for (mt = m->head; mt; mt = n) {
        n = mt->next;
        metric_free(mt);
    }
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->render_mu);
    free(m);
}

static int valid_name(const char *s, int allow_colon)
{
    if (!s || !*s)
        return 0;
    for (const char *p = s; *p; p++) {
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                 (allow_colon && *p == ':') || (p != s && *p >= '0' && *p <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

struct metric *metrics_add(struct metrics *m, enum metric_type type, const char *name,
                           const char *help, const char *labels, const double *buckets,
                           int nbuckets, struct gs_err *e)
{
    struct metric *mt;

    if (!valid_name(name, 1)) {
        gs_errf(e, GS_EINVAL, "metric name '%s': not a Prometheus metric name",
                name ? name : "");
        return NULL;
    }
    if (type == METRIC_HISTOGRAM ? (nbuckets < 1 || nbuckets > METRICS_MAX_BUCKETS || !buckets)
                                 : nbuckets != 0) {
        gs_errf(e, GS_EINVAL, "metric %s: bucket count %d is out of range", name, nbuckets);
        return NULL;
    }
    for (int i = 1; i < nbuckets; i++)
        if (!(buckets[i] > buckets[i - 1])) {
            gs_errf(e, GS_EINVAL, "metric %s: buckets must be strictly ascending", name);
            return NULL;
        }
    if (!(mt = calloc(1, sizeof *mt)) || !(mt->name = strdup(name)) ||
        !(mt->help = strdup(help ? help : ""))) {
        if (mt)
            metric_free(mt);
        gs_errf(e, GS_ENOMEM, "out of memory");
        return NULL;
    }
    mt->type = type;
    mt->reg = m;
    mt->nbuckets = nbuckets;
    if (nbuckets)
        memcpy(mt->bounds, buckets, sizeof(double) * (size_t)nbuckets);
    if (labels && *labels) {
        const char *p = labels;
        while (*p) {
            const char *c = strchr(p, ',');
            size_t n = c ? (size_t)(c - p) : strlen(p);
            char *l;
            if (mt->nlabels == METRICS_MAX_LABELS) {
                gs_errf(e, GS_EINVAL, "metric %s: more than %d labels", name, METRICS_MAX_LABELS);
                metric_free(mt);
                return NULL;
            }
            if (!(l = strndup(p, n))) {
                gs_errf(e, GS_ENOMEM, "out of memory");
                metric_free(mt);
                return NULL;
            }
            mt->labels[mt->nlabels++] = l;
            if (!valid_name(l, 0) || strncmp(l, "__", 2) == 0 ||
                (type == METRIC_HISTOGRAM && strcmp(l, "le") == 0)) {
                gs_errf(e, GS_EINVAL, "metric %s: bad label name '%s'", name, l);
                metric_free(mt);
                return NULL;
            }
            p += n;
            if (*p == ',')
                p++;
        }
    }
    pthread_mutex_lock(&m->mu);
    for (struct metric *o = m->head; o; o = o->next)
        if (strcmp(o->name, name) == 0) {
            pthread_mutex_unlock(&m->mu);
            gs_errf(e, GS_EINVAL, "metric %s: registered twice", name);
            metric_free(mt);
            return NULL;
        }
    if (m->tail)
        m->tail->next = mt;
    else
        m->head = mt;
    m->tail = mt;
    pthread_mutex_unlock(&m->mu);
    return mt;
}

void metrics_exp_buckets(double start, double factor, int count, double *out)
{
    for (int i = 0; i < count; i++, start *= factor)
        out[i] = start;
}

void metrics_on_collect(struct metrics *m, metrics_collect_fn fn, void *ud)
{
    m->collect = fn;
    m->collect_ud = ud;
}

static uint64_t values_hash(const struct metric *mt, const char *const *values)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < mt->nlabels; i++) {
        for (const char *p = values[i] ? values[i] : ""; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull; /* separator: ("ab","c") != ("a","bc") */
    }
    return h;
}

/* Grows the index to twice the series count when it is full. */
static int index_grow(struct metric *mt)
{
    size_t n = mt->nindex ? mt->nindex * 2 : 64;
    struct series **idx = calloc(n, sizeof *idx);
    if (!idx)
        return -1;
    for (struct series *s = mt->series; s; s = s->next) {
        s->chain = idx[s->hash & (n - 1)];
        idx[s->hash & (n - 1)] = s;
    }
    free(mt->index);
    mt->index = idx;
    mt->nindex = n;
    return 0;
}

/* Finds or creates the series for `values`; called with the lock held.
 * Returns NULL only when out of memory (the update is then dropped). */
static struct series *find_series(struct metric *mt, const char *const *values, int create)
{
    uint64_t h = values_hash(mt, values);
    struct series *s;
    if (mt->nindex)
        for (s = mt->index[h & (mt->nindex - 1)]; s; s = s->chain) {
            int i = 0;
            if (s->hash != h)
                continue;
            while (i < mt->nlabels && strcmp(s->values[i], values[i] ? values[i] : "") == 0)
                i++;
            if (i == mt->nlabels)
                return s;
        }
    if (!create || (mt->nseries + 1 > mt->nindex && index_grow(mt) < 0) ||
        !(s = calloc(1, sizeof *s)))
        return NULL;
    for (int i = 0; i < mt->nlabels; i++)
        if (!(s->values[i] = strdup(values[i] ? values[i] : ""))) {
            series_free(s, mt->nlabels);
            return NULL;
        }
    if (mt->type == METRIC_HISTOGRAM &&
        !(s->buckets = calloc((size_t)mt->nbuckets + 1, sizeof *s->buckets))) {
        series_free(s, mt->nlabels);
        return NULL;
    }
    s->hash = h;
    s->chain = mt->index[h & (mt->nindex - 1)];
    mt->index[h & (mt->nindex - 1)] = s;
    if (mt->tail)
        mt->tail->next = s;
    else
        mt->series = s;
    mt->tail = s;
    mt->nseries++;
    return s;
}

static void update(struct metric *mt, const char *const *values, double v, int op)
{
    struct series *s;
    if (!mt || isnan(v))
        return;
    pthread_mutex_lock(&mt->reg->mu);
    if ((s = find_series(mt, values, 1))) {
        if (op == 0) {
            s->v += v;
        } else if (op == 1) {
            s->v = v;
        } else {
            int i = 0;
            while (i < mt->nbuckets && v > mt->bounds[i])
                i++;
            s->buckets[i]++;
            s->sum += v;
            s->count++;
        }
    }
    pthread_mutex_unlock(&mt->reg->mu);
}

void metric_inc(struct metric *mt, const char *const *values) { metric_add(mt, values, 1); }

void metric_add(struct metric *mt, const char *const *values, double v)
{
    if (mt && (mt->type == METRIC_GAUGE || v >= 0) && mt->type != METRIC_HISTOGRAM)
        update(mt, values, v, 0);
}

void metric_set(struct metric *mt, const char *const *values, double v)
{
    if (mt && mt->type != METRIC_HISTOGRAM)
        update(mt, values, v, 1);
}

void metric_observe(struct metric *mt, const char *const *values, double v)
{
    if (mt && mt->type == METRIC_HISTOGRAM)
        update(mt, values, v, 2);
}

void metric_reset(struct metric *mt)
{
    struct series *s, *n;
    pthread_mutex_lock(&mt->reg->mu);
    for (s = mt->series; s; s = n) {
        n = s->next;
        series_free(s, mt->nlabels);
    }
    mt->series = mt->tail = NULL;
    mt->nseries = 0;
    if (mt->index)
        memset(mt->index, 0, mt->nindex * sizeof *mt->index);
    pthread_mutex_unlock(&mt->reg->mu);
}

double metric_value(struct metric *mt, const char *const *values)
{
    struct series *s;
    double v = 0;
    pthread_mutex_lock(&mt->reg->mu);
    if ((s = find_series(mt, values, 0)))
        v = mt->type == METRIC_HISTOGRAM ? (double)s->count : s->v;
    pthread_mutex_unlock(&mt->reg->mu);
    return v;
}

/* ---- rendering ---------------------------------------------------------- */


/* Escapes a label value or help text: backslash, newline, and (for label
 * values) the double quote; plain runs are copied whole. */
static void out_escaped(struct gs_buf *o, const char *s, int quote)
{
    const char *special = quote ? "\\\n\"" : "\\\n";
    while (*s) {
        size_t n = strcspn(s, special);
        gs_buf_put(o, s, n);
        s += n;
        if (!*s)
            break;
        gs_buf_put(o, *s == '\n' ? "\\n" : *s == '"' ? "\\\"" : "\\\\", 2);
        s++;
    }
}

static void out_num(struct gs_buf *o, double v)
{
    if (isinf(v))
        gs_buf_printf(o, v > 0 ? "+Inf" : "-Inf");
    else if (v == (double)(int64_t)v && fabs(v) < 1e15)
        gs_buf_printf(o, "%lld", (long long)v);
    else
        gs_buf_printf(o, "%.17g", v);
}

static void out_labels(struct gs_buf *o, const struct metric *mt, const struct series *s,
                       const char *le)
{
    if (!mt->nlabels && !le)
        return;
    gs_buf_printf(o, "{");
    for (int i = 0; i < mt->nlabels; i++) {
        gs_buf_printf(o, "%s%s=\"", i ? "," : "", mt->labels[i]);
        out_escaped(o, s->values[i], 1);
        gs_buf_printf(o, "\"");
    }
    if (le)
        gs_buf_printf(o, "%sle=\"%s\"", mt->nlabels ? "," : "", le);
    gs_buf_printf(o, "}");
}

char *metrics_render(struct metrics *m, size_t *len)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    struct gs_buf o = {0};

    pthread_mutex_lock(&m->render_mu);
    if (m->collect)
        m->collect(m->collect_ud, m);
    pthread_mutex_lock(&m->mu);
    for (struct metric *mt = m->head; mt; mt = mt->next) {
        gs_buf_printf(&o, "# HELP %s ", mt->name);
        out_escaped(&o, mt->help, 0);
        gs_buf_printf(&o, "\n# TYPE %s %s\n", mt->name, types[mt->type]);
        for (struct series *s = mt->series; s; s = s->next) {
            if (mt->type != METRIC_HISTOGRAM) {
                gs_buf_printf(&o, "%s", mt->name);
                out_labels(&o, mt, s, NULL);
                gs_buf_printf(&o, " ");
                out_num(&o, s->v);
                gs_buf_printf(&o, "\n");
                continue;
            }
            uint64_t cum = 0;
            for (int i = 0; i <= mt->nbuckets; i++) {
                char le[40];
                cum += s->buckets[i];
                if (i < mt->nbuckets)
                    snprintf(le, sizeof le, "%.9g", mt->bounds[i]);
                else
                    snprintf(le, sizeof le, "+Inf");
                gs_buf_printf(&o, "%s_bucket", mt->name);
                out_labels(&o, mt, s, le);
                gs_buf_printf(&o, " %llu\n", (unsigned long long)cum);
            }
            gs_buf_printf(&o, "%s_sum", mt->name);
            out_labels(&o, mt, s, NULL);
            gs_buf_printf(&o, " ");
            out_num(&o, s->sum);
            gs_buf_printf(&o, "\n%s_count", mt->name);
            out_labels(&o, mt, s, NULL);
            gs_buf_printf(&o, " %llu\n", (unsigned long long)s->count);
        }
    }
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_unlock(&m->render_mu);
    if (o.oom || !o.buf) {
        free(o.buf);
        o.buf = strdup("");
        o.len = 0;
    }
    if (len)
        *len = o.len;
    return o.buf;
}
