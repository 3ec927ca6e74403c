/* dp/grpc.c - see grpc.h. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "dp/grpc.h"
#include "util/log.h"

/* ---- completion-queue tags ------------------------------------------------ */

enum tag_kind {
    TAG_NEW_CALL,
    TAG_UNKNOWN_CALL,
    TAG_UNARY_DONE,
    TAG_STREAM_SEND,
    TAG_STREAM_CLOSE,
    TAG_SHUTDOWN
};

struct tag {
    enum tag_kind kind;
    void *obj;
};

struct slot { /* one outstanding grpc_server_request_registered_call per method */
    struct dp_grpc_server *srv;
    const struct dp_grpc_method *m;
    void *handle;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    struct tag tag;
};

/* Calls to methods not in the table arrive here and get UNIMPLEMENTED
 * (grpc core would otherwise hold them until their deadline). */
struct unknown_slot {
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    struct tag tag;
};

struct unary_ctx {
    struct dp_grpc_server *srv;
    const struct dp_grpc_method *m;
    grpc_call *call;
    uint8_t *req;
    size_t req_len;
    int too_big;
    grpc_byte_buffer *send_buf;
    grpc_slice details;
    int cancelled;
    struct tag done;
};

struct stream_ctx {
    struct dp_grpc_server *srv;
    const struct dp_grpc_method *m;
    grpc_call *call;
    grpc_byte_buffer *send_buf;
    grpc_slice details;
    int sending, dirty, closed, close_done, sent_md, finishing;
    int cancelled;
    struct tag send_tag, close_tag;
    struct stream_ctx *next;
};

struct dp_grpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    void *ud;
    int n_methods;
    struct slot *slots;
    pthread_mutex_t mu;
    int active;         /* unary + stream contexts not yet freed */
    int shutdown_done;
    struct stream_ctx *streams;
    struct unknown_slot unknown;
    struct tag shutdown_tag;
};

void dp_grpc_fail(struct dp_grpc_reply *r, int status, const char *fmt, ...)
{
    va_list ap;

    r->status = status;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    free(r->buf);
    r->buf = NULL;
    r->len = 0;
}

void dp_grpc_init(void)
{
    grpc_init();
}

void dp_grpc_shutdown(void)
{
    grpc_shutdown();
}

/* What a call of ours may receive: PodResources lists every pod of the
 * node, more than a device plugin message. */
#define CLIENT_MAX_MSG (16 << 20)

/* Copies a received byte buffer into one malloc'd block; refuses more than
 * max (the channel's own limit stops larger ones earlier). */
static int read_payload(grpc_byte_buffer *bb, size_t max, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (!bb)
        return 0;
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb))
        return -1;
    grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    size_t n = GRPC_SLICE_LENGTH(all);
    int rc = 0;
    if (n > max) {
        rc = -1;
    } else if (n) {
        *out = malloc(n);
        if (!*out)
            rc = -1;
        else {
            memcpy(*out, GRPC_SLICE_START_PTR(all), n);
            *len = n;
        }
    }
    grpc_slice_unref(all);
    return rc;
}

