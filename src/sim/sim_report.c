/*
 * sim/sim_report.c - statistics over seeds and the table / JSON / CSV / SVG
 * outputs of `gpusched simulate`.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_report.h"

int sim_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorted non-NaN copy of v into out; returns the count. */
static int sorted_values(const double *v, int n, double *out)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i]))
            out[k++] = v[i];
    qsort(out, (size_t)k, sizeof *out, sim_cmp_double);
    return k;
}

double sim_quantile(const double *x, int k, double q)
{
    if (k == 0)
        return NAN;
    double pos = q * (k - 1);
    int lo = (int)floor(pos);
    int hi = lo + 1 < k ? lo + 1 : lo;
    return x[lo] + (x[hi] - x[lo]) * (pos - lo);
}

struct sim_stat sim_stat_of(const double *v, int n)
{
    struct sim_stat s = {NAN, NAN, NAN, 0};
    double *x = malloc(((size_t)n + 1) * sizeof *x);
    if (!x)
        return s;
    int k = sorted_values(v, n, x);
    s.n = k;
    if (k > 0) {
        double sum = 0, ss = 0;
        for (int i = 0; i < k; i++)
            sum += x[i];
        s.mean = sum / k;
        for (int i = 0; i < k; i++)
            ss += (x[i] - s.mean) * (x[i] - s.mean);
        s.sd = k > 1 ? sqrt(ss / (k - 1)) : 0;
        s.median = sim_quantile(x, k, 0.5);
    }
    free(x);
    return s;
}

void sim_summarize(const struct sim_run_result *runs, int n_seeds, struct sim_summary *out)
{
    double *v = calloc((size_t)n_seeds + 1, sizeof *v);
    double *x = calloc((size_t)n_seeds + 1, sizeof *x);
    memset(out, 0, sizeof *out);
    out->policy = runs[0].policy;
    out->seeds = n_seeds;
    if (!v || !x) {
        free(v);
        free(x);
        return;
    }
#define STAT(field, expr)                                                      \
    do {                                                                       \
        for (int i = 0; i < n_seeds; i++)                                      \
            v[i] = (expr);                                                     \
        out->field = sim_stat_of(v, n_seeds);                                  \
    } while (0)
    STAT(unalloc100, runs[i].unalloc[100]);
    STAT(unalloc130, runs[i].unalloc[130]);
    STAT(frag90, runs[i].frag[90]);
    STAT(frag_rate90, runs[i].frag_rate[90]);
    STAT(failed, (double)runs[i].failed);
#undef STAT
    for (int b = 0; b < SIM_BINS; b++) {
        for (int i = 0; i < n_seeds; i++)
            v[i] = runs[i].unalloc[b];
        int k = sorted_values(v, n_seeds, x);
        out->median[b] = sim_quantile(x, k, 0.5);
        out->q25[b] = sim_quantile(x, k, 0.25);
        out->q75[b] = sim_quantile(x, k, 0.75);
    }
    free(v);
    free(x);
}

void sim_print_table(FILE *f, const struct sim_report *r)
{
    fprintf(f, "%d nodes, %d GPUs, %d pods in the trace; unallocated GPU %% (lower is better)\n\n",
            r->nodes, r->gpus, r->pods);
    fprintf(f, "%-12s %5s  %-22s %7s  %-15s %-15s %-14s\n", "policy", "seeds",
            "unalloc@100% mean±sd", "median", "unalloc@130%", "frag@90%", "failed pods");
    for (int i = 0; i < r->n; i++) {
        const struct sim_summary *s = &r->s[i];
        char a[32], b[32], c[32], d[32];
        snprintf(a, sizeof a, "%6.2f ± %.2f", s->unalloc100.mean, s->unalloc100.sd);
        snprintf(b, sizeof b, "%6.2f ± %.2f", s->unalloc130.mean, s->unalloc130.sd);
        snprintf(c, sizeof c, "%6.2f ± %.2f", s->frag90.mean, s->frag90.sd);
        snprintf(d, sizeof d, "%7.1f ± %.1f", s->failed.mean, s->failed.sd);
        fprintf(f, "%-12s %5d  %-22s %7.2f  %-15s %-15s %-14s\n", s->policy->name, s->seeds, a,
                s->unalloc100.median, b, c, d);
    }
    if (r->bound) {
        struct sim_stat b = sim_stat_of(r->bound, r->n_bound);
        fprintf(f, "%-12s %5d  %6.2f ± %-12.2f %7.2f  (LP lower bound at arrived 100 %%, "
                   "%.1f s)\n",
                "bound", b.n, b.mean, b.sd, b.median, r->bound_s);
        struct sim_stat w = sim_stat_of(r->bound_wc, r->n_bound);
        struct sim_stat fp = sim_stat_of(r->wc_forced_pct, r->n_bound);
        struct sim_stat fu = sim_stat_of(r->wc_first_unforced_pct, r->n_bound);
        fprintf(f, "%-12s %5d  %6.2f ± %-12.2f %7.2f  (work-conserving schedulers: %.1f %% of "
                   "GPU pods forced, first not forced at arrived %.1f %%)\n",
                "bound-wc", w.n, w.mean, w.sd, w.median, fp.mean, fu.mean);
        fprintf(f, "\ndistance to the bound at 100 %% (points, mean over seeds):");
        for (int i = 0; i < r->n; i++)
            fprintf(f, " %s %+.2f", r->s[i].policy->name, r->s[i].unalloc100.mean - b.mean);
        fprintf(f, "\ndistance to bound-wc:");
        for (int i = 0; i < r->n; i++)
            fprintf(f, " %s %+.2f", r->s[i].policy->name, r->s[i].unalloc100.mean - w.mean);
        fprintf(f, "\n");
    }
    fprintf(f, "\nelapsed %.2f s\n", r->elapsed_s);
}

