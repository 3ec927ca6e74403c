/*
 * sim/sim_report.h - from many runs to what a person reads: per-policy
 * statistics over seeds, the text table, the JSON and CSV files, and the SVG
 * plot of unallocated GPU % against arrived workload (the paper's Fig. 9a).
 *
 * Writers take a caller-opened FILE and return 0 or -GS_EIO.
 */
#ifndef GPUSCHED_SIM_REPORT_H
#define GPUSCHED_SIM_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "sim/sim_run.h"

struct sim_stat {
    double mean, sd, median; /* sd: sample standard deviation (n - 1) */
    int n;                   /* runs with a value (NaN bins are skipped) */
};

struct sim_summary {
    const struct core_policy *policy;
    int seeds;
    struct sim_stat unalloc100, unalloc130, frag90, frag_rate90, failed;
    double median[SIM_BINS], q25[SIM_BINS], q75[SIM_BINS]; /* unallocated %, NaN = none */
};

/* Mean, sample sd and median of v[0..n) ignoring NaNs. */
struct sim_stat sim_stat_of(const double *v, int n);
/* qsort's ascending order for doubles. */
int sim_cmp_double(const void *a, const void *b);
/* The quantile q of sorted x[0..k), interpolated linearly; NaN when k = 0. */
double sim_quantile(const double *x, int k, double q);

/* Summarises the n_seeds runs of one policy. */
void sim_summarize(const struct sim_run_result *runs, int n_seeds, struct sim_summary *out);

struct sim_report {
    int nodes, gpus, pods;
    const struct sim_summary *s;
    int n;
    double elapsed_s;
    /* optional (--bound): the LP lower bound on unallocated % at 100 % per
     * seed (sim_bound.h); NULL = not computed */
    const double *bound;
    const uint64_t *bound_seeds;
    int n_bound;
    double bound_s;                  /* time spent on the LPs */
    /* with bound: the bound for work-conserving schedulers (sim_bound_run_wc) per
     * seed, the % of the GPU pods up to the bin's last sample proven forced, and
     * the arrived % at the first one not proven forced (NaN: none) */
    const double *bound_wc, *wc_forced_pct, *wc_first_unforced_pct;
};

/* ---- building blocks for other reports (the time-driven replay's) ---- */

/* {"mean", "sd", "median"} of a statistic, NaN as null; NULL on no memory. */
json_t *sim_stat_json(const struct sim_stat *s);
/* Writes root as the reports' JSON files are written (indent 1, 6 significant
 * digits, a final newline) and releases it; NULL root is -GS_ENOMEM. */
int sim_json_write(FILE *f, json_t *root);

void sim_print_table(FILE *f, const struct sim_report *r);
int sim_write_json(FILE *f, const struct sim_report *r);
int sim_write_csv(FILE *f, const struct sim_report *r);
/* Arrived 75..130 %: one line (median) per policy with its 25-75 % band. */
int sim_write_svg(FILE *f, const struct sim_report *r, const char *title);

/* ---- building blocks for other plots (the time-driven replay's) ---- */

struct sim_svg_line {
    const char *label;         /* legend text, NULL = none */
    const double *x, *y;       /* n points; NaN points are skipped */
    int n;
    int color;                 /* index into the palette sim_write_svg uses */
    int dashed;
};

struct sim_svg_panel {
    double left, top, width, height; /* plot area in the picture */
    double x0, x1, y0, y1;           /* data ranges */
    int log_x;                       /* log10 x axis, x0 > 0; smaller x drawn at x0 */
    const char *title, *xlabel, *ylabel;
    const struct sim_svg_line *lines;
    int n_lines;
    int legend;                      /* draw the legend in the top left corner */
};

/* An SVG picture of w x h with a title; panels go in between; end returns
 * 0 or -GS_EIO. */
void sim_svg_begin(FILE *f, int w, int h, const char *title);
void sim_svg_panel(FILE *f, const struct sim_svg_panel *p);
int sim_svg_end(FILE *f);

#endif