static grpc_byte_buffer *make_buffer(const uint8_t *buf, size_t len)
{
    grpc_slice s = len ? grpc_slice_from_copied_buffer((const char *)buf, len) : grpc_empty_slice();
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* ---- server: unary calls -------------------------------------------------- */

static void request_call(struct slot *sl)
{
    grpc_metadata_array_init(&sl->md);
    sl->payload = NULL;
    sl->call = NULL;
    grpc_call_error ce = grpc_server_request_registered_call(
        sl->srv->server, sl->handle, &sl->call, &sl->deadline, &sl->md, &sl->payload,
        sl->srv->cq, sl->srv->cq, &sl->tag);
    if (ce != GRPC_CALL_OK)
        log_error("grpc", "cannot request calls for %s: error %d", sl->m->path, (int)ce);
}

static void request_unknown(struct dp_grpc_server *s)
{
    struct unknown_slot *u = &s->unknown;

    u->call = NULL;
    grpc_call_details_init(&u->details);
    grpc_metadata_array_init(&u->md);
    if (grpc_server_request_call(s->server, &u->call, &u->details, &u->md, s->cq, s->cq, &u->tag) !=
        GRPC_CALL_OK)
        log_error("grpc", "cannot request calls for unknown methods");
}

static void unknown_call(struct dp_grpc_server *s, int ok)
{
    struct unknown_slot *u = &s->unknown;

    if (ok) {
        char *m = grpc_slice_to_c_string(u->details.method);
        log_warn("grpc", "call to unknown method %.200s", m);
        gpr_free(m);
        grpc_call_cancel_with_status(u->call, GRPC_STATUS_UNIMPLEMENTED, "unknown method", NULL);
        grpc_call_unref(u->call);
    }
    grpc_call_details_destroy(&u->details);
    grpc_metadata_array_destroy(&u->md);
    if (ok)
        request_unknown(s);
}

static void unary_done(struct unary_ctx *u)
{
    struct dp_grpc_server *s = u->srv;

    grpc_call_unref(u->call);
    if (u->send_buf)
        grpc_byte_buffer_destroy(u->send_buf);
    grpc_slice_unref(u->details);
    free(u->req);
    free(u);
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_mutex_unlock(&s->mu);
}

static void *unary_thread(void *arg)
{
    struct unary_ctx *u = arg;
    struct dp_grpc_reply r = {DP_GRPC_OK, "", NULL, 0};

    if (u->too_big)
        dp_grpc_fail(&r, DP_GRPC_INVALID_ARGUMENT, "request message is unreadable or over %d bytes",
                     DP_GRPC_MAX_MSG);
    else
        u->m->unary(u->srv->ud, u->req, u->req_len, &r);

    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    int n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (r.status == DP_GRPC_OK) {
        u->send_buf = make_buffer(r.buf, r.len);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = u->send_buf;
    }
    u->details = grpc_slice_from_copied_string(r.status == DP_GRPC_OK ? "" : r.msg);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)r.status;
    ops[n++].data.send_status_from_server.status_details = &u->details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &u->cancelled;
    free(r.buf);

    grpc_call_error ce = grpc_call_start_batch(u->call, ops, (size_t)n, &u->done, NULL);
    if (ce != GRPC_CALL_OK) {
        /* Cannot happen with a well-formed batch; no tag will come. */
        log_error("grpc", "%s: start_batch failed: %d", u->m->path, (int)ce);
        unary_done(u);
    }
    return NULL;
}

static void start_unary(struct slot *sl)
{
    struct dp_grpc_server *s = sl->srv;
    struct unary_ctx *u = calloc(1, sizeof *u);

    if (!u) {
        grpc_call_cancel_with_status(sl->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory",
                                     NULL);
        grpc_call_unref(sl->call);
        return;
    }
    u->srv = s;
    u->m = sl->m;
    u->call = sl->call;
    u->done.kind = TAG_UNARY_DONE;
    u->done.obj = u;
    u->details = grpc_empty_slice();
    if (read_payload(sl->payload, DP_GRPC_MAX_MSG, &u->req, &u->req_len) != 0)
        u->too_big = 1;
    pthread_mutex_lock(&s->mu);
    s->active++;
    pthread_mutex_unlock(&s->mu);

    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, unary_thread, u) != 0)
        unary_thread(u); /* no thread to spare: answer inline */
    pthread_attr_destroy(&at);
}

/* ---- server: streams ------------------------------------------------------ */

