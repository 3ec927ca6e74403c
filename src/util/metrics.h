/*
 * util/metrics.h - a small Prometheus registry: counters, gauges, histograms
 * with labels, rendered in the text exposition format (version 0.0.4).
 *
 * Every long-running gpusched service exposes GET /metrics. Hot paths (the
 * extender's /filter) update metrics from many threads, so updates take one
 * registry mutex and a short linear search over a metric's label sets; the
 * label sets of one metric are few (verbs, results, nodes).
 *
 * Metrics whose values are a view of some other state (GPUs free per node)
 * are best filled at scrape time: register a collect callback, which runs
 * before rendering, one scrape at a time, under no registry lock, and may
 * call metric_reset() + metric_set().
 *
 * Ownership: the registry owns its metrics; metric pointers stay valid until
 * metrics_free(). Label names and values are copied. metrics_render() returns
 * a malloc'd string the caller frees.
 */
#ifndef GPUSCHED_METRICS_H
#define GPUSCHED_METRICS_H

#include <stddef.h>

#include "util/err.h"

#define METRICS_MAX_LABELS 4
#define METRICS_MAX_BUCKETS 24

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct metrics;
struct metric;

typedef void (*metrics_collect_fn)(void *ud, struct metrics *m);

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);

/* Registers a metric. `labels` is a comma-separated list of label names
 * ("verb,code") or NULL/"" for none. Histograms take `nbuckets` ascending
 * upper bounds (the +Inf bucket is implicit); others pass NULL, 0.
 * Returns NULL with *e set on a bad name, a duplicate name, too many labels
 * or bad buckets. */
struct metric *metrics_add(struct metrics *m, enum metric_type type, const char *name,
                           const char *help, const char *labels, const double *buckets,
                           int nbuckets, struct gs_err *e);

/* Exponential buckets: start, start*factor, ... (count values) into out. */
void metrics_exp_buckets(double start, double factor, int count, double *out);

/* Sets the function called at the start of every metrics_render(). */
void metrics_on_collect(struct metrics *m, metrics_collect_fn fn, void *ud);

/* Updates. `values` holds one label value per label name, in order (NULL
 * when the metric has no labels). Counters only grow: metric_inc/add with a
 * negative value is ignored. */
void metric_inc(struct metric *mt, const char *const *values);
void metric_add(struct metric *mt, const char *const *values, double v);
void metric_set(struct metric *mt, const char *const *values, double v);
void metric_observe(struct metric *mt, const char *const *values, double v);
/* Forgets every label set (for gauges refilled by a collect callback). */
void metric_reset(struct metric *mt);

/* Reads a counter or gauge value (0 if the label set was never used), or a
 * histogram's observation count. For tests and for status pages. */
double metric_value(struct metric *mt, const char *const *values);

/* The whole registry in Prometheus text format; *len gets the length. */
char *metrics_render(struct metrics *m, size_t *len);

#endif
