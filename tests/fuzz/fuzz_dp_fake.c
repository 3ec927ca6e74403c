/* tests/fuzz/fuzz_dp_fake.c - the fake-GPU file parser (dp_fake_parse) on
 * arbitrary bytes: it must return an error or a consistent inventory, and
 * never crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dp/devices.h"
#include "dp/gpu.h"
#include "dp/inventory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct dp_fake_state st;
    static struct dp_resource res[DP_MAX_RESOURCES];
    struct gs_err e = GS_ERR_INIT;
    struct dp_devices_cfg cfg = {"nvidia.com/", 2};

    if (dp_fake_parse((const char *)data, size, &st, &e) != 0) {
        if (!e.msg[0])
            abort(); /* every error says what is wrong */
        return 0;
    }
    if (st.inv.n < 0 || st.inv.n > DP_MAX_GPUS)
        abort();
    int n = dp_devices_build(&st.inv, &cfg, res, DP_MAX_RESOURCES);
    for (int r = 0; r < n; r++) {
        uint8_t *buf;
        size_t len;
        if (dp_devices_pack_list(&res[r], &st.inv, &buf, &len, &e) == 0)
            free(buf);
    }
    json_t *j = dp_inventory_json(&st.inv, "2026-11-22T15:20:01Z");
    json_decref(j);
    return 0;
}
