/*
 * dp/grpc.h - the small gRPC layer the device plugin needs, on grpc core.
 *
 * Kubelet talks gRPC over unix sockets in both directions: it calls the
 * plugin's DevicePlugin service, and the plugin calls kubelet's Registration
 * and PodResourcesLister services. The grpc C core library is a completion-
 * queue API with no generated service code, so this module wraps it once:
 *
 *   - a server on one unix socket with a table of methods. Unary handlers
 *     get the request bytes and fill a reply (bytes or a gRPC status). Each
 *     unary call runs on its own short-lived thread, so a slow Allocate (it
 *     may ask the API server) never holds up another pod's Allocate nor the
 *     streams. Server-streaming methods (ListAndWatch) stay open: the stream
 *     callback builds the current message, sent when the stream opens and
 *     again on every dp_grpc_server_notify(); at most one message per stream
 *     is in flight and a change seen meanwhile is sent when it completes, so
 *     the latest state always reaches kubelet.
 *   - a blocking unary client call with a deadline (Register, List).
 *
 * The payload format is the caller's business (protobuf-c messages). The
 * server bounds received messages at DP_GRPC_MAX_MSG.
 *
 * Ownership: dp_grpc_server_start() returns a server that serves on its own
 * thread until dp_grpc_server_stop(), which cancels open calls, waits for
 * running handlers and frees everything. Reply buffers are malloc'd by the
 * handler and freed here. dp_grpc_init()/dp_grpc_shutdown() bracket all use
 * (grpc_init is reference-counted).
 */
#ifndef GPUSCHED_DP_GRPC_H
#define GPUSCHED_DP_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define DP_GRPC_MAX_MSG (4 << 20) /* kubelet's receive limit, and ours */

/* gRPC status codes used here (grpc/status.h has them all). */
enum {
    DP_GRPC_OK = 0,
    DP_GRPC_UNKNOWN = 2,
    DP_GRPC_INVALID_ARGUMENT = 3,
    DP_GRPC_DEADLINE_EXCEEDED = 4,
    DP_GRPC_NOT_FOUND = 5,
    DP_GRPC_FAILED_PRECONDITION = 9,
    DP_GRPC_UNIMPLEMENTED = 12,
    DP_GRPC_INTERNAL = 13,
    DP_GRPC_UNAVAILABLE = 14,
};

struct dp_grpc_reply {
    int status;     /* DP_GRPC_OK, or an error code with msg */
    char msg[512];  /* error detail sent as grpc-message */
    uint8_t *buf;   /* malloc'd message bytes (status OK); may be NULL if len 0 */
    size_t len;
};

/* Fills an error reply; returns nothing so handlers can `return dp_grpc_fail(...)`. */
void dp_grpc_fail(struct dp_grpc_reply *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef void (*dp_grpc_unary_fn)(void *ud, const uint8_t *req, size_t len,
                                 struct dp_grpc_reply *out);
/* Builds the current message of a stream; a non-OK status ends the stream. */
typedef void (*dp_grpc_stream_fn)(void *ud, struct dp_grpc_reply *out);

struct dp_grpc_method {
    const char *path;          /* "/v1beta1.DevicePlugin/Allocate" */
    dp_grpc_unary_fn unary;    /* exactly one of unary / stream */
    dp_grpc_stream_fn stream;
};

struct dp_grpc_server;

void dp_grpc_init(void);
void dp_grpc_shutdown(void);

/* Serves `methods` (terminated by a row with path NULL; the array must
 * outlive the server) on unix socket `sock_path`, which is unlinked first
 * if it exists. */
int dp_grpc_server_start(const char *sock_path, const struct dp_grpc_method *methods, void *ud,
                         struct dp_grpc_server **out, struct gs_err *e);
/* Sends every open stream its current message again. Thread-safe. */
void dp_grpc_server_notify(struct dp_grpc_server *s);
/* Number of open streams (for tests and logs). */
int dp_grpc_server_streams(struct dp_grpc_server *s);
void dp_grpc_server_stop(struct dp_grpc_server *s);

/* One unary call to `method` on unix socket `sock_path`, waiting at most
 * timeout_ms. On success returns 0 with *resp (malloc'd, may be NULL when
 * empty) and *resp_len. A gRPC error status returns -GS_EUNAVAIL (transport
 * or UNAVAILABLE) or -GS_EPROTO with the status and message in *e. */
int dp_grpc_call(const char *sock_path, const char *method, const uint8_t *req, size_t req_len,
                 int timeout_ms, uint8_t **resp, size_t *resp_len, struct gs_err *e);

#endif
