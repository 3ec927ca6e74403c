/* tests/fuzz/fuzz_request.c - core_pod_parse, core_pod_affinity_parse (a
 * placed pod's terms) and core_quantity_parse on arbitrary bytes: no crash,
 * no leak, and every accepted request within the bounds the rest of the
 * project relies on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_pod pod;
    int64_t v;
    char q[80];

    /* the first bytes as a quantity string */
    size_t n = size < sizeof q - 1 ? size : sizeof q - 1;
    memcpy(q, data, n);
    q[n] = '\0';
    if (core_quantity_parse(q, 1000, &v, "q", &e) == 0 && v < 0)
        abort();

    json_t *j = json_loadb((const char *)data, size, JSON_DISABLE_EOF_CHECK, NULL);
    if (!j)
        return 0;
    if (core_pod_parse(j, NULL, &pod, &e) == 0) {
        const struct core_request *r = &pod.req;
        if (r->num_gpu < 0 || r->num_gpu > CORE_MAX_GPUS || r->milli < 0 ||
            r->milli > CORE_MILLI || r->mem_mib < 0 || r->cpu_milli < 0 || r->mem_bytes < 0 ||
            (r->kind == CORE_REQ_WHOLE && (r->num_gpu < 1 || r->milli != CORE_MILLI)) ||
            (r->kind == CORE_REQ_SHARED && r->num_gpu < 1) ||
            (r->kind == CORE_REQ_MIG && (r->mig_count < 1 || !r->mig_profile[0])) ||
            r->n_types > CORE_MAX_TYPES || r->n_types_exclude > CORE_MAX_TYPES)
            abort();
        char *k[] = {"zone"}, *val[] = {"a"};
        (void)core_pod_matches_node(&pod, "n1", 1, k, val);
        (void)core_pod_tolerates(&pod, "k", "v", "NoSchedule");
        (void)core_request_model_ok(r, "NVIDIA-H100");
        for (int t = 0; t < pod.n_pod_terms; t++) { /* the pod picks itself, or not */
            const struct core_pod_term *pt = &pod.pod_terms[t];
            if (pt->weight < -100 || pt->weight > 100 || !pt->topology_key ||
                (pt->weight == 0) != (pt->max_skew > 0) || pt->max_skew < 0)
                abort(); /* affinity: a weight; spread: a maxSkew */
            (void)core_pod_term_picks(&pod, pt, j);
        }
        core_pod_clear(&pod);
    } else if (pod.n_terms || pod.n_tolerations || pod.n_selector || pod.n_pod_terms ||
               !e.msg[0]) {
        abort(); /* a failed parse leaves the pod cleared and says why */
    }
    struct gs_err ea = GS_ERR_INIT;
    int nt = core_pod_affinity_parse(j, CORE_HARD_POD_AFFINITY_WEIGHT, &pod, &ea);
    if (nt >= 0) { /* affinity terms only: a weight each, no spread */
        if (nt != pod.n_pod_terms || !pod.ns[0])
            abort();
        for (int t = 0; t < nt; t++) {
            const struct core_pod_term *pt = &pod.pod_terms[t];
            if (pt->weight < -100 || pt->weight > 100 || pt->weight == 0 || pt->max_skew ||
                !pt->topology_key)
                abort();
            (void)core_pod_term_picks(&pod, pt, j);
        }
        core_pod_clear(&pod);
    } else if (pod.n_pod_terms || !ea.msg[0]) {
        abort();
    }
    json_decref(j);
    return 0;
}
