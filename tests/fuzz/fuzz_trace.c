/*
 * tests/fuzz/fuzz_trace.c - the trace CSV parser on arbitrary bytes.
 *
 * The first byte picks the parser (even: node list, odd: pod list); the rest
 * is the file. Then, when both parse, the cross-check runs too, and for a
 * small valid pod list the LP bound over all its pods, the forcing test and
 * the bound for work-conserving schedulers (an error there that says "no
 * bound" means an unsound forcing test or order lemma: a crash), a cpufrag
 * replay checked against the order lemma (a target placed after a failed
 * trigger: a crash) and, when it has timestamps, a time-driven replay. Any
 * crash, leak or sanitizer report is a bug; errors are expected.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/policy.h"
#include "sim/sim_bound.h"
#include "sim/sim_forced.h"
#include "sim/sim_order.h"
#include "sim/sim_run.h"
#include "sim/sim_time.h"
#include "sim/sim_trace.h"

static const char nodes_ok[] = "sn,cpu_milli,memory_mib,gpu,model\n"
                               "n1,64000,262144,2,T4\nn2,96000,393216,8,G2\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct sim_trace t = {0};
    struct gs_err e = GS_ERR_INIT;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 1) {
        if (sim_trace_parse_nodes(&t, nodes_ok, sizeof nodes_ok - 1, "nodes.csv", &e) == 0 &&
            sim_trace_parse_pods(&t, buf, len, "pods.csv", &e) == 0) {
            int unfit;
            if (sim_trace_check(&t, "pods.csv", &unfit, &e) == 0 && t.n_pods <= 64) {
                int idx[64];
                double milli;
                for (int i = 0; i < t.n_pods; i++)
                    idx[i] = i;
                sim_bound_milli(&t, idx, t.n_pods, &milli, NULL, &e);
                unsigned char forced[64];
                double pct;
                if (t.n_pods > 0 && sim_forced_mark(&t, idx, t.n_pods, forced, NULL, &e) == 0 &&
                    sim_bound_prefixes_wc(&t, idx, 0, t.n_pods - 1, forced, &pct, NULL, &e) < 0 &&
                    strstr(e.msg, "no bound"))
                    __builtin_trap();
                struct sim_config cfg;
                if (sim_config_init(&cfg, &t, 1.3, &e) == 0) {
                    unsigned char placed[64];
                    int sets;
                    if (sim_replay_placed(&cfg, core_policy_find("cpufrag"), 1, idx, t.n_pods, placed,
                                          &e) == 0 &&
                        sim_order_check(&t, idx, t.n_pods, placed, &sets, &e) < 0 &&
                        strstr(e.msg, "placed after"))
                        __builtin_trap();
                    if (t.has_times) {
                        static struct sim_time_result r;
                        struct sim_time_opts o = {1, 1, SIM_FAULT_NONE, 0};
                        sim_time_run(&cfg, &o, core_policy_find("cpufrag"), 1, &r, &e);
                    }
                    sim_config_clear(&cfg);
                }
            }
        }
    } else {
        sim_trace_parse_nodes(&t, buf, len, "nodes.csv", &e);
    }
    sim_trace_clear(&t);
    return 0;
}
