/* dp/inventory.c - see inventory.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/inventory.h"

/* A reason as JSON text can hold it: bytes outside printable ASCII become
 * '?' (a backend's message cut inside a UTF-8 character would make the
 * whole GPU's entry fail to pack). */
static const char *ascii(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; *in && n + 1 < cap; in++)
        out[n++] = *in >= 0x20 && *in < 0x7f ? *in : '?';
    out[n] = '\0';
    return out;
}

json_t *dp_inventory_json(const struct dp_inventory *inv, const char *now)
{
    char why[160];
    json_t *gpus = json_array();

    for (int i = 0; i < inv->n; i++) {
        const struct dp_gpu *g = &inv->gpu[i];
        json_t *links = json_array(), *mig = json_array();
        for (int j = 0; j < inv->n; j++) {
            if (j == i || g->link[j] == CORE_LINK_UNKNOWN)
                continue;
            json_t *l = json_pack("{s:i, s:s}", "gpu", inv->gpu[j].index, "type",
                                  core_link_name((enum core_link)g->link[j]));
            if (g->link[j] == CORE_LINK_NVLINK)
                json_object_set_new(l, "nvlinks", json_integer(g->nvlinks[j]));
            json_array_append_new(links, l);
        }
        for (int m = 0; m < g->n_mig; m++) {
            json_t *mj = json_pack("{s:s, s:s, s:I}", "uuid", g->mig[m].uuid, "profile",
                                   g->mig[m].profile, "memory_mib",
                                   (json_int_t)g->mig[m].memory_mib);
            if (mj && !g->mig[m].healthy) { /* only then: healthy ones read as before */
                json_object_set_new(mj, "healthy", json_false());
                json_object_set_new(mj, "reason",
                                    json_string(ascii(g->mig[m].reason, why, sizeof why)));
            }
            json_array_append_new(mig, mj);
        }
        json_array_append_new(
            gpus, json_pack("{s:i, s:s, s:s, s:I, s:i, s:s, s:b, s:s, s:o, s:b, s:o}", "index",
                            g->index, "uuid", g->uuid, "model", g->model, "memory_mib",
                            (json_int_t)g->memory_mib, "numa_node", g->numa_node, "pci_bus_id",
                            g->pci_bus_id, "healthy", g->healthy, "reason",
                            ascii(g->reason, why, sizeof why), "links",
                            links, "mig_enabled", g->mig_enabled, "mig", mig));
    }
    return json_pack("{s:i, s:s, s:o}", "version", 1, "updated_at", now, "gpus", gpus);
}

static void label_value(const char *in, char *out, size_t cap)
{
    size_t n = 0;

    for (; *in && n + 1 < cap && n < 63; in++) {
        char c = *in;
        if (c == ' ')
            c = '-';
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_' || c == '.'))
            c = '_';
        out[n++] = c;
    }
    /* A label value must start and end with an alphanumeric character. */
    while (n && (out[n - 1] == '-' || out[n - 1] == '_' || out[n - 1] == '.'))
        n--;
    out[n] = '\0';
}

json_t *dp_inventory_labels(const struct dp_inventory *inv)
{
    char product[64], buf[32];
    json_t *l = json_object();

    if (inv->n == 0)
        return l;
    label_value(inv->gpu[0].model, product, sizeof product);
    if (product[0])
        json_object_set_new(l, "nvidia.com/gpu.product", json_string(product));
    snprintf(buf, sizeof buf, "%lld", (long long)inv->gpu[0].memory_mib);
    json_object_set_new(l, "nvidia.com/gpu.memory", json_string(buf));
    snprintf(buf, sizeof buf, "%d", inv->n);
    json_object_set_new(l, "nvidia.com/gpu.count", json_string(buf));
    return l;
}

json_t *dp_inventory_node_patch(const struct dp_inventory *inv, const char *annot_key,
                                const json_t *node_labels, const char *now)
{
    json_t *want = dp_inventory_labels(inv), *labels = json_object();
    const char *k;
    json_t *v;

    json_object_foreach(want, k, v) {
        if (!json_object_get(node_labels, k))
            json_object_set(labels, k, v);
    }
    json_decref(want);
    json_t *inv_json = dp_inventory_json(inv, now);
    char *s = json_dumps(inv_json, JSON_COMPACT);
    json_decref(inv_json);
    json_t *meta = json_pack("{s:{s:s}}", "annotations", annot_key, s ? s : "{}");
    free(s);
    if (json_object_size(labels))
        json_object_set_new(meta, "labels", labels);
    else
        json_decref(labels);
    return json_pack("{s:o}", "metadata", meta);
}