static json_t *num(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

json_t *sim_stat_json(const struct sim_stat *s)
{
    return json_pack("{s:o, s:o, s:o}", "mean", num(s->mean), "sd", num(s->sd), "median",
                     num(s->median));
}

int sim_json_write(FILE *f, json_t *root)
{
    if (!root)
        return -GS_ENOMEM;
    int rc = json_dumpf(root, f, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
    json_decref(root);
    fputc('\n', f);
    return rc < 0 || ferror(f) ? -GS_EIO : 0;
}

int sim_write_json(FILE *f, const struct sim_report *r)
{
    json_t *results = json_array();
    for (int i = 0; i < r->n; i++) {
        const struct sim_summary *s = &r->s[i];
        json_t *curve = json_array();
        for (int b = 0; b < SIM_BINS; b++)
            if (!isnan(s->median[b]))
                json_array_append_new(curve, json_pack("[i, f]", b, s->median[b]));
        json_array_append_new(
            results, json_pack("{s:s, s:i, s:o, s:o, s:o, s:o, s:o}", "policy", s->policy->name,
                               "seeds", s->seeds, "unallocated_pct_at_100",
                               sim_stat_json(&s->unalloc100), "unallocated_pct_at_130",
                               sim_stat_json(&s->unalloc130), "frag_pct_at_90", sim_stat_json(&s->frag90),
                               "failed_pods", sim_stat_json(&s->failed), "curve", curve));
    }
    json_t *root = json_pack("{s:i, s:i, s:i, s:o, s:f}", "nodes", r->nodes, "gpus", r->gpus,
                             "pods", r->pods, "results", results, "elapsed_s", r->elapsed_s);
    if (root && r->bound) {
        struct sim_stat b = sim_stat_of(r->bound, r->n_bound);
        json_t *per = json_array();
        for (int i = 0; i < r->n_bound; i++)
            json_array_append_new(per, json_pack("{s:I, s:o}", "seed",
                                                 (json_int_t)r->bound_seeds[i],
                                                 "unallocated_pct_at_100", num(r->bound[i])));
        json_object_set_new(root, "bound",
                            json_pack("{s:o, s:o, s:f}", "unallocated_pct_at_100", sim_stat_json(&b),
                                      "per_seed", per, "elapsed_s", r->bound_s));
        struct sim_stat w = sim_stat_of(r->bound_wc, r->n_bound);
        json_t *wper = json_array();
        for (int i = 0; i < r->n_bound; i++)
            json_array_append_new(wper, json_pack("{s:I, s:o, s:o, s:o}", "seed",
                                                  (json_int_t)r->bound_seeds[i],
                                                  "unallocated_pct_at_100", num(r->bound_wc[i]),
                                                  "forced_pct", num(r->wc_forced_pct[i]),
                                                  "first_unforced_arrived_pct",
                                                  num(r->wc_first_unforced_pct[i])));
        json_object_set_new(root, "bound_wc",
                            json_pack("{s:o, s:o}", "unallocated_pct_at_100", sim_stat_json(&w),
                                      "per_seed", wper));
    }
    return sim_json_write(f, root);
}

int sim_write_csv(FILE *f, const struct sim_report *r)
{
    fprintf(f, "policy,arrived_pct,unallocated_pct_median,unallocated_pct_q25,"
               "unallocated_pct_q75\n");
    for (int i = 0; i < r->n; i++)
        for (int b = 0; b < SIM_BINS; b++)
            if (!isnan(r->s[i].median[b]))
                fprintf(f, "%s,%d,%.4f,%.4f,%.4f\n", r->s[i].policy->name, b, r->s[i].median[b],
                        r->s[i].q25[b], r->s[i].q75[b]);
    return ferror(f) ? -GS_EIO : 0;
}

/* ---- SVG -------------------------------------------------------------- */

#define X0 75
#define X1 130
#define W 760
#define H 480
#define ML 70  /* margins */
#define MR 170
#define MT 40
#define MB 60

static const char *const colors[] = {"#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c",
                                     "#9467bd", "#d62728", "#8c564b", "#e377c2",
                                     "#17becf", "#bcbd22"};

/* XML-escaped text. */
static void svg_text(FILE *f, const char *s)
{
    for (const char *p = s ? s : ""; *p; p++)
        fputs(*p == '<' ? "&lt;" : *p == '>' ? "&gt;" : *p == '&' ? "&amp;" : (char[2]){*p, 0}, f);
}

/* The picture's opening: size, white background, the title centred on title_x. */
static void svg_head(FILE *f, int w, int h, int title_x, const char *title)
{
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
            w, h, w, h);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", title_x);
    svg_text(f, title);
    fprintf(f, "</text>\n");
}

static double px(double a) { return ML + (a - X0) * (W - ML - MR) / (X1 - X0); }
static double py(double v, double ymax) { return MT + (1 - v / ymax) * (H - MT - MB); }

int sim_write_svg(FILE *f, const struct sim_report *r, const char *title)
{
    double ymax = 0;
    for (int i = 0; i < r->n; i++)
        for (int b = X0; b <= X1; b++) {
            double v = r->s[i].q75[b];
            if (!isnan(v) && v > ymax)
                ymax = v;
        }
    ymax = ymax <= 0 ? 5 : ceil(ymax / 5) * 5;
    double ystep = ymax <= 10 ? 1 : ymax <= 30 ? 5 : 10;

    svg_head(f, W, H, (W - MR + ML) / 2, title);
    /* grid and ticks */
    for (int a = X0; a <= X1; a += 5)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e0e0e0\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
                px(a), MT, px(a), H - MB, px(a), H - MB + 18, a);
    for (double v = 0; v <= ymax + 1e-9; v += ystep)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                   "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                ML, py(v, ymax), W - MR, py(v, ymax), ML - 6, py(v, ymax) + 4, v);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n",
            ML, MT, W - ML - MR, H - MT - MB);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">arrived workload (%% of GPU "
               "capacity)</text>\n", (W - MR + ML) / 2, H - 18);
    fprintf(f, "<text transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\">"
               "unallocated GPU (%%), median over seeds</text>\n", (H - MB + MT) / 2);
    /* the ideal: max(0, 100 - arrived) */
    fprintf(f, "<polyline fill=\"none\" stroke=\"black\" stroke-dasharray=\"4 3\" points=\"");
    for (int a = X0; a <= X1; a++) {
        double v = a < 100 ? 100 - a : 0;
        if (v <= ymax)
            fprintf(f, "%.1f,%.1f ", px(a), py(v, ymax));
    }
    fprintf(f, "\"/>\n");
    for (int i = 0; i < r->n; i++) {
        const struct sim_summary *s = &r->s[i];
        const char *col = colors[i % (int)(sizeof colors / sizeof colors[0])];
        /* band: q75 left to right, then q25 right to left */
        fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\" points=\"", col);
        for (int a = X0; a <= X1; a++)
            if (!isnan(s->q75[a]))
                fprintf(f, "%.1f,%.1f ", px(a), py(s->q75[a], ymax));
        for (int a = X1; a >= X0; a--)
            if (!isnan(s->q25[a]))
                fprintf(f, "%.1f,%.1f ", px(a), py(s->q25[a], ymax));
        fprintf(f, "\"/>\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int a = X0; a <= X1; a++)
            if (!isnan(s->median[a]))
                fprintf(f, "%.1f,%.1f ", px(a), py(s->median[a], ymax));
        fprintf(f, "\"/>\n");
        int ly = MT + 14 + 20 * i;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
                   "<text x=\"%d\" y=\"%d\">%s (%.2f%%)</text>\n",
                W - MR + 12, ly, W - MR + 36, ly, col, W - MR + 42, ly + 4, s->policy->name,
                s->median[100]);
    }
    int ly = MT + 14 + 20 * r->n;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\" "
               "stroke-dasharray=\"4 3\"/><text x=\"%d\" y=\"%d\">ideal</text>\n",
            W - MR + 12, ly, W - MR + 36, ly, W - MR + 42, ly + 4);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#555\">bands: 25-75 %% over "
               "seeds</text>\n<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#555\">legend: "
               "median at 100 %%</text>\n", W - MR + 12, ly + 24, W - MR + 12, ly + 38);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -GS_EIO : 0;
}

