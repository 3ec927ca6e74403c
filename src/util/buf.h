/*
 * util/buf.h - a growable byte buffer that stays NUL-terminated.
 *
 * Replies, metrics pages and API bodies are built or received piece by piece;
 * this is the one growable buffer they share. Appends never fail loudly: an
 * allocation failure sets `oom`, later appends do nothing, and the owner
 * checks `oom` once at the end. The struct is public so owners embed it
 * (zero-initialised = empty); `buf` belongs to the owner after use
 * (gs_buf_free, or take it and free() it). Reading a whole file, bounded,
 * is here too: every file the program reads goes through gs_buf_read_file.
 */
#ifndef GS_UTIL_BUF_H
#define GS_UTIL_BUF_H

#include <stddef.h>

struct gs_buf {
    char *buf; /* NULL until the first append; then always NUL-terminated */
    size_t len, cap;
    int oom;
};

/* Makes room for n more bytes and the NUL: 0, or -1 with oom set. */
int gs_buf_reserve(struct gs_buf *b, size_t n);
void gs_buf_put(struct gs_buf *b, const void *p, size_t n);
void gs_buf_str(struct gs_buf *b, const char *s);
void gs_buf_printf(struct gs_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string literal: quotes, backslashes and control characters escaped. */
void gs_buf_json_str(struct gs_buf *b, const char *s);
void gs_buf_free(struct gs_buf *b);

struct gs_err;
/* Appends the whole file at path; -GS_ETOOBIG when it holds more than max
 * bytes, -GS_EIO when it cannot be opened or read (the message names the
 * path), -GS_ENOMEM. On error b is left as it was. */
int gs_buf_read_file(struct gs_buf *b, const char *path, size_t max, struct gs_err *e);

#endif
