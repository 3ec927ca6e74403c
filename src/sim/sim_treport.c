/*
 * sim/sim_treport.c - tables, JSON and SVG of the time-driven replay.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_treport.h"

#define MAX_RUNS 1024

void sim_time_summarize(const struct sim_time_result *runs, int n_seeds,
                        struct sim_time_summary *out)
{
    memset(out, 0, sizeof *out);
    if (n_seeds <= 0)
        return;
    out->policy = runs[0].policy;
    out->load = runs[0].load;
    out->scale = runs[0].scale;
    out->seeds = n_seeds;
    out->t0 = runs[0].t0;
    out->t1 = runs[0].t1;
    int n = n_seeds < MAX_RUNS ? n_seeds : MAX_RUNS;
    double v[MAX_RUNS];
#define STAT(field, expr)                                                                     \
    do {                                                                                      \
        for (int i = 0; i < n; i++)                                                           \
            v[i] = (expr);                                                                    \
        out->field = sim_stat_of(v, n);                                                       \
    } while (0)
    STAT(alloc, runs[i].alloc_pct);
    STAT(pending, runs[i].pending_pct);
    STAT(gpu_hours, runs[i].gpu_hours);
    STAT(waiting_at_end, runs[i].waiting_at_end);
    STAT(never_placed, runs[i].never_placed);
    for (int c = 0; c < SIM_N_CLS; c++) {
        for (int q = 0; q < 3; q++)
            STAT(delay[c][q], runs[i].delay[c][q]);
        STAT(delay_mean[c], runs[i].delay_mean[c]);
        out->n_delay[c] = runs[0].n_delay[c];
    }
#undef STAT
    for (int k = 0; k < SIM_TIME_POINTS; k++) {
        double a = 0, p = 0;
        for (int i = 0; i < n; i++) {
            a += runs[i].alloc_ts[k];
            p += runs[i].pending_ts[k];
        }
        out->alloc_ts[k] = a / n;
        out->pending_ts[k] = p / n;
    }
    for (int k = 0; k < SIM_CDF_POINTS; k++) {
        double a = 0;
        for (int i = 0; i < n; i++)
            a += runs[i].cdf[k];
        out->cdf[k] = a / n;
    }
    for (int i = 0; i < n; i++)
        if (runs[i].elapsed_s > out->elapsed_max_s)
            out->elapsed_max_s = runs[i].elapsed_s;
}

/* A delay in seconds, short: "0", "42 s", "13.2 min", "5.1 h". */
static void fmt_delay(char *buf, size_t size, double s)
{
    if (isnan(s))
        snprintf(buf, size, "-");
    else if (s < 0.5)
        snprintf(buf, size, "0");
    else if (s < 60)
        snprintf(buf, size, "%.0f s", s);
    else if (s < 3600)
        snprintf(buf, size, "%.1f min", s / 60);
    else
        snprintf(buf, size, "%.1f h", s / 3600);
}