/* ---- panels ----------------------------------------------------------- */

void sim_svg_begin(FILE *f, int w, int h, const char *title)
{
    svg_head(f, w, h, w / 2, title);
}

int sim_svg_end(FILE *f)
{
    fprintf(f, "</svg>\n");
    return ferror(f) ? -GS_EIO : 0;
}

/* Round tick step for a span: 1, 2 or 5 x 10^k giving 4-10 ticks. */
static double tick_step(double span)
{
    if (!(span > 0))
        return 1;
    double s = pow(10, floor(log10(span)));
    while (span / s > 10)
        s *= span / (s * 2) > 10 ? 5 : 2;
    while (span / s < 4)
        s /= 2;
    return s;
}

void sim_svg_panel(FILE *f, const struct sim_svg_panel *p)
{
    double lx0 = p->log_x ? log10(p->x0) : p->x0, lx1 = p->log_x ? log10(p->x1) : p->x1;
    if (!(lx1 > lx0))
        lx1 = lx0 + 1;
    double y0 = p->y0, y1 = p->y1 > p->y0 ? p->y1 : p->y0 + 1;
#define PX(v) (p->left + ((p->log_x ? log10((v) < p->x0 ? p->x0 : (v)) : (v)) - lx0) * \
               p->width / (lx1 - lx0))
