/* tests/fuzz/fuzz_admission.c - an AdmissionReview body of arbitrary bytes
 * through the webhook's decisions (parse, validate with quotas, who may
 * write an assignment, mutate, response) and the quota-file reader: no crash, no leak, and every denial
 * carries a reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/yaml.h"
#include "wh/wh_admit.h"
#include "wh/wh_review.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct core_quotas *quotas;
    static struct wh_config c;
    struct wh_review r;
    struct gs_err e = GS_ERR_INIT;

    if (!quotas) {
        struct core_quota q;
        json_t *j = json_loads("{\"apiVersion\":\"gpusched.io/v1\",\"kind\":\"GPUQuota\","
                               "\"metadata\":{\"name\":\"q\",\"namespace\":\"ml\"},\"spec\":"
                               "{\"total\":{\"gpus\":2},\"models\":[{\"model\":\"H100\","
                               "\"memory\":\"40Gi\"}]}}", 0, NULL);
        quotas = core_quotas_new();
        if (core_quota_parse(j, &q, &e) < 0 || core_quotas_put(quotas, &q, &e) < 0)
            abort();
        json_decref(j);
        c.names = *core_names_default();
        c.scheduler_name = "gpu-scheduler";
        c.cluster.max_gpu_mem_mib = 81920;
        c.cluster.max_gpus_per_node = 8;
        wh_parse_defaults("ml=binpack", &c, &e);
        c.assigners = "system:serviceaccount:gpusched:gpusched-extender,admin";
    }

    /* the same bytes as a quota file (YAML or JSON) */
    json_t *doc;
    if (kube_yaml_parse((const char *)data, size, &doc, &e) == 0) {
        struct core_quota *qs;
        int n;
        if (core_quota_parse_doc(doc, &qs, &n, NULL, NULL, &e) == 0)
            free(qs);
        json_decref(doc);
    }

    if (wh_review_parse((const char *)data, size, &r, &e) < 0) {
        if (!e.msg[0])
            abort();
        return 0;
    }
    if (r.object) {
        struct gs_err ve = GS_ERR_INIT;
        json_t *patch = NULL;
        char warn[512];
        if (wh_validate_pod(&c, quotas, r.object, r.ns, &ve) < 0 && !ve.msg[0])
            abort();
        struct gs_err ae = GS_ERR_INIT;
        if (wh_check_assignment(&c, r.old_object, r.object, r.user, &ae) < 0 && !ae.msg[0])
            abort();
        if (wh_mutate_pod(&c, r.object, r.ns, r.user, &patch, warn, sizeof warn, &e) == 0) {
            json_t *resp = wh_review_response(&r, 1, 200, NULL, patch, warn);
            if (!resp)
                abort();
            json_decref(resp);
            json_decref(patch);
        }
        struct core_quota q;
        (void)core_quota_parse(r.object, &q, &e);
    }
    json_t *resp = wh_review_response(&r, 0, 403, "denied", NULL, NULL);
    json_decref(resp);
    wh_review_clear(&r);
    return 0;
}
