/* Unit tests for core/request: quantities, every request form, the errors
 * each impossible form gets, container summing, selectors, tolerations. */
#include <stdlib.h>

#include "core/cluster.h"
#include "core/core.h"
#include "core/policy.h"
#include "core/request.h"
#include "test.h"

static int64_t q(const char *s, int64_t scale)
{
    int64_t v = -1;
    struct gs_err e = GS_ERR_INIT;
    if (core_quantity_parse(s, scale, &v, "f", &e) < 0)
        return -1;
    return v;
}

static void quantity_tests(void)
{
    struct gs_err e = GS_ERR_INIT;
    int64_t v;

    ASSERT_EQ(q("0", 1), 0);
    ASSERT_EQ(q("2", 1), 2);
    ASSERT_EQ(q("+7", 1), 7);
    ASSERT_EQ(q("16Gi", 1), 16LL << 30);
    ASSERT_EQ(q("1Ki", 1), 1024);
    ASSERT_EQ(q("3Mi", 1), 3 << 20);
    ASSERT_EQ(q("1Ti", 1), 1LL << 40);
    ASSERT_EQ(q("1Pi", 1), 1LL << 50);
    ASSERT_EQ(q("2Ei", 1), 2LL << 60);
    ASSERT_EQ(q("1.5Gi", 1), 3LL << 29);
    ASSERT_EQ(q("500m", 1000), 500);
    ASSERT_EQ(q("500m", 1), 1); /* rounded up */
    ASSERT_EQ(q("1.5", 1000), 1500);
    ASSERT_EQ(q("0.1", 1000), 100);
    ASSERT_EQ(q("1.", 1), 1);
    ASSERT_EQ(q(".5", 1000), 500);
    ASSERT_EQ(q("0.0001", 1000), 1); /* rounded up to the unit */
    ASSERT_EQ(q("2k", 1), 2000);
    ASSERT_EQ(q("2M", 1), 2000000);
    ASSERT_EQ(q("3G", 1), 3000000000LL);
    ASSERT_EQ(q("1T", 1), 1000000000000LL);
    ASSERT_EQ(q("1P", 1), 1000000000000000LL);
    ASSERT_EQ(q("1E", 1), 1000000000000000000LL);
    ASSERT_EQ(q("250u", 1000000), 250);
    ASSERT_EQ(q("1n", 1), 1);
    ASSERT_EQ(q("1500n", 1000000), 2);
    ASSERT_EQ(q("2e3", 1), 2000);
    ASSERT_EQ(q("2E3", 1), 2000);
    ASSERT_EQ(q("1.5e+2", 1), 150);
    ASSERT_EQ(q("15e-1", 1000), 1500);
    ASSERT_EQ(q("0.000000000000000000000000000000000000000001", 1), 1);
    ASSERT_EQ(q("0000000000000000000000000000000000000000000000000005", 1), 5);
    ASSERT_EQ(q("9223372036854775807", 1), INT64_MAX);
    ASSERT_EQ(q("0Ei", 1), 0);

    ASSERT_EQ(core_quantity_parse("-1", 1, &v, "limits[x]", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "limits[x]: '-1' is negative");
    ASSERT_EQ(core_quantity_parse("9223372036854775808", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "too large");
    ASSERT_EQ(core_quantity_parse("8Ei", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "too large");
    ASSERT_EQ(core_quantity_parse("10E", 1000, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("1e60", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("1e61", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "exponent out of range");
    ASSERT_EQ(core_quantity_parse("16GB", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "unknown suffix 'GB'");
    ASSERT_EQ(core_quantity_parse("16gi", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("abc", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "not a quantity");
    ASSERT_EQ(core_quantity_parse("", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "empty");
    ASSERT_EQ(core_quantity_parse(".", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("1.2.3", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("1e", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "malformed exponent");
    ASSERT_EQ(core_quantity_parse("1e+", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse(" 1", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("1 ", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("1Gix", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("++1", 1, &v, "f", &e), -GS_EINVAL);
    ASSERT_EQ(core_quantity_parse("1234567890123456789012345678901", 1, &v, "f", &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "significant digits");
    ASSERT_EQ(core_quantity_parse(
                  "11111111111111111111111111111111111111111111111111111111111111111", 1, &v,
                  "f", &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "longer than 64");
    ASSERT_EQ(core_quantity_parse(NULL, 1, &v, "f", &e), -GS_EINVAL);
}

/* Parses a pod from JSON text; returns the parser's result. */
static int parse(const char *text, struct core_pod *pod, struct gs_err *e)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) {
        fprintf(stderr, "bad test JSON: %s: %s\n", je.text, text);
        memset(pod, 0, sizeof *pod);
        return -999;
    }
    int rc = core_pod_parse(j, NULL, pod, e);
    json_decref(j);
    return rc;
}

/* A one-container pod with the given limits object text. */
static int parse_limits(const char *limits, struct core_pod *pod, struct gs_err *e)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ml\"},\"spec\":{\"containers\":"
             "[{\"name\":\"train\",\"resources\":{\"limits\":%s}}]}}",
             limits);
    return parse(buf, pod, e);
}

/* Expects the limits to be rejected with a message containing `want`. */
static void bad(const char *limits, const char *want)
{
    struct core_pod pod;
    struct gs_err e = GS_ERR_INIT;
    int rc = parse_limits(limits, &pod, &e);
    ASSERT_EQ(rc, -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, want);
    ASSERT_CONTAINS(e.msg, "container 'train'");
    ASSERT_EQ(pod.req.kind, CORE_REQ_NONE);
    /* a caller that wants no message gets the same refusal (the extender
     * reads every watched pod so) */
    core_pod_clear(&pod);
    ASSERT_EQ(parse_limits(limits, &pod, NULL), -GS_EINVAL);
    core_pod_clear(&pod);
}

static void forms_tests(void)
{
    struct core_pod pod;
    struct gs_err e = GS_ERR_INIT;

    /* whole GPUs */
    ASSERT_EQ(parse_limits("{\"nvidia.com/gpu\":\"2\"}", &pod, &e), 0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_WHOLE);
    ASSERT_EQ(pod.req.num_gpu, 2);
    ASSERT_EQ(pod.req.milli, 1000);
    ASSERT_EQ(pod.req.mem_mib, 0);
    ASSERT_STREQ(pod.ns, "ml");
    ASSERT_STREQ(pod.name, "p");
    core_pod_clear(&pod);

    /* integer JSON values are accepted as quantities */
    ASSERT_EQ(parse_limits("{\"nvidia.com/gpu\":1}", &pod, &e), 0);
    ASSERT_EQ(pod.req.num_gpu, 1);
    core_pod_clear(&pod);

    /* shared: memory split evenly, cores in percent */
    ASSERT_EQ(parse_limits("{\"nvidia.com/gpu\":\"2\",\"nvidia.com/gpu-memory\":\"16Gi\","
                           "\"nvidia.com/gpu-cores\":\"30\"}",
                           &pod, &e),
              0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_SHARED);
    ASSERT_EQ(pod.req.num_gpu, 2);
    ASSERT_EQ(pod.req.mem_mib, 8192);
    ASSERT_EQ(pod.req.milli, 300);
    core_pod_clear(&pod);

    /* shared by memory alone, odd split rounds up */
    ASSERT_EQ(parse_limits("{\"nvidia.com/gpu\":\"3\",\"nvidia.com/gpu-memory\":\"1Gi\"}", &pod,
                           &e),
              0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_SHARED);
    ASSERT_EQ(pod.req.mem_mib, 342);
    ASSERT_EQ(pod.req.milli, 0);
    core_pod_clear(&pod);

    /* shared by cores alone */
    ASSERT_EQ(parse_limits("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-cores\":\"100\"}", &pod,
                           &e),
              0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_SHARED);
    ASSERT_EQ(pod.req.milli, 1000);
    ASSERT_EQ(pod.req.mem_mib, 0);
    core_pod_clear(&pod);

    /* tkestack: share of one GPU */
    ASSERT_EQ(parse_limits("{\"nvidia.com/vcuda-core\":\"50\",\"nvidia.com/vcuda-memory\":\"8\"}",
                           &pod, &e),
              0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_SHARED);
    ASSERT_EQ(pod.req.num_gpu, 1);
    ASSERT_EQ(pod.req.milli, 500);
    ASSERT_EQ(pod.req.mem_mib, 2048);
    core_pod_clear(&pod);

    /* tkestack: whole GPUs */
    ASSERT_EQ(parse_limits("{\"nvidia.com/vcuda-core\":\"200\",\"nvidia.com/vcuda-memory\":"
                           "\"10\"}",
                           &pod, &e),
              0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_WHOLE);
    ASSERT_EQ(pod.req.num_gpu, 2);
    ASSERT_EQ(pod.req.milli, 1000);
    core_pod_clear(&pod);

    /* MIG */
    ASSERT_EQ(parse_limits("{\"nvidia.com/mig-1g.10gb\":\"2\"}", &pod, &e), 0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_MIG);
    ASSERT_STREQ(pod.req.mig_profile, "1g.10gb");
    ASSERT_EQ(pod.req.mig_count, 2);
    ASSERT_EQ(pod.req.num_gpu, 0);
    core_pod_clear(&pod);
    ASSERT_EQ(parse_limits("{\"nvidia.com/mig-1g.10gb+me\":\"1\"}", &pod, &e), 0);
    ASSERT_STREQ(pod.req.mig_profile, "1g.10gb+me");
    core_pod_clear(&pod);

    /* no GPU; gpu: 0 is no GPU either */
    ASSERT_EQ(parse_limits("{\"cpu\":\"2\",\"memory\":\"4Gi\"}", &pod, &e), 0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_NONE);
    ASSERT_EQ(pod.req.cpu_milli, 2000);
    ASSERT_EQ(pod.req.mem_bytes, 4LL << 30);
    core_pod_clear(&pod);
    ASSERT_EQ(parse_limits("{\"nvidia.com/gpu\":\"0\"}", &pod, &e), 0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_NONE);
    core_pod_clear(&pod);

    /* requests alone are accepted; equal requests and limits too */
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"requests\":"
                    "{\"nvidia.com/gpu\":\"1\",\"cpu\":\"250m\"}}}]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.req.num_gpu, 1);
    ASSERT_EQ(pod.req.cpu_milli, 250);
    ASSERT_STREQ(pod.ns, "default");
    core_pod_clear(&pod);
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"requests\":"
                    "{\"nvidia.com/gpu\":\"1\"},\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}",
                    &pod, &e),
              0);
    core_pod_clear(&pod);
}

static void impossible_tests(void)
{
    bad("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-cores\":\"150\"}",
        "containers[0].limits[nvidia.com/gpu-cores]: '150' is out of range 1..100");
    bad("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-cores\":\"0\"}",
        "limits[nvidia.com/gpu-cores]: '0' is out of range 1..100");
    bad("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-cores\":\"12.5\"}",
        "limits[nvidia.com/gpu-cores]: '12.5' is not a whole number");
    bad("{\"nvidia.com/gpu\":\"0.5\"}", "limits[nvidia.com/gpu]: '0.5' is not a whole number");
    bad("{\"nvidia.com/gpu\":\"500m\"}", "is not a whole number");
    bad("{\"nvidia.com/gpu\":\"17\"}", "limits[nvidia.com/gpu]: '17' is out of range 0..16");
    bad("{\"nvidia.com/gpu\":\"-1\"}", "limits[nvidia.com/gpu]: '-1' is negative");
    bad("{\"nvidia.com/gpu\":\"two\"}", "limits[nvidia.com/gpu]: 'two' is not a quantity");
    bad("{\"nvidia.com/gpu\":true}", "limits[nvidia.com/gpu]: must be a quantity string");
    bad("{\"nvidia.com/gpu-memory\":\"8Gi\"}",
        "limits[nvidia.com/gpu-memory]: needs nvidia.com/gpu");
    bad("{\"nvidia.com/gpu-cores\":\"20\"}", "limits[nvidia.com/gpu-cores]: needs nvidia.com/gpu");
    bad("{\"nvidia.com/gpu\":\"0\",\"nvidia.com/gpu-memory\":\"8Gi\"}", "needs nvidia.com/gpu");
    bad("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"16384\"}",
        "less than 1 MiB; plain numbers are bytes (did you mean '16384Mi'?)");
    bad("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"5Ti\"}", "larger than any GPU");
    bad("{\"memory\":\"8Ei\"}", "limits[memory]: '8Ei' is too large");
    /* the largest quantity: rounding it up to MiB once overflowed (UBSan) */
    bad("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"9223372036854775807\"}",
        "larger than any GPU");
    bad("{\"nvidia.com/vcuda-core\":\"150\"}",
        "limits[nvidia.com/vcuda-core]: '150' must be below 100");
    bad("{\"nvidia.com/vcuda-core\":\"0\"}", "out of range 1..1600");
    bad("{\"nvidia.com/vcuda-memory\":\"4\"}",
        "limits[nvidia.com/vcuda-memory]: needs nvidia.com/vcuda-core");
    bad("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/vcuda-core\":\"50\"}",
        "limits[nvidia.com/vcuda-core]: cannot be combined with nvidia.com/gpu");
    bad("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/mig-1g.10gb\":\"1\"}",
        "limits[nvidia.com/gpu]: cannot be combined with MIG instances (nvidia.com/mig-1g.10gb)");
    bad("{\"nvidia.com/vcuda-core\":\"20\",\"nvidia.com/mig-1g.10gb\":\"1\"}",
        "cannot be combined with MIG");
    bad("{\"nvidia.com/mig-1g.10gb\":\"1\",\"nvidia.com/mig-2g.20gb\":\"1\"}",
        "one profile per pod");
    bad("{\"nvidia.com/mig-big\":\"1\"}", "'big' is not a MIG profile");
    bad("{\"nvidia.com/mig-1g.10gb\":\"0\"}", "out of range 1..16");
    /* a pod holds at most 16 devices: 17 was admitted, then refused by every
     * /filter (the core's allocation holds 16) */
    bad("{\"nvidia.com/mig-1g.10gb\":\"17\"}", "out of range 1..16");
    bad("{\"cpu\":\"lots\"}", "containers[0].limits[cpu]: 'lots' is not a quantity");

    struct core_pod pod;
    struct gs_err e = GS_ERR_INIT;
    /* requests must equal limits for GPU resources */
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"requests\":"
                    "{\"nvidia.com/gpu\":\"1\"},\"limits\":{\"nvidia.com/gpu\":\"2\"}}}]}}",
                    &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "containers[0].requests[nvidia.com/gpu]: '1' differs from limits '2'");
    /* mixing forms across containers */
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/gpu\":\"1\"}}},{\"name\":\"b\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/mig-1g.10gb\":\"1\"}}}]}}",
                    &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "containers[1]: asks for MIG instances while another container");
    /* more than 16 GPUs in total */
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/gpu\":\"9\"}}},{\"name\":\"b\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/gpu\":\"8\"}}}]}}",
                    &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "asks for 17 GPUs in total");
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/mig-1g.10gb\":\"10\"}}},{\"name\":\"b\",\"resources\":{"
                    "\"limits\":{\"nvidia.com/mig-1g.10gb\":\"10\"}}}]}}",
                    &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "asks for 20 MIG instances in total; a pod holds at most 16");
    /* structural errors */
    ASSERT_EQ(parse("{\"spec\":{}}", &pod, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "spec.containers: missing or empty");
    ASSERT_EQ(parse("{\"metadata\":{}}", &pod, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "spec: missing");
    ASSERT_EQ(parse("[]", &pod, &e), -GS_EINVAL);
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{\"resources\":{\"limits\":[]}}]}}", &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "containers[0].resources.limits: must be an object");
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[7]}}", &pod, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "containers[0]: must be an object");
    ASSERT_EQ(parse("{\"spec\":{\"priority\":\"high\",\"containers\":[{}]}}", &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "spec.priority");
    ASSERT_EQ(parse("{\"spec\":{\"priority\":4294967296,\"containers\":[{}]}}", &pod, &e),
              -GS_EINVAL);
    ASSERT_EQ(parse("{\"metadata\":{\"name\":5},\"spec\":{\"containers\":[{}]}}", &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "metadata.name: must be a string");
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{\"name\":\"c\",\"restartPolicy\":\"Always\"}]}}",
                    &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "only init containers");
}

static void summing_tests(void)
{
    struct core_pod pod;
    struct gs_err e = GS_ERR_INIT;

    /* app containers add up; shared shares take the largest per GPU */
    ASSERT_EQ(parse("{\"spec\":{\"containers\":["
                    "{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
                    "\"nvidia.com/gpu-memory\":\"4Gi\",\"cpu\":\"1\"}}},"
                    "{\"name\":\"b\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
                    "\"nvidia.com/gpu-memory\":\"8Gi\",\"nvidia.com/gpu-cores\":\"20\","
                    "\"cpu\":\"500m\"}}}]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_SHARED);
    ASSERT_EQ(pod.req.num_gpu, 2);
    ASSERT_EQ(pod.req.mem_mib, 8192);
    ASSERT_EQ(pod.req.milli, 200);
    ASSERT_EQ(pod.req.cpu_milli, 1500);
    core_pod_clear(&pod);

    /* init containers: max(max init, sum app) */
    ASSERT_EQ(parse("{\"spec\":{\"initContainers\":["
                    "{\"name\":\"i1\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"3\","
                    "\"cpu\":\"4\"}}},"
                    "{\"name\":\"i2\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}],"
                    "\"containers\":["
                    "{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
                    "\"cpu\":\"1\"}}},"
                    "{\"name\":\"b\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
                    "\"cpu\":\"1\"}}}]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_WHOLE);
    ASSERT_EQ(pod.req.num_gpu, 3);
    ASSERT_EQ(pod.req.cpu_milli, 4000);
    core_pod_clear(&pod);

    /* sidecar (restartable init container) adds to the app containers and
     * runs alongside later init containers; overhead adds on top */
    ASSERT_EQ(parse("{\"spec\":{\"overhead\":{\"cpu\":\"100m\"},\"initContainers\":["
                    "{\"name\":\"side\",\"restartPolicy\":\"Always\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/gpu\":\"1\",\"cpu\":\"1\"}}},"
                    "{\"name\":\"init\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"2\","
                    "\"cpu\":\"1\"}}}],"
                    "\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/gpu\":\"1\"}}}]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.req.num_gpu, 3); /* init (2) alongside the sidecar (1) */
    ASSERT_EQ(pod.req.cpu_milli, 2100);
    core_pod_clear(&pod);

    /* MIG counts add up */
    ASSERT_EQ(parse("{\"spec\":{\"containers\":["
                    "{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/mig-1g.10gb\":\"1\"}}},"
                    "{\"name\":\"b\",\"resources\":{\"limits\":{\"nvidia.com/mig-1g.10gb\":\"2\"}}}"
                    "]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_MIG);
    ASSERT_EQ(pod.req.mig_count, 3);
    core_pod_clear(&pod);

    /* an init container of another kind than the app containers */
    ASSERT_EQ(parse("{\"spec\":{\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-cores\":\"10\"}}}],"
                    "\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/gpu\":\"1\"}}}]}}",
                    &pod, &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "one kind of GPU request");
}

static void selection_tests(void)
{
    struct core_pod pod;
    struct gs_err e = GS_ERR_INIT;
    char *keys[] = {"nvidia.com/gpu.product", "zone", "gpus"};
    char *vals[] = {"NVIDIA-H100-80GB-HBM3", "a", "8"};
    char *vals_b[] = {"Tesla-T4", "b", "2"};

    ASSERT_EQ(parse("{\"metadata\":{\"annotations\":{\"gpusched.io/gpu-type\":\" h100 , A100,\","
                    "\"gpusched.io/gpu-type-exclude\":\"T4\",\"gpusched.io/policy\":\"fgd\"}},"
                    "\"spec\":{\"priority\":100,\"nodeSelector\":{\"zone\":\"a\"},"
                    "\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":"
                    "{\"nodeSelectorTerms\":["
                    "{\"matchExpressions\":[{\"key\":\"gpus\",\"operator\":\"Gt\",\"values\":[\"4\"]},"
                    "{\"key\":\"nvidia.com/gpu.product\",\"operator\":\"In\",\"values\":"
                    "[\"NVIDIA-H100-80GB-HBM3\",\"NVIDIA-A100\"]},"
                    "{\"key\":\"broken\",\"operator\":\"DoesNotExist\"}]},"
                    "{\"matchExpressions\":[{\"key\":\"gpus\",\"operator\":\"Lt\",\"values\":[\"3\"]},"
                    "{\"key\":\"zone\",\"operator\":\"NotIn\",\"values\":[\"a\"]},"
                    "{\"key\":\"zone\",\"operator\":\"Exists\"}]}]}}},"
                    "\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Equal\",\"value\":\"yes\","
                    "\"effect\":\"NoSchedule\"},{\"key\":\"dedicated\",\"operator\":\"Exists\"}],"
                    "\"containers\":[{\"name\":\"a\"}]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.priority, 100);
    ASSERT_STREQ(pod.policy, "fgd");
    ASSERT_EQ(pod.req.n_types, 2);
    ASSERT_STREQ(pod.req.types[0], "h100");
    ASSERT_STREQ(pod.req.types[1], "A100");
    ASSERT_EQ(pod.req.n_types_exclude, 1);
    ASSERT_EQ(pod.n_selector, 1);
    ASSERT_EQ(pod.n_terms, 2);
    ASSERT_EQ(pod.terms[0].n_reqs, 3);

    ASSERT_TRUE(core_request_model_ok(&pod.req, "NVIDIA-H100-80GB-HBM3"));
    ASSERT_TRUE(core_request_model_ok(&pod.req, "NVIDIA A100-SXM4-40GB"));
    ASSERT_TRUE(!core_request_model_ok(&pod.req, "NVIDIA-V100"));
    ASSERT_TRUE(!core_request_model_ok(&pod.req, "Tesla-T4"));

    ASSERT_TRUE(core_pod_matches_labels(&pod, 3, keys, vals));   /* term 0 */
    ASSERT_TRUE(!core_pod_matches_labels(&pod, 3, keys, vals_b)); /* zone b fails selector */
    char *vals_c[] = {"Tesla-T4", "a", "2"};
    ASSERT_TRUE(!core_pod_matches_labels(&pod, 3, keys, vals_c)); /* term 1: NotIn a */
    char *vals_d[] = {"NVIDIA-H100-80GB-HBM3", "a", "four"};
    ASSERT_TRUE(!core_pod_matches_labels(&pod, 3, keys, vals_d)); /* Gt on a non-integer */
    ASSERT_TRUE(!core_pod_matches_labels(&pod, 1, keys, vals));   /* no zone label */

    ASSERT_TRUE(core_pod_tolerates(&pod, "gpu", "yes", "NoSchedule"));
    ASSERT_TRUE(!core_pod_tolerates(&pod, "gpu", "no", "NoSchedule"));
    ASSERT_TRUE(!core_pod_tolerates(&pod, "gpu", "yes", "NoExecute"));
    ASSERT_TRUE(core_pod_tolerates(&pod, "dedicated", "ml", "NoExecute"));
    ASSERT_TRUE(!core_pod_tolerates(&pod, "other", "", "NoSchedule"));
    ASSERT_TRUE(core_pod_tolerates(&pod, "other", "", "PreferNoSchedule"));
    core_pod_clear(&pod);

    /* matchFields pins a node by name; an empty term matches nothing */
    ASSERT_EQ(parse("{\"spec\":{\"affinity\":{\"nodeAffinity\":"
                    "{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":["
                    "{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":\"In\","
                    "\"values\":[\"n1\"]}]},{}]}}},"
                    "\"tolerations\":[{\"operator\":\"Exists\"}],\"containers\":[{}]}}",
                    &pod, &e),
              0);
    ASSERT_TRUE(core_pod_matches_node(&pod, "n1", 0, NULL, NULL));
    ASSERT_TRUE(!core_pod_matches_node(&pod, "n2", 0, NULL, NULL));
    ASSERT_TRUE(core_pod_matches_labels(&pod, 0, NULL, NULL));
    ASSERT_TRUE(core_pod_tolerates(&pod, "anything", "x", "NoExecute"));
    core_pod_clear(&pod);
    /* and the core's filter pins it (the simulator, standalone mode): a
     * GPU pod pinned to n2 lands there, not on the emptier n1 */
    {
        struct core_cluster *c = core_cluster_new();
        for (int k = 0; k < 2; k++) {
            struct core_node_spec ns;
            memset(&ns, 0, sizeof ns);
            ns.name = k ? "n2" : "n1";
            ns.cpu_milli = 8000;
            ns.mem_bytes = (int64_t)8 << 30;
            ns.n_gpus = k ? 1 : 4;
            for (int g = 0; g < ns.n_gpus; g++) {
                ns.gpus[g].index = g;
                snprintf(ns.gpus[g].model, CORE_MODEL_MAX, "A100");
                ns.gpus[g].mem_mib = 40960;
                ns.gpus[g].healthy = 1;
            }
            ASSERT_EQ(core_cluster_upsert_node(c, &ns, &e), 0);
        }
        ASSERT_EQ(parse("{\"spec\":{\"affinity\":{\"nodeAffinity\":"
                        "{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":"
                        "[{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":\"In\","
                        "\"values\":[\"n2\"]}]}]}}},\"containers\":[{\"name\":\"c\","
                        "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}",
                        &pod, &e),
                  0);
        struct core_decision d;
        for (int i = 0; i < core_policy_count(); i++) {
            ASSERT_EQ(core_schedule_one(c, core_policy_at(i), &pod, &d, &e), 0);
            ASSERT_STREQ(d.node->name, "n2");
        }
        core_pod_clear(&pod);
        core_cluster_free(c);
    }

    /* preferred node affinity: each matching term adds its weight (matchFields
     * too); kept apart from the required terms, which it never narrows */
    ASSERT_EQ(parse("{\"spec\":{\"affinity\":{\"nodeAffinity\":"
                    "{\"preferredDuringSchedulingIgnoredDuringExecution\":["
                    "{\"weight\":20,\"preference\":{\"matchExpressions\":[{\"key\":\"zone\","
                    "\"operator\":\"In\",\"values\":[\"a\"]}]}},"
                    "{\"weight\":5,\"preference\":{\"matchFields\":[{\"key\":\"metadata.name\","
                    "\"operator\":\"In\",\"values\":[\"n1\"]}]}},"
                    "{\"weight\":100,\"preference\":{}}]}},"
                    "\"tolerations\":[{\"key\":\"spot\",\"operator\":\"Exists\","
                    "\"effect\":\"PreferNoSchedule\"}],\"containers\":[{}]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.n_terms, 0);
    ASSERT_EQ(pod.n_prefs, 3);
    ASSERT_EQ(pod.pref_weights[0], 20);
    ASSERT_TRUE(core_pod_matches_labels(&pod, 3, keys, vals_b)); /* preferences never refuse */
    {
        int aff, intol;
        struct core_taint t[2] = {{"spot", "1", "PreferNoSchedule"}, {"old", "", "PreferNoSchedule"}};
        core_pod_soft_counts(&pod, "n1", 3, keys, vals, 2, t, &aff, &intol);
        ASSERT_EQ(aff, 25);  /* zone a and the name; an empty term matches nothing */
        ASSERT_EQ(intol, 1); /* spot tolerated, old not */
        core_pod_soft_counts(&pod, "n2", 3, keys, vals_b, 1, t, &aff, &intol);
        ASSERT_EQ(aff, 0);
        ASSERT_EQ(intol, 0);
    }
    core_pod_clear(&pod);

    /* preferred pod affinity (+weight) and anti-affinity (-weight): which pods
     * a term picks (its namespaces, else the pod's own; its label selector) */
    ASSERT_EQ(parse("{\"metadata\":{\"namespace\":\"ml\"},\"spec\":{\"affinity\":{"
                    "\"podAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":["
                    "{\"weight\":7,\"podAffinityTerm\":{\"topologyKey\":\"zone\","
                    "\"labelSelector\":{\"matchLabels\":{\"app\":\"db\"},"
                    "\"matchExpressions\":[{\"key\":\"tier\",\"operator\":\"NotIn\","
                    "\"values\":[\"test\"]}]}}}]},"
                    "\"podAntiAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":["
                    "{\"weight\":100,\"podAffinityTerm\":{\"topologyKey\":\"h\","
                    "\"namespaces\":[\"web\"],\"labelSelector\":{}}},"
                    "{\"weight\":3,\"podAffinityTerm\":{\"topologyKey\":\"h\","
                    "\"namespaceSelector\":{},\"labelSelector\":{\"matchExpressions\":["
                    "{\"key\":\"gpu\",\"operator\":\"Exists\"}]}}},"
                    "{\"weight\":9,\"podAffinityTerm\":{\"topologyKey\":\"h\"}},"
                    "{\"weight\":8,\"podAffinityTerm\":{\"topologyKey\":\"h\","
                    "\"namespaceSelector\":{\"matchLabels\":{\"t\":\"x\"}},"
                    "\"labelSelector\":{}}}]}},"
                    "\"containers\":[{}]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.n_pod_terms, 5);
    ASSERT_EQ(pod.pod_terms[0].weight, 7);
    ASSERT_EQ(pod.pod_terms[1].weight, -100);
    ASSERT_STREQ(pod.pod_terms[2].topology_key, "h");
    {
        /* the 4th has no labelSelector, the 5th a namespaceSelector with
         * labels (namespaces' labels are not known): they pick nothing */
        static const struct { const char *pod; int picks[5]; } others[] = {
            {"{\"metadata\":{\"namespace\":\"ml\",\"labels\":{\"app\":\"db\"}}}",
             {1, 0, 0, 0, 0}},
            {"{\"metadata\":{\"namespace\":\"ml\",\"labels\":{\"app\":\"db\","
             "\"tier\":\"test\"}}}", {0, 0, 0, 0, 0}},
            {"{\"metadata\":{\"labels\":{\"app\":\"db\"}}}", {0, 0, 0, 0, 0}}, /* default */
            {"{\"metadata\":{\"namespace\":\"web\"}}", {0, 1, 0, 0, 0}}, /* {} picks all */
            {"{\"metadata\":{\"namespace\":\"x\",\"labels\":{\"gpu\":\"\"}}}",
             {0, 0, 1, 0, 0}}, /* namespaceSelector {}: every namespace */
        };
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
            json_t *o = json_loads(others[i].pod, 0, NULL);
            for (int t = 0; t < 5; t++)
                if (core_pod_term_picks(&pod, &pod.pod_terms[t], o) != others[i].picks[t])
                    TEST_FAIL_("term %d picks %s: want %d", t, others[i].pod,
                               others[i].picks[t]);
            json_decref(o);
        }
    }
    core_pod_clear(&pod);

    /* topology spread: the ScheduleAnyway constraints are terms (the pod's own
     * namespace); DoNotSchedule is kube-scheduler's filter */
    ASSERT_EQ(parse("{\"spec\":{\"topologySpreadConstraints\":["
                    "{\"maxSkew\":1,\"topologyKey\":\"zone\",\"whenUnsatisfiable\":"
                    "\"DoNotSchedule\",\"labelSelector\":{\"matchLabels\":{\"a\":\"b\"}}},"
                    "{\"maxSkew\":3,\"topologyKey\":\"h\",\"whenUnsatisfiable\":"
                    "\"ScheduleAnyway\",\"labelSelector\":{\"matchLabels\":{\"a\":\"b\"}}}],"
                    "\"containers\":[{}]}}",
                    &pod, &e),
              0);
    ASSERT_EQ(pod.n_pod_terms, 1);
    ASSERT_EQ(pod.pod_terms[0].max_skew, 3);
    ASSERT_EQ(pod.pod_terms[0].weight, 0);
    ASSERT_STREQ(pod.pod_terms[0].topology_key, "h");
    {
        json_t *o = json_loads("{\"metadata\":{\"labels\":{\"a\":\"b\"}}}", 0, NULL);
        ASSERT_TRUE(core_pod_term_picks(&pod, &pod.pod_terms[0], o));
        json_decref(o);
    }
    core_pod_clear(&pod);

    /* no lists: everything matches, nothing tolerated, every model ok */
    ASSERT_EQ(parse("{\"spec\":{\"containers\":[{}]}}", &pod, &e), 0);
    ASSERT_TRUE(core_pod_matches_labels(&pod, 0, NULL, NULL));
    ASSERT_TRUE(!core_pod_tolerates(&pod, "k", "v", "NoSchedule"));
    ASSERT_TRUE(core_request_model_ok(&pod.req, "anything"));
    core_pod_clear(&pod);

    static const struct { const char *json, *want; } errs[] = {
        {"{\"spec\":{\"nodeSelector\":{\"zone\":1},\"containers\":[{}]}}",
         "spec.nodeSelector[zone]: must be a string"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
         "Execution\":{\"nodeSelectorTerms\":[]}}},\"containers\":[{}]}}",
         "nodeSelectorTerms: must be a non-empty list"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
         "Execution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"a\","
         "\"operator\":\"Near\"}]}]}}},\"containers\":[{}]}}",
         "matchExpressions[0].operator: 'Near' is not one of"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
         "Execution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"a\","
         "\"operator\":\"In\"}]}]}}},\"containers\":[{}]}}",
         "In needs at least one value"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
         "Execution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"a\","
         "\"operator\":\"Exists\",\"values\":[\"x\"]}]}]}}},\"containers\":[{}]}}",
         "Exists takes no values"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
         "Execution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"a\","
         "\"operator\":\"Gt\",\"values\":[\"x\"]}]}]}}},\"containers\":[{}]}}",
         "values[0]: 'x' is not an integer"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
         "Execution\":{\"nodeSelectorTerms\":[{\"matchFields\":[{\"key\":\"metadata.uid\","
         "\"operator\":\"In\",\"values\":[\"x\"]}]}]}}},\"containers\":[{}]}}",
         "not a supported node field"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"preferredDuringSchedulingIgnoredDuring"
         "Execution\":{}}},\"containers\":[{}]}}",
         "preferredDuringSchedulingIgnoredDuringExecution: must be a list"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"preferredDuringSchedulingIgnoredDuring"
         "Execution\":[{\"weight\":0,\"preference\":{}}]}},\"containers\":[{}]}}",
         "preferredDuringSchedulingIgnoredDuringExecution[0].weight: must be an integer 1..100"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"preferredDuringSchedulingIgnoredDuring"
         "Execution\":[{\"weight\":1}]}},\"containers\":[{}]}}",
         "preferredDuringSchedulingIgnoredDuringExecution[0].preference: missing"},
        {"{\"spec\":{\"affinity\":{\"nodeAffinity\":{\"preferredDuringSchedulingIgnoredDuring"
         "Execution\":[{\"weight\":1,\"preference\":{\"matchExpressions\":[{\"key\":\"a\","
         "\"operator\":\"Near\"}]}}]}},\"containers\":[{}]}}",
         "[0].preference.matchExpressions[0].operator: 'Near' is not one of"},
        {"{\"spec\":{\"affinity\":{\"podAntiAffinity\":{\"preferredDuringSchedulingIgnored"
         "DuringExecution\":[{\"weight\":101,\"podAffinityTerm\":{}}]}},\"containers\":[{}]}}",
         "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: must be an "
         "integer 1..100"},
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"preferredDuringSchedulingIgnored"
         "DuringExecution\":[{\"weight\":1}]}},\"containers\":[{}]}}",
         "podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm: must "
         "be an object"},
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"preferredDuringSchedulingIgnored"
         "DuringExecution\":[{\"weight\":1,\"podAffinityTerm\":{}}]}},\"containers\":[{}]}}",
         "[0].podAffinityTerm.topologyKey: missing"},
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"preferredDuringSchedulingIgnored"
         "DuringExecution\":[{\"weight\":1,\"podAffinityTerm\":{\"topologyKey\":\"z\","
         "\"labelSelector\":{\"matchExpressions\":[{\"key\":\"n\",\"operator\":\"Gt\","
         "\"values\":[\"1\"]}]}}}]}},\"containers\":[{}]}}",
         "labelSelector.matchExpressions[0].operator: a label selector allows only In"},
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"preferredDuringSchedulingIgnored"
         "DuringExecution\":[{\"weight\":1,\"podAffinityTerm\":{\"topologyKey\":\"z\","
         "\"labelSelector\":{\"matchLabels\":{\"a\":1}}}}]}},\"containers\":[{}]}}",
         "labelSelector.matchLabels.a: must be a string"},
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"preferredDuringSchedulingIgnored"
         "DuringExecution\":[{\"weight\":1,\"podAffinityTerm\":{\"topologyKey\":\"z\","
         "\"namespaces\":[\"a\",2]}}]}},\"containers\":[{}]}}",
         "podAffinityTerm.namespaces[1]: must be a string"},
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"preferredDuringSchedulingIgnored"
         "DuringExecution\":[{\"weight\":1,\"podAffinityTerm\":{\"topologyKey\":\"z\","
         "\"namespaceSelector\":[]}}]}},\"containers\":[{}]}}",
         "podAffinityTerm.namespaceSelector: must be an object"},
        {"{\"spec\":{\"topologySpreadConstraints\":{},\"containers\":[{}]}}",
         "spec.topologySpreadConstraints: must be a list"},
        {"{\"spec\":{\"topologySpreadConstraints\":[{\"maxSkew\":0,\"topologyKey\":\"h\","
         "\"whenUnsatisfiable\":\"ScheduleAnyway\"}],\"containers\":[{}]}}",
         "spec.topologySpreadConstraints[0].maxSkew: must be a positive integer"},
        {"{\"spec\":{\"topologySpreadConstraints\":[{\"maxSkew\":1,\"topologyKey\":\"h\","
         "\"whenUnsatisfiable\":\"Maybe\"}],\"containers\":[{}]}}",
         "[0].whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway"},
        {"{\"spec\":{\"topologySpreadConstraints\":[{\"maxSkew\":1,"
         "\"whenUnsatisfiable\":\"ScheduleAnyway\"}],\"containers\":[{}]}}",
         "[0].topologyKey: must be a non-empty string"},
        {"{\"spec\":{\"topologySpreadConstraints\":[{\"maxSkew\":1,\"topologyKey\":\"h\","
         "\"whenUnsatisfiable\":\"ScheduleAnyway\",\"labelSelector\":{\"matchExpressions\":"
         "[{\"key\":\"a\",\"operator\":\"In\"}]}}],\"containers\":[{}]}}",
         "[0].labelSelector.matchExpressions[0].values: In needs at least one value"},
        {"{\"spec\":{\"affinity\":{\"podAntiAffinity\":[]},\"containers\":[{}]}}",
         "spec.affinity.podAntiAffinity: must be an object"},
        {"{\"spec\":{\"tolerations\":[{\"key\":\"a\",\"operator\":\"Exists\",\"value\":\"b\"}],"
         "\"containers\":[{}]}}",
         "spec.tolerations[0].value: must be empty when operator is Exists"},
        {"{\"spec\":{\"tolerations\":[{\"operator\":\"Equal\",\"value\":\"b\"}],"
         "\"containers\":[{}]}}",
         "spec.tolerations[0].key: an empty key needs operator Exists"},
        {"{\"spec\":{\"tolerations\":[{\"key\":\"a\",\"effect\":\"Sometimes\"}],"
         "\"containers\":[{}]}}",
         "spec.tolerations[0].effect: 'Sometimes'"},
        {"{\"spec\":{\"tolerations\":[{\"key\":\"a\",\"operator\":\"Maybe\"}],"
         "\"containers\":[{}]}}",
         "spec.tolerations[0].operator: 'Maybe'"},
        {"{\"metadata\":{\"annotations\":{\"gpusched.io/policy\":\"Bin Pack\"}},"
         "\"spec\":{\"containers\":[{}]}}",
         "metadata.annotations[gpusched.io/policy]: 'Bin Pack' is not a policy name"},
        {"{\"metadata\":{\"annotations\":{\"gpusched.io/policy\":\"binpak\"}},"
         "\"spec\":{\"containers\":[{}]}}",
         "metadata.annotations[gpusched.io/policy]: 'binpak' is not a known policy (random, "},
        {"{\"metadata\":{\"annotations\":{\"gpusched.io/gpu-type\":\"a,b,c,d,e,f,g,h,i\"}},"
         "\"spec\":{\"containers\":[{}]}}",
         "metadata.annotations[gpusched.io/gpu-type]: more than 8 GPU types"},
        {"{\"metadata\":{\"annotations\":{\"gpusched.io/gpu-type-exclude\":3}},"
         "\"spec\":{\"containers\":[{}]}}",
         "gpu-type-exclude]: must be a string"},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        ASSERT_EQ(parse(errs[i].json, &pod, &e), -GS_EINVAL);
        ASSERT_CONTAINS(e.msg, errs[i].want);
        ASSERT_EQ(pod.n_terms + pod.n_tolerations + pod.n_selector + pod.n_prefs +
                      pod.n_pod_terms, 0);
    }
}

/* Names are configurable: another vendor's resource names work the same. */
static void names_tests(void)
{
    struct core_names nm = *core_names_default();
    struct core_pod pod;
    struct gs_err e = GS_ERR_INIT;
    json_t *j = json_loads("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                           "{\"example.com/gpu\":\"1\",\"example.com/gpu-mem\":\"2Gi\"}}}]}}",
                           0, NULL);
    nm.gpu = "example.com/gpu";
    nm.gpu_memory = "example.com/gpu-mem";
    ASSERT_EQ(core_pod_parse(j, &nm, &pod, &e), 0);
    ASSERT_EQ(pod.req.kind, CORE_REQ_SHARED);
    ASSERT_EQ(pod.req.mem_mib, 2048);
    core_pod_clear(&pod);
    json_decref(j);

    /* two prefixes: every default name under the resource prefix */
    struct core_names_store st;
    ASSERT_EQ(core_names_prefixed(&st, "example.com/", "sched.example.com/", &e), 0);
    const struct core_names *d = core_names_default();
    const char *got[] = {st.names.gpu, st.names.gpu_memory, st.names.gpu_cores,
                         st.names.vcuda_core, st.names.vcuda_memory, st.names.mig_prefix};
    const char *def[] = {d->gpu, d->gpu_memory, d->gpu_cores, d->vcuda_core, d->vcuda_memory,
                         d->mig_prefix};
    for (int i = 0; i < 6; i++) {
        char want[64];
        snprintf(want, sizeof want, "example.com/%s", def[i] + strlen("nvidia.com/"));
        ASSERT_STREQ(got[i], want);
    }
    ASSERT_STREQ(st.names.annot_prefix, "sched.example.com/");
    ASSERT_EQ(core_names_prefixed(&st, "nvidia.com/", "gpusched.io/", &e), 0);
    ASSERT_STREQ(st.names.gpu_cores, d->gpu_cores);
    ASSERT_STREQ(st.names.mig_prefix, d->mig_prefix);
    static const struct {
        const char *res, *annot, *want;
    } bad[] = {
        {"example.com", "a.io/", "resource prefix 'example.com': must be a DNS subdomain"},
        {"Example.com/", "a.io/", "resource prefix 'Example.com/'"},
        {"/", "a.io/", "resource prefix '/'"},
        {"", "a.io/", "resource prefix ''"},
        {"a/b/", "a.io/", "resource prefix 'a/b/'"},
        {"-a.com/", "a.io/", "resource prefix '-a.com/'"},
        {"a.com./", "a.io/", "resource prefix 'a.com./'"},
        {"abcdefghijklmnopqrstuvwx/", "a.io/", "at most 24 characters"},
        {"a.io/", "a.io", "annotation prefix 'a.io'"},
        {"a.io/", "a_b.io/", "annotation prefix 'a_b.io/'"},
        {"kubernetes.io/", "a.io/", "resource prefix 'kubernetes.io/': the kubernetes.io"},
        {"gpu.kubernetes.io/", "a.io/", "the kubernetes.io domain is Kubernetes' own"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct gs_err ee = GS_ERR_INIT;
        ASSERT_EQ(core_names_prefixed(&st, bad[i].res, bad[i].annot, &ee), -GS_EINVAL);
        ASSERT_CONTAINS(ee.msg, bad[i].want);
    }
    ASSERT_EQ(core_prefix_check("x", "abcdefghijklmnopqrstuvw/", CORE_RES_PREFIX_MAX, &e), 0);
}

static void container_tests(void)
{
    struct core_request r;
    struct gs_err e = GS_ERR_INIT;
    json_t *c = json_loads("{\"name\":\"x\",\"resources\":{\"limits\":{\"nvidia.com/vcuda-core\":"
                           "\"30\",\"nvidia.com/vcuda-memory\":\"4\"}}}", 0, NULL);
    ASSERT_EQ(core_container_parse(c, NULL, "initContainers", 2, &r, &e), 0);
    ASSERT_EQ(r.kind, CORE_REQ_SHARED);
    ASSERT_EQ(r.mem_mib, 1024);
    ASSERT_EQ(r.milli, 300);
    json_object_set_new(json_object_get(json_object_get(c, "resources"), "limits"),
                        "nvidia.com/vcuda-core", json_string("101"));
    ASSERT_EQ(core_container_parse(c, NULL, "initContainers", 2, &r, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "initContainers[2].limits[nvidia.com/vcuda-core]: '101'");
    ASSERT_CONTAINS(e.msg, "(container 'x')");
    json_decref(c);
}

/* What a placed pod's terms pick pods to come with (the symmetric half of
 * InterPodAffinity): preferred affinity +weight, anti-affinity -weight,
 * required affinity +1; not required anti-affinity (kube-scheduler's filter)
 * nor spread, nor anything of its containers. */
static void placed_terms_tests(void)
{
    struct core_pod pod;
    struct gs_err e = GS_ERR_INIT;
    json_t *j = json_loads(
        "{\"metadata\":{\"name\":\"o\",\"namespace\":\"ml\",\"uid\":\"u1\"},"
        "\"spec\":{\"affinity\":{\"podAffinity\":{"
        "\"requiredDuringSchedulingIgnoredDuringExecution\":[{\"topologyKey\":\"zone\","
        "\"labelSelector\":{\"matchLabels\":{\"app\":\"db\"}}}],"
        "\"preferredDuringSchedulingIgnoredDuringExecution\":[{\"weight\":7,"
        "\"podAffinityTerm\":{\"topologyKey\":\"h\",\"labelSelector\":{}}}]},"
        "\"podAntiAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":["
        "{\"topologyKey\":\"h\",\"labelSelector\":{}}],"
        "\"preferredDuringSchedulingIgnoredDuringExecution\":[{\"weight\":40,"
        "\"podAffinityTerm\":{\"topologyKey\":\"h\",\"namespaces\":[\"web\"],"
        "\"labelSelector\":{\"matchLabels\":{\"app\":\"x\"}}}}]}},"
        "\"topologySpreadConstraints\":[{\"maxSkew\":1,\"topologyKey\":\"h\","
        "\"whenUnsatisfiable\":\"ScheduleAnyway\"}],"
        "\"containers\":[{\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"junk\"}}}]}}",
        0, NULL);
    ASSERT_EQ(core_pod_affinity_parse(j, CORE_HARD_POD_AFFINITY_WEIGHT, &pod, &e), 3);
    ASSERT_STREQ(pod.ns, "ml");
    ASSERT_STREQ(pod.uid, "u1");
    ASSERT_EQ(pod.pod_terms[0].weight, 7);
    ASSERT_EQ(pod.pod_terms[1].weight, CORE_HARD_POD_AFFINITY_WEIGHT);
    ASSERT_STREQ(pod.pod_terms[1].topology_key, "zone");
    ASSERT_EQ(pod.pod_terms[2].weight, -40);
    {
        json_t *db = json_loads("{\"metadata\":{\"namespace\":\"ml\",\"labels\":"
                                "{\"app\":\"db\"}}}", 0, NULL);
        json_t *x = json_loads("{\"metadata\":{\"namespace\":\"web\",\"labels\":"
                               "{\"app\":\"x\"}}}", 0, NULL);
        ASSERT_TRUE(core_pod_term_picks(&pod, &pod.pod_terms[1], db)); /* its namespace */
        ASSERT_TRUE(!core_pod_term_picks(&pod, &pod.pod_terms[1], x));
        ASSERT_TRUE(core_pod_term_picks(&pod, &pod.pod_terms[2], x));
        ASSERT_TRUE(!core_pod_term_picks(&pod, &pod.pod_terms[2], db));
        json_decref(db);
        json_decref(x);
    }
    core_pod_clear(&pod);
    /* kube-scheduler's hardPodAffinityWeight: its value, or 0 = no such term */
    ASSERT_EQ(core_pod_affinity_parse(j, 37, &pod, &e), 3);
    ASSERT_EQ(pod.pod_terms[1].weight, 37);
    core_pod_clear(&pod);
    ASSERT_EQ(core_pod_affinity_parse(j, 0, &pod, &e), 2);
    ASSERT_EQ(pod.pod_terms[0].weight, 7);
    ASSERT_EQ(pod.pod_terms[1].weight, -40);
    core_pod_clear(&pod);
    json_decref(j);

    j = json_loads("{\"metadata\":{},\"spec\":{\"containers\":[{}]}}", 0, NULL);
    ASSERT_EQ(core_pod_affinity_parse(j, CORE_HARD_POD_AFFINITY_WEIGHT, &pod, &e), 0); /* none */
    ASSERT_STREQ(pod.ns, "default");
    core_pod_clear(&pod);
    json_decref(j);

    static const struct { const char *json, *want; } errs[] = {
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"requiredDuringScheduling"
         "IgnoredDuringExecution\":{}}}}}",
         "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution: must be a "
         "list"},
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"requiredDuringScheduling"
         "IgnoredDuringExecution\":[{\"labelSelector\":{}}]}}}}",
         "podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: missing"},
        {"{\"spec\":{\"affinity\":{\"podAffinity\":{\"requiredDuringScheduling"
         "IgnoredDuringExecution\":[7]}}}}",
         "requiredDuringSchedulingIgnoredDuringExecution[0]: must be an object"},
        {"{\"spec\":{\"affinity\":{\"podAntiAffinity\":{\"preferredDuringScheduling"
         "IgnoredDuringExecution\":[{\"weight\":0}]}}}}",
         "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: must be an "
         "integer 1..100"},
        {"{\"spec\":{\"affinity\":[]}}", "spec.affinity: must be an object"},
        {"[]", "pod: must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        struct gs_err ee = GS_ERR_INIT;
        j = json_loads(errs[i].json, 0, NULL);
        ASSERT_TRUE(j != NULL);
        ASSERT_EQ(core_pod_affinity_parse(j, CORE_HARD_POD_AFFINITY_WEIGHT, &pod, &ee), -GS_EINVAL);
        if (!strstr(ee.msg, errs[i].want))
            TEST_FAIL_("%s: got '%s', want '%s'", errs[i].json, ee.msg, errs[i].want);
        ASSERT_EQ(pod.n_pod_terms, 0);
        json_decref(j);
    }
}

int test_request(void)
{
    placed_terms_tests();
    container_tests();
    quantity_tests();
    forms_tests();
    impossible_tests();
    summing_tests();
    selection_tests();
    names_tests();
    return 0;
}