/* Starts one send on a stream; caller holds s->mu and has checked !sending. */
static void stream_send_locked(struct stream_ctx *st)
{
    struct dp_grpc_reply r = {DP_GRPC_OK, "", NULL, 0};
    grpc_op ops[3];
    int n = 0;

    st->m->stream(st->srv->ud, &r);
    memset(ops, 0, sizeof ops);
    if (!st->sent_md) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        st->sent_md = 1;
    }
    if (r.status == DP_GRPC_OK) {
        st->send_buf = make_buffer(r.buf, r.len);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = st->send_buf;
    } else {
        st->details = grpc_slice_from_copied_string(r.msg);
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = (grpc_status_code)r.status;
        ops[n++].data.send_status_from_server.status_details = &st->details;
        st->finishing = 1;
    }
    free(r.buf);
    st->sending = 1;
    st->dirty = 0;
    if (grpc_call_start_batch(st->call, ops, (size_t)n, &st->send_tag, NULL) != GRPC_CALL_OK) {
        st->sending = 0;
        if (st->send_buf) {
            grpc_byte_buffer_destroy(st->send_buf);
            st->send_buf = NULL;
        }
        grpc_call_cancel(st->call, NULL);
    }
}

static void stream_free_locked(struct dp_grpc_server *s, struct stream_ctx *st)
{
    for (struct stream_ctx **p = &s->streams; *p; p = &(*p)->next)
        if (*p == st) {
            *p = st->next;
            break;
        }
    grpc_call_unref(st->call);
    grpc_slice_unref(st->details);
    free(st);
    s->active--;
}

