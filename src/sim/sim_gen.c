/*
 * sim/sim_gen.c - weighted tables modelled on the openb statistics
 * (docs/benchmark.md, ../shared/data/openb/README.md) and a seeded sampler.
 *
 * Pods: 13.3 % CPU-only, 37.8 % sharing one GPU, 48.0 % one whole GPU,
 * 0.9 % multi-GPU (2, 4 or 8). Sharing pods take the trace's common
 * gpu_milli values with their frequencies; each pod kind draws its
 * (CPU, memory) pair from that kind's common pairs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_gen.h"

struct w_node { int w; int64_t cpu, mem; int gpus; const char *model; };
struct w_pair { int w; int64_t cpu, mem; };
struct w_int { int w; int v; };

static const struct w_node node_shapes[] = {
    {549, 96000, 393216, 8, "G2"},   {387, 104000, 524288, 2, "T4"},
    {107, 16000, 122880, 2, "P100"}, {39, 128000, 786432, 8, "G3"},
    {28, 32000, 131072, 4, "V100M16"}, {22, 64000, 262144, 2, "P100"},
    {21, 96000, 786432, 8, "V100M32"}, {19, 8000, 32768, 1, "V100M16"},
    {17, 96000, 393216, 4, "T4"},    {9, 48000, 376832, 4, "V100M32"},
    {7, 64000, 262144, 8, "V100M16"},
};

static const struct w_pair cpu_pairs[] = {
    {364, 12500, 57344}, {284, 32000, 49152}, {163, 8000, 30517},
    {120, 15400, 51200}, {95, 16500, 51200},  {11, 8000, 15625},
};
static const struct w_pair share_pairs[] = {
    {1122, 3152, 5600}, {625, 11908, 47104}, {486, 8000, 30517}, {189, 4000, 22888},
    {182, 4000, 15258}, {152, 4152, 10600},  {136, 4000, 30517}, {51, 6000, 6144},
};
static const struct w_pair whole_pairs[] = {
    {857, 11300, 49152}, {534, 11400, 48128}, {470, 3152, 5600},  {255, 18708, 64512},
    {195, 9810, 41560},  {158, 12000, 24576}, {158, 15700, 58368}, {153, 11908, 47104},
    {108, 16000, 32768}, {104, 8000, 16384},
};
static const struct w_int share_milli[] = {
    {1078, 810}, {750, 470}, {328, 320}, {253, 650}, {140, 230}, {128, 460}, {75, 590},
    {74, 160},   {72, 550},  {62, 220},  {47, 370},  {24, 110},  {19, 480},  {7, 50},
};
/* multi-GPU pods: GPUs and a (CPU, memory) pair scaled to them */
static const struct { int w, gpus; int64_t cpu, mem; } multi[] = {
    {8, 2, 16200, 66560},  {8, 2, 6000, 65536},   {8, 4, 32200, 132096},
    {7, 4, 30200, 160768}, {22, 8, 64200, 263168}, {22, 8, 88000, 327680},
};
/* pod kinds in tenths of a percent: CPU-only, sharing, whole, multi */
static const struct w_int kinds[] = {{133, 0}, {378, 1}, {480, 2}, {9, 3}};

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static uint64_t next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ULL;
    uint64_t x = *s;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Index drawn from weights w[0..n) (stride-free: weights gathered first). */
static int draw(uint64_t *s, const int *w, int n)
{
    int total = 0;
    for (int i = 0; i < n; i++)
        total += w[i];
    int r = (int)(next(s) % (uint64_t)total);
    for (int i = 0; i < n; i++) {
        if (r < w[i])
            return i;
        r -= w[i];
    }
    return n - 1;
}

#define DRAW(s, table)                                                         \
    ({                                                                         \
        int w_[N(table)];                                                      \
        for (int i_ = 0; i_ < N(table); i_++)                                  \
            w_[i_] = (table)[i_].w;                                            \
        draw(s, w_, N(table));                                                 \
    })

int sim_gen(struct sim_trace *t, int n_nodes, int n_pods, uint64_t seed, struct gs_err *e)
{
    if (n_nodes < 1 || n_nodes > 1000000)
        return gs_errf(e, GS_EINVAL, "--nodes: %d is out of range 1..1000000", n_nodes);
    if (n_pods < 1 || n_pods > 10000000)
        return gs_errf(e, GS_EINVAL, "--pods: %d is out of range 1..10000000", n_pods);
    memset(t, 0, sizeof *t);
    t->nodes = calloc((size_t)n_nodes, sizeof *t->nodes);
    t->pods = calloc((size_t)n_pods, sizeof *t->pods);
    if (!t->nodes || !t->pods) {
        sim_trace_clear(t);
        return gs_errf(e, GS_ENOMEM, "gen-trace: out of memory");
    }
    uint64_t s = seed * 0x2545f4914f6cdd1dULL + 0x1234567ULL;
    for (int i = 0; i < n_nodes; i++) {
        const struct w_node *shape = i == 0 ? &node_shapes[0] : &node_shapes[DRAW(&s, node_shapes)];
        struct sim_node *n = &t->nodes[i];
        snprintf(n->name, sizeof n->name, "gen-node-%06d", i);
        n->cpu_milli = shape->cpu;
        n->mem_mib = shape->mem;
        n->gpus = shape->gpus;
        snprintf(n->model, sizeof n->model, "%s", shape->model);
        n->line = i + 2;
        t->total_gpus += n->gpus;
    }
    t->n_nodes = n_nodes;
    for (int i = 0; i < n_pods; i++) {
        struct sim_pod *p = &t->pods[i];
        const struct w_pair *pair;
        snprintf(p->name, sizeof p->name, "gen-pod-%07d", i);
        p->line = i + 2;
        switch (kinds[DRAW(&s, kinds)].v) {
        case 0:
            pair = &cpu_pairs[DRAW(&s, cpu_pairs)];
            break;
        case 1:
            pair = &share_pairs[DRAW(&s, share_pairs)];
            p->num_gpu = 1;
            p->gpu_milli = share_milli[DRAW(&s, share_milli)].v;
            break;
        case 2:
            pair = &whole_pairs[DRAW(&s, whole_pairs)];
            p->num_gpu = 1;
            p->gpu_milli = 1000;
            break;
        default: {
            int k = DRAW(&s, multi);
            p->num_gpu = multi[k].gpus;
            p->gpu_milli = 1000;
            p->cpu_milli = multi[k].cpu;
            p->mem_mib = multi[k].mem;
            pair = NULL;
        }
        }
        if (pair) {
            p->cpu_milli = pair->cpu;
            p->mem_mib = pair->mem;
        }
    }
    t->n_pods = n_pods;
    return 0;
}
