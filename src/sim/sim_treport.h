/*
 * sim/sim_treport.h - what a person reads from time-driven replays
 * (sim_time.h): per load and policy, statistics over seeds, the text
 * tables, the JSON (keys in the style of the benchmark's) and the SVG
 * (allocation and waiting demand over time, delay CDF).
 *
 * Writers take a caller-opened FILE and return 0 or -GS_EIO.
 */
#ifndef GPUSCHED_SIM_TREPORT_H
#define GPUSCHED_SIM_TREPORT_H

#include <stdio.h>

#include "sim/sim_report.h"
#include "sim/sim_time.h"

struct sim_time_summary {
    const struct core_policy *policy;
    double load, scale;
    int seeds;
    double t0, t1;                   /* window of the first run, s */
    struct sim_stat alloc, pending, gpu_hours, waiting_at_end, never_placed;
    struct sim_stat delay[SIM_N_CLS][3]; /* p50, p90, p99 of queueing delay, s */
    struct sim_stat delay_mean[SIM_N_CLS];
    int n_delay[SIM_N_CLS];          /* placed GPU pods per class, first run */
    double alloc_ts[SIM_TIME_POINTS], pending_ts[SIM_TIME_POINTS]; /* mean over seeds */
    double cdf[SIM_CDF_POINTS];      /* mean over seeds of each delay quantile, s */
    double elapsed_max_s;            /* slowest run */
};

/* Summarises the n_seeds runs of one load and policy. */
void sim_time_summarize(const struct sim_time_result *runs, int n_seeds,
                        struct sim_time_summary *out);

struct sim_time_report {
    int nodes, gpus, pods;              /* pods: in the trace */
    const struct sim_time_summary *s; /* load-major: all policies of load 0, then load 1 ... */
    int n;
    double elapsed_s;
};

void sim_time_print(FILE *f, const struct sim_time_report *r);
int sim_time_write_json(FILE *f, const struct sim_time_report *r);
int sim_time_write_svg(FILE *f, const struct sim_time_report *r, const char *title);

#endif