void sim_time_print(FILE *f, const struct sim_time_report *r)
{
    fprintf(f, "%d nodes, %d GPUs, %d pods; time-driven replay, workload x%g (mean over seeds)\n\n",
            r->nodes, r->gpus, r->pods, r->n ? r->s[0].scale : 1.0);
    fprintf(f, "%-5s %-10s %5s %-14s %8s %9s %9s %9s %7s %7s %10s\n", "load", "policy", "seeds",
            "alloc% ±sd", "pending%", "delay p50", "p90", "p99", "waiting", "never", "GPU-hours");
    for (int i = 0; i < r->n; i++) {
        const struct sim_time_summary *s = &r->s[i];
        char a[32], d0[16], d1[16], d2[16];
        snprintf(a, sizeof a, "%6.2f ± %.2f", s->alloc.mean, s->alloc.sd);
        fmt_delay(d0, sizeof d0, s->delay[SIM_CLS_ALL][0].mean);
        fmt_delay(d1, sizeof d1, s->delay[SIM_CLS_ALL][1].mean);
        fmt_delay(d2, sizeof d2, s->delay[SIM_CLS_ALL][2].mean);
        fprintf(f, "%-5g %-10s %5d %-14s %8.2f %9s %9s %9s %7.1f %7.1f %10.0f\n", s->load,
                s->policy->name, s->seeds, a, s->pending.mean, d0, d1, d2,
                s->waiting_at_end.mean, s->never_placed.mean, s->gpu_hours.mean);
    }
    fprintf(f, "\nqueueing delay p50 / p90 / p99 per request class\n");
    fprintf(f, "%-5s %-10s", "load", "policy");
    for (int c = 1; c < SIM_N_CLS; c++)
        fprintf(f, "  %-28s", sim_cls_name(c));
    fprintf(f, "\n");
    for (int i = 0; i < r->n; i++) {
        const struct sim_time_summary *s = &r->s[i];
        fprintf(f, "%-5g %-10s", s->load, s->policy->name);
        for (int c = 1; c < SIM_N_CLS; c++) {
            char d[3][16], cell[64];
            for (int q = 0; q < 3; q++)
                fmt_delay(d[q], sizeof d[q], s->delay[c][q].mean);
            snprintf(cell, sizeof cell, "%s / %s / %s", d[0], d[1], d[2]);
            fprintf(f, "  %-28s", cell);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\nelapsed %.2f s\n", r->elapsed_s);
}

static json_t *num(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

int sim_time_write_json(FILE *f, const struct sim_time_report *r)
{
    json_t *results = json_array();
    for (int i = 0; i < r->n; i++) {
        const struct sim_time_summary *s = &r->s[i];
        json_t *delay = json_object();
        for (int c = 0; c < SIM_N_CLS; c++)
            json_object_set_new(delay, sim_cls_name(c),
                                json_pack("{s:i, s:o, s:o, s:o, s:o}", "pods", s->n_delay[c],
                                          "mean_s", sim_stat_json(&s->delay_mean[c]), "p50_s",
                                          sim_stat_json(&s->delay[c][0]), "p90_s",
                                          sim_stat_json(&s->delay[c][1]), "p99_s",
                                          sim_stat_json(&s->delay[c][2])));
        json_t *ts = json_array(), *cdf = json_array();
        for (int k = 0; k < SIM_TIME_POINTS; k++)
            json_array_append_new(
                ts, json_pack("[f, f, f]", s->t0 + (s->t1 - s->t0) * k / (SIM_TIME_POINTS - 1),
                              s->alloc_ts[k], s->pending_ts[k]));
        for (int k = 0; k < SIM_CDF_POINTS; k++)
            json_array_append_new(cdf, json_pack("[i, o]", k, num(s->cdf[k])));
        json_array_append_new(
            results,
            json_pack("{s:s, s:f, s:f, s:i, s:f, s:f, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                      "policy", s->policy->name, "load", s->load, "scale", s->scale, "seeds",
                      s->seeds,
                      "window_start_s", s->t0, "window_end_s", s->t1, "gpu_alloc_pct_time_mean",
                      sim_stat_json(&s->alloc), "pending_gpu_pct_time_mean", sim_stat_json(&s->pending),
                      "gpu_hours", sim_stat_json(&s->gpu_hours), "waiting_pods_at_end",
                      sim_stat_json(&s->waiting_at_end), "never_placed_pods",
                      sim_stat_json(&s->never_placed), "delay", delay,
                      "series_t_alloc_pending", ts, "delay_cdf_pct_s", cdf));
    }
    json_t *root = json_pack("{s:s, s:i, s:i, s:i, s:o, s:f}", "mode", "time", "nodes", r->nodes,
                             "gpus", r->gpus, "pods", r->pods, "results", results, "elapsed_s",
                             r->elapsed_s);
    return sim_json_write(f, root);
}

/* One column per load: allocation over time, waiting demand over time, delay
 * CDF; one line per policy. */
int sim_time_write_svg(FILE *f, const struct sim_time_report *r, const char *title)
{
    double loads[16];
    int n_loads = 0;
    for (int i = 0; i < r->n; i++) {
        int k = 0;
        while (k < n_loads && loads[k] != r->s[i].load)
            k++;
        if (k == n_loads && n_loads < 16)
            loads[n_loads++] = r->s[i].load;
    }
    const int cw = 330, ch = 210, ml = 70, mt = 60, gap = 80;
    int w = ml + n_loads * cw + 20, h = mt + 3 * (ch + gap);
    double *xs = malloc(SIM_TIME_POINTS * sizeof *xs), *cy = malloc(SIM_CDF_POINTS * sizeof *cy);
    double *cdf_x = calloc((size_t)r->n * SIM_CDF_POINTS + 1, sizeof *cdf_x);
    struct sim_svg_line *lines = calloc((size_t)r->n + 1, sizeof *lines);
    struct sim_svg_line *cl = calloc((size_t)r->n + 1, sizeof *cl);
    int rc = -GS_ENOMEM;
    if (!xs || !cy || !cdf_x || !lines || !cl)
        goto out; /* before the first byte: no half-written picture */
    sim_svg_begin(f, w, h, title);
    for (int k = 0; k < SIM_CDF_POINTS; k++)
        cy[k] = k;
    for (int li = 0; li < n_loads; li++) {
        int nl = 0;
        double t0 = 0, t1 = 1, pmax = 1, dmax = 1;
        for (int i = 0; i < r->n; i++) {
            const struct sim_time_summary *s = &r->s[i];
            if (s->load != loads[li])
                continue;
            t0 = s->t0;
            t1 = s->t1 > s->t0 ? s->t1 : s->t0 + 1;
            for (int k = 0; k < SIM_TIME_POINTS; k++)
                if (s->pending_ts[k] > pmax)
                    pmax = s->pending_ts[k];
            for (int k = 0; k < SIM_CDF_POINTS; k++) {
                cdf_x[i * SIM_CDF_POINTS + k] = s->cdf[k] / 3600;
                if (s->cdf[k] / 3600 > dmax)
                    dmax = s->cdf[k] / 3600;
            }
            lines[nl].label = s->policy->name;
            lines[nl].y = s->alloc_ts;
            lines[nl].n = SIM_TIME_POINTS;
            lines[nl].color = nl; /* the same policy, the same colour in every column */
            cl[nl] = lines[nl];
            cl[nl].x = cdf_x + i * SIM_CDF_POINTS;
            cl[nl].y = cy;
            cl[nl].n = SIM_CDF_POINTS;
            nl++;
        }
        /* time unit by the window's length */
        double unit = t1 - t0 >= 2 * 86400 ? 86400 : t1 - t0 >= 2 * 3600 ? 3600 : 60;
        const char *uname = unit == 86400 ? "days" : unit == 3600 ? "hours" : "minutes";
        for (int k = 0; k < SIM_TIME_POINTS; k++)
            xs[k] = (t1 - t0) * k / (SIM_TIME_POINTS - 1) / unit;
        for (int k = 0; k < nl; k++)
            lines[k].x = xs;
        char tt[3][64];
        snprintf(tt[0], sizeof tt[0], "load x%g: GPU allocation", loads[li]);
        snprintf(tt[1], sizeof tt[1], "load x%g: waiting GPU demand", loads[li]);
        snprintf(tt[2], sizeof tt[2], "load x%g: queueing delay CDF, GPU pods", loads[li]);
        double left = ml + li * cw;
        char xl[64];
        snprintf(xl, sizeof xl, "%s since the window's start", uname);
        struct sim_svg_panel p = {left, mt, cw - gap + 10, ch, 0, (t1 - t0) / unit, 0, 100, 0,
                                  tt[0], xl, "% of GPU capacity", lines, nl, 1};
        sim_svg_panel(f, &p);
        for (int k = 0; k < nl; k++) {
            const struct sim_time_summary *s = NULL;
            for (int i = 0, m = 0; i < r->n; i++)
                if (r->s[i].load == loads[li] && m++ == k)
                    s = &r->s[i];
            lines[k].y = s ? s->pending_ts : NULL;
            if (!s)
                lines[k].n = 0;
        }
        p.top = mt + ch + gap;
        p.y1 = ceil(pmax / 10) * 10;
        p.title = tt[1];
        p.legend = 0;
        sim_svg_panel(f, &p);
        struct sim_svg_panel q = {left, mt + 2 * (ch + gap), cw - gap + 10, ch, 1.0 / 60,
                                  pow(10, ceil(log10(dmax))), 0, 100, 1, tt[2],
                                  "delay (hours, log; below 1 min at the left edge)",
                                  "% of GPU pods", cl, nl, 0};
        sim_svg_panel(f, &q);
    }
    rc = sim_svg_end(f);
out:
    free(xs);
    free(cy);
    free(cdf_x);
    free(lines);
    free(cl);
    return rc;
}
