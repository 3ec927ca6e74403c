/*
 * util/err.h - how library code reports failure.
 *
 * Library functions never print. They return 0 on success or a negative
 * GS_E* code, and fill a caller-owned struct gs_err whose message says what
 * failed and names the field or file involved, Git-style:
 *   "containers[0].limits[nvidia.com/gpu-cores]: '150' is out of range 1..100"
 * Only the cmd_* layer prints errors and picks the exit status.
 *
 * The code list is one X-macro, so names and descriptions never drift.
 */
#ifndef GPUSCHED_ERR_H
#define GPUSCHED_ERR_H

#include <stddef.h>

#define GS_ERR_MAP(XX)                                                         \
    XX(INVAL, "invalid argument or input")                                     \
    XX(NOENT, "not found")                                                     \
    XX(NOMEM, "out of memory")                                                 \
    XX(IO, "input/output error")                                               \
    XX(NOFIT, "does not fit")                                                  \
    XX(CONFLICT, "conflict")                                                   \
    XX(UNAVAIL, "unavailable")                                                 \
    XX(TOOBIG, "too large")                                                    \
    XX(PROTO, "protocol error")                                                \
    XX(PERM, "not permitted")

enum gs_errcode {
    GS_OK = 0,
#define XX(name, desc) GS_E##name,
    GS_ERR_MAP(XX)
#undef XX
};

struct gs_err {
    int code;        /* positive GS_E* value, 0 when no error */
    char msg[512];   /* human-readable, no trailing newline */
};

#define GS_ERR_INIT {0, {0}}

/* Fills *e (if non-NULL) with code and a printf-style message and returns
 * -code, so library code can write `return gs_errf(e, GS_EINVAL, ...)`. */
int gs_errf(struct gs_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to e->msg (e.g. a file name and line), keeping code. */
void gs_err_prefix(struct gs_err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Name ("EINVAL") and description of a code; accepts negative codes too. */
const char *gs_err_name(int code);
const char *gs_strerror(int code);

#endif
