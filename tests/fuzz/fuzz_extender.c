/* tests/fuzz/fuzz_extender.c - the extender's request parsers (ExtenderArgs,
 * ExtenderBindingArgs, ExtenderPreemptionArgs), the node inventory
 * annotation and the watch event decoder on arbitrary bytes. The first byte
 * picks the parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ext/nodes.h"
#include "ext/proto.h"
#include "kube/watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_err e = GS_ERR_INIT;
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    switch (data[0] % 5) {
    case 0: {
        struct ext_args a;
        if (ext_args_parse(body, len, &a, &e) == 0) {
            for (int i = 0; i < a.n; i++)
                if (!a.names[i] || !*a.names[i])
                    abort();
            ext_args_clear(&a);
        }
        break;
    }
    case 1: {
        struct ext_bind b;
        if (ext_bind_parse(body, len, &b, &e) == 0)
            ext_bind_clear(&b);
        break;
    }
    case 2: {
        struct ext_preempt p;
        if (ext_preempt_parse(body, len, &p, &e) == 0)
            ext_preempt_clear(&p);
        break;
    }
    case 3: {
        char *s = malloc(len + 1);
        struct core_node_spec spec;
        double t;
        if (!s)
            return 0;
        memcpy(s, body, len);
        s[len] = '\0';
        memset(&spec, 0, sizeof spec);
        if (ext_inventory_parse(s, &spec, &t, &e) == 0 && spec.n_gpus > CORE_MAX_GPUS)
            abort();
        free(s);
        break;
    }
    default: {
        enum kube_event_type t;
        json_t *obj;
        if (kube_watch_decode(body, len, &t, &obj, &e) == 0)
            json_decref(obj);
        break;
    }
    }
    return 0;
}
