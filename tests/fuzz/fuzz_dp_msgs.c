/* tests/fuzz/fuzz_dp_msgs.c - what kubelet and the API server send the device
 * plugin, on arbitrary bytes. The first byte picks the parser:
 *   0: a PreferredAllocationRequest, answered by dp_devices_prefer;
 *   1: a ListPodResourcesResponse (dp_podres_parse);
 *   2: a JSON pod list matched by dp_alloc_match, then packed by dp_alloc_pack;
 *   3: an AllocateRequest whose IDs are looked up and answered, with every
 *      device list strategy (one mount and one CDI name per GPU).
 * Nothing may crash, leak or answer with an ID it was not offered. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin.pb-c.h"
#include "dp/alloc.h"
#include "dp/devices.h"
#include "dp/podres.h"

static struct dp_inventory inv;
static struct dp_resource res[DP_MAX_RESOURCES];

static void setup(void)
{
    struct dp_devices_cfg cfg = {"nvidia.com/", 2};

    inv.n = 4;
    for (int i = 0; i < 4; i++) {
        snprintf(inv.gpu[i].uuid, sizeof inv.gpu[i].uuid, "GPU-%d", i);
        snprintf(inv.gpu[i].model, sizeof inv.gpu[i].model, "H100");
        inv.gpu[i].index = inv.gpu[i].minor = i;
        inv.gpu[i].numa_node = i / 2;
        inv.gpu[i].healthy = 1;
        for (int j = 0; j < 4; j++)
            if (j != i)
                inv.gpu[i].link[j] = i / 2 == j / 2 ? CORE_LINK_NVLINK : CORE_LINK_SYS;
    }
    dp_devices_build(&inv, &cfg, res, DP_MAX_RESOURCES);
}

static int offered(char *const *ids, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ids[i], id) == 0)
            return 1;
    return 0;
}

static void preferred(const uint8_t *d, size_t n)
{
    V1beta1__PreferredAllocationRequest *r = v1beta1__preferred_allocation_request__unpack(NULL, n, d);
    const char *out[DP_MAX_DEVICES];
    struct gs_err e = GS_ERR_INIT;

    if (!r)
        return;
    for (size_t i = 0; i < r->n_container_requests; i++) {
        V1beta1__ContainerPreferredAllocationRequest *c = r->container_requests[i];
        if (dp_devices_prefer(&res[0], &inv, c->available_deviceids, c->n_available_deviceids,
                              c->must_include_deviceids, c->n_must_include_deviceids,
                              c->allocation_size, out, &e) != 0)
            continue;
        for (int k = 0; k < c->allocation_size; k++)
            if (!offered(c->available_deviceids, c->n_available_deviceids, out[k]) &&
                !offered(c->must_include_deviceids, c->n_must_include_deviceids, out[k]))
                abort();
    }
    v1beta1__preferred_allocation_request__free_unpacked(r, NULL);
}

static void pods(const uint8_t *d, size_t n)
{
    json_t *j = json_loadb((const char *)d, n, 0, NULL);
    struct dp_assign a;
    struct gs_err e = GS_ERR_INIT;
    struct dp_alloc_opts o = {.annot_prefix = "gpusched.io/"};
    char *claimed[] = {"ns/p/c"};

    if (!j)
        return;
    for (int k = 1; k <= 2; k++)
        if (dp_alloc_match(j, "node-a", "nvidia.com/gpu", "gpusched.io/", k, claimed, 1, &a, &e) ==
            0) {
            uint8_t *buf;
            size_t len;
            if (a.n != k)
                abort();
            if (dp_alloc_pack(&inv, &a, 1, &o, &buf, &len, &e) == 0)
                free(buf);
        }
    json_decref(j);
}

static void allocate(const uint8_t *d, size_t n)
{
    V1beta1__AllocateRequest *r = v1beta1__allocate_request__unpack(NULL, n, d);
    struct dp_alloc_opts o = {.annot_prefix = "gpusched.io/",
                              .lists = DP_LIST_ENVVAR | DP_LIST_MOUNTS | DP_LIST_CDI_ANNOTATIONS |
                                       DP_LIST_CDI_CRI};
    struct gs_err e = GS_ERR_INIT;

    if (!r)
        return;
    for (size_t i = 0; i < r->n_container_requests; i++) {
        struct dp_assign a;
        memset(&a, 0, sizeof a);
        int ok = r->container_requests[i]->n_devices_ids > 0;
        for (size_t k = 0; ok && k < r->container_requests[i]->n_devices_ids; k++) {
            const struct dp_device *dv = dp_devices_find(&res[0], r->container_requests[i]->devices_ids[k]);
            if (!dv)
                ok = 0;
            else if (a.n < DP_MAX_GPUS)
                snprintf(a.uuids[a.n++], sizeof a.uuids[0], "%s", inv.gpu[dv->gpu].uuid);
        }
        uint8_t *buf;
        size_t len;
        if (ok && dp_alloc_pack(&inv, &a, 1, &o, &buf, &len, &e) == 0) {
            V1beta1__AllocateResponse *out = v1beta1__allocate_response__unpack(NULL, len, buf);
            if (!out || out->n_container_responses != 1 ||
                out->container_responses[0]->n_cdi_devices != (size_t)a.n ||
                out->container_responses[0]->n_mounts != (size_t)a.n)
                abort();
            v1beta1__allocate_response__free_unpacked(out, NULL);
            free(buf);
        }
    }
    v1beta1__allocate_request__free_unpacked(r, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dp_podres pr;
    struct gs_err e = GS_ERR_INIT;

    if (!inv.n)
        setup();
    if (size < 1)
        return 0;
    switch (data[0] % 4) {
    case 0: preferred(data + 1, size - 1); break;
    case 1:
        if (dp_podres_parse(data + 1, size - 1, "nvidia.com/gpu", &pr, &e) == 0)
            dp_podres_clear(&pr);
        break;
    case 2: pods(data + 1, size - 1); break;
    default: allocate(data + 1, size - 1); break;
    }
    return 0;
}