#define PY(v) (p->top + (1 - ((v) - y0) / (y1 - y0)) * p->height)
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">",
            p->left + p->width / 2, p->top - 8);
    svg_text(f, p->title);
    fprintf(f, "</text>\n");
    if (p->log_x) {
        for (int k = (int)ceil(lx0 - 1e-9); k <= (int)floor(lx1 + 1e-9); k++) {
            double v = pow(10, k);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                    PX(v), p->top, PX(v), p->top + p->height, PX(v), p->top + p->height + 16, v);
        }
    } else {
        double st = tick_step(lx1 - lx0);
        for (double v = ceil(lx0 / st) * st; v <= lx1 + 1e-9; v += st)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                    PX(v), p->top, PX(v), p->top + p->height, PX(v), p->top + p->height + 16, v);
    }
    double yst = tick_step(y1 - y0);
    for (double v = ceil(y0 / yst) * yst; v <= y1 + 1e-9; v += yst)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                p->left, PY(v), p->left + p->width, PY(v), p->left - 5, PY(v) + 4, v);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"black\"/>\n", p->left, p->top, p->width, p->height);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", p->left + p->width / 2,
            p->top + p->height + 34);
    svg_text(f, p->xlabel);
    fprintf(f, "</text>\n<text transform=\"translate(%.1f %.1f) rotate(-90)\" "
               "text-anchor=\"middle\">", p->left - 40, p->top + p->height / 2);
    svg_text(f, p->ylabel);
    fprintf(f, "</text>\n");
    const int ncol = (int)(sizeof colors / sizeof colors[0]);
    for (int i = 0; i < p->n_lines; i++) {
        const struct sim_svg_line *l = &p->lines[i];
        const char *col = colors[(l->color % ncol + ncol) % ncol];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"", col,
                l->dashed ? " stroke-dasharray=\"4 3\"" : "");
        for (int k = 0; k < l->n; k++) {
            double x = l->x[k], y = l->y[k];
            if (isnan(x) || isnan(y))
                continue;
            y = y < y0 ? y0 : y > y1 ? y1 : y;
            fprintf(f, "%.1f,%.1f ", PX(x), PY(y));
        }
        fprintf(f, "\"/>\n");
        if (p->legend && l->label) {
            double ly = p->top + 12 + 15 * i, lx = p->left + 8; /* top left */
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-width=\"3\"%s/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">",
                    lx, ly, lx + 18, ly, col, l->dashed ? " stroke-dasharray=\"4 3\"" : "",
                    lx + 22, ly + 4);
            svg_text(f, l->label);
            fprintf(f, "</text>\n");
        }
    }
#undef PX
#undef PY
}