static void start_stream(struct slot *sl)
{
    struct dp_grpc_server *s = sl->srv;
    struct stream_ctx *st = calloc(1, sizeof *st);

    if (!st) {
        grpc_call_cancel_with_status(sl->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory",
                                     NULL);
        grpc_call_unref(sl->call);
        return;
    }
    st->srv = s;
    st->m = sl->m;
    st->call = sl->call;
    st->details = grpc_empty_slice();
    st->send_tag.kind = TAG_STREAM_SEND;
    st->send_tag.obj = st;
    st->close_tag.kind = TAG_STREAM_CLOSE;
    st->close_tag.obj = st;

    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &st->cancelled;
    pthread_mutex_lock(&s->mu);
    s->active++;
    st->next = s->streams;
    s->streams = st;
    if (grpc_call_start_batch(st->call, &op, 1, &st->close_tag, NULL) != GRPC_CALL_OK) {
        stream_free_locked(s, st);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    stream_send_locked(st);
    pthread_mutex_unlock(&s->mu);
    log_debug("grpc", "%s: stream opened", sl->m->path);
}

static void stream_sent(struct stream_ctx *st, int ok)
{
    struct dp_grpc_server *s = st->srv;

    pthread_mutex_lock(&s->mu);
    st->sending = 0;
    if (st->send_buf) {
        grpc_byte_buffer_destroy(st->send_buf);
        st->send_buf = NULL;
    }
    if (!ok && !st->closed)
        grpc_call_cancel(st->call, NULL);
    if (st->close_done)
        stream_free_locked(s, st);
    else if (ok && st->dirty && !st->closed && !st->finishing)
        stream_send_locked(st);
    pthread_mutex_unlock(&s->mu);
}

static void stream_closed(struct stream_ctx *st)
{
    struct dp_grpc_server *s = st->srv;

    pthread_mutex_lock(&s->mu);
    log_debug("grpc", "%s: stream closed (cancelled=%d)", st->m->path, st->cancelled);
    st->closed = 1;
    st->close_done = 1;
    if (!st->sending)
        stream_free_locked(s, st);
    pthread_mutex_unlock(&s->mu);
}

void dp_grpc_server_notify(struct dp_grpc_server *s)
{
    pthread_mutex_lock(&s->mu);
    for (struct stream_ctx *st = s->streams; st; st = st->next) {
        if (st->closed || st->finishing)
            continue;
        if (st->sending)
            st->dirty = 1;
        else
            stream_send_locked(st);
    }
    pthread_mutex_unlock(&s->mu);
}

int dp_grpc_server_streams(struct dp_grpc_server *s)
{
    int n = 0;

    pthread_mutex_lock(&s->mu);
    for (struct stream_ctx *st = s->streams; st; st = st->next)
        n += !st->closed;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- server: the completion-queue thread ---------------------------------- */

static void *cq_thread(void *arg)
{
    struct dp_grpc_server *s = arg;

    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        struct tag *t = ev.tag;
        switch (t->kind) {
        case TAG_NEW_CALL: {
            struct slot *sl = t->obj;
            if (!ev.success) { /* server shutting down */
                grpc_metadata_array_destroy(&sl->md);
                if (sl->payload)
                    grpc_byte_buffer_destroy(sl->payload);
                break;
            }
            if (sl->m->stream)
                start_stream(sl);
            else
                start_unary(sl);
            grpc_metadata_array_destroy(&sl->md);
            if (sl->payload)
                grpc_byte_buffer_destroy(sl->payload);
            request_call(sl);
            break;
        }
        case TAG_UNKNOWN_CALL:
            unknown_call(s, ev.success);
            break;
        case TAG_UNARY_DONE:
            unary_done(t->obj);
            break;
        case TAG_STREAM_SEND:
            stream_sent(t->obj, ev.success);
            break;
        case TAG_STREAM_CLOSE:
            stream_closed(t->obj);
            break;
        case TAG_SHUTDOWN:
            pthread_mutex_lock(&s->mu);
            s->shutdown_done = 1;
            pthread_mutex_unlock(&s->mu);
            break;
        }
        pthread_mutex_lock(&s->mu);
        int done = s->shutdown_done && s->active == 0;
        pthread_mutex_unlock(&s->mu);
        if (done)
            grpc_completion_queue_shutdown(s->cq);
    }
    return NULL;
}

/* Why a socket cannot be made at sock_path, when its directory says it
 * (missing, not a directory, read-only), else "". */
static const char *dir_problem(const char *sock_path)
{
    static __thread char why[PATH_MAX + 64];
    char dir[PATH_MAX];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", sock_path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return "";
    *slash = '\0';
    if (stat(*dir ? dir : "/", &st) != 0)
        snprintf(why, sizeof why, ": directory '%s': %s", dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        snprintf(why, sizeof why, ": '%s' is not a directory", dir);
    else if (access(dir, W_OK | X_OK) != 0)
        snprintf(why, sizeof why, ": directory '%s' is not writable: %s", dir, strerror(errno));
    else
        return "";
    return why;
}

int dp_grpc_server_start(const char *sock_path, const struct dp_grpc_method *methods, void *ud,
                         struct dp_grpc_server **out, struct gs_err *e)
{
    struct stat st;
    char addr[4200];

    *out = NULL;
    if (strlen(sock_path) > 100) /* sockaddr_un.sun_path is 108 bytes */
        return gs_errf(e, GS_EINVAL, "socket path '%s' is too long for a unix socket", sock_path);
    if (lstat(sock_path, &st) == 0 && unlink(sock_path) != 0)
        return gs_errf(e, GS_EIO, "cannot remove old '%s': %s", sock_path, strerror(errno));
    snprintf(addr, sizeof addr, "unix:%s", sock_path);

    struct dp_grpc_server *s = calloc(1, sizeof *s);
    if (!s)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    s->ud = ud;
    pthread_mutex_init(&s->mu, NULL);
    while (methods[s->n_methods].path)
        s->n_methods++;
    s->slots = calloc((size_t)s->n_methods, sizeof *s->slots);
    if (!s->slots) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }

    grpc_arg args[2];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = DP_GRPC_MAX_MSG;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = DP_GRPC_MAX_MSG;
    grpc_channel_args cargs = {2, args};
    s->server = grpc_server_create(&cargs, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (int i = 0; i < s->n_methods; i++) {
        struct slot *sl = &s->slots[i];
        sl->srv = s;
        sl->m = &methods[i];
        sl->tag.kind = TAG_NEW_CALL;
        sl->tag.obj = sl;
        sl->handle = grpc_server_register_method(s->server, methods[i].path, NULL,
                                                 GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    }
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        grpc_server_destroy(s->server);
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(s->cq);
        free(s->slots);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return gs_errf(e, GS_EIO, "cannot listen on '%s'%s", sock_path, dir_problem(sock_path));
    }
    grpc_server_start(s->server);
    for (int i = 0; i < s->n_methods; i++)
        request_call(&s->slots[i]);
    s->unknown.tag.kind = TAG_UNKNOWN_CALL;
    s->unknown.tag.obj = s;
    request_unknown(s);
    s->shutdown_tag.kind = TAG_SHUTDOWN;
    s->shutdown_tag.obj = s;
    if (pthread_create(&s->thread, NULL, cq_thread, s) != 0) {
        /* Without the thread nothing drains the queue: shut down inline. */
        grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
        grpc_server_cancel_all_calls(s->server);
        s->shutdown_done = 1;
        grpc_completion_queue_shutdown(s->cq);
        cq_thread(s);
        grpc_server_destroy(s->server);
        grpc_completion_queue_destroy(s->cq);
        free(s->slots);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return gs_errf(e, GS_ENOMEM, "cannot start the gRPC thread");
    }
    *out = s;
    return 0;
}

void dp_grpc_server_stop(struct dp_grpc_server *s)
{
    if (!s)
        return;
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    grpc_server_cancel_all_calls(s->server);
    pthread_join(s->thread, NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    free(s->slots);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- client --------------------------------------------------------------- */

int dp_grpc_call(const char *sock_path, const char *method, const uint8_t *req, size_t req_len,
                 int timeout_ms, uint8_t **resp, size_t *resp_len, struct gs_err *e)
{
    char target[4200];
    int rc = 0;

    *resp = NULL;
    *resp_len = 0;
    snprintf(target, sizeof target, "unix:%s", sock_path);

    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_arg arg;
    arg.type = GRPC_ARG_INTEGER;
    arg.key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg.value.integer = CLIENT_MAX_MSG;
    grpc_channel_args cargs = {1, &arg};
    grpc_channel *ch = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                         gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    grpc_slice mslice = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, mslice, NULL,
                                               deadline, NULL);
    grpc_slice_unref(mslice);

    grpc_byte_buffer *send = make_buffer(req, req_len), *recv = NULL;
    grpc_metadata_array md_init, md_trail;
    grpc_metadata_array_init(&md_init);
    grpc_metadata_array_init(&md_trail);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_init;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_trail;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;

    int tag;
    if (grpc_call_start_batch(call, ops, 6, &tag, NULL) != GRPC_CALL_OK) {
        rc = gs_errf(e, GS_EPROTO, "%s: cannot start the call", method);
    } else {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
            rc = gs_errf(e, GS_EUNAVAIL, "%s on %s: call failed", method, sock_path);
        } else if (status != GRPC_STATUS_OK) {
            char *d = grpc_slice_to_c_string(details);
            rc = gs_errf(e,
                         status == GRPC_STATUS_UNAVAILABLE || status == GRPC_STATUS_DEADLINE_EXCEEDED
                             ? GS_EUNAVAIL
                             : GS_EPROTO,
                         "%s on %s: status %d: %s", method, sock_path, (int)status, d);
            gpr_free(d);
        } else if (read_payload(recv, CLIENT_MAX_MSG, resp, resp_len) != 0) {
            rc = gs_errf(e, GS_ETOOBIG, "%s: reply is unreadable or too large", method);
        }
    }
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_byte_buffer_destroy(send);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&md_init);
    grpc_metadata_array_destroy(&md_trail);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(ch);
    return rc;
}
