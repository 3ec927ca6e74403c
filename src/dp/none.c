/*
 * dp/none.c - the backend of a node where NVML cannot be used.
 *
 * No library, no driver, or no GPU: like NVIDIA's plugin the device plugin
 * then keeps running but advertises nothing (it still answers /healthz and
 * publishes an empty inventory), unless told to exit. This backend is that
 * empty node: no GPUs, no events.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp/gpu.h"

static int none_discover(struct dp_backend *b, struct dp_inventory *inv, struct gs_err *e)
{
    (void)b;
    (void)e;
    memset(inv, 0, sizeof *inv);
    return 0;
}

static int none_wait(struct dp_backend *b, int timeout_ms, struct dp_event *ev, struct gs_err *e)
{
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};

    (void)b;
    (void)ev;
    (void)e;
    nanosleep(&ts, NULL);
    return 0;
}

static int none_probe(struct dp_backend *b, const char *uuid, struct gs_err *e)
{
    (void)b;
    return gs_errf(e, GS_ENOENT, "%s: no GPUs on this node", uuid);
}

static void none_close(struct dp_backend *b)
{
    free(b);
}

int dp_backend_open_none(struct dp_backend **out, struct gs_err *e)
{
    struct dp_backend *b = calloc(1, sizeof *b);

    *out = NULL;
    if (!b)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    b->name = "none";
    b->discover = none_discover;
    b->wait_event = none_wait;
    b->probe = none_probe;
    b->close = none_close;
    *out = b;
    return 0;
}
