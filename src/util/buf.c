/*
 * util/buf.c - see buf.h.
 */
#include "util/buf.h"

#include <errno.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

int gs_buf_reserve(struct gs_buf *b, size_t n)
{
    if (b->oom)
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) {
            b->oom = 1;
            return -1;
        }
        b->buf = nb;
        b->cap = cap;
    }
    return 0;
}

void gs_buf_put(struct gs_buf *b, const void *p, size_t n)
{
    if (gs_buf_reserve(b, n) < 0)
        return;
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

void gs_buf_str(struct gs_buf *b, const char *s) { gs_buf_put(b, s, strlen(s)); }

void gs_buf_printf(struct gs_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || gs_buf_reserve(b, (size_t)n) < 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void gs_buf_json_str(struct gs_buf *b, const char *s)
{
    static const char special[] = "\"\\\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f"
                                  "\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f";
    gs_buf_put(b, "\"", 1);
    while (*s) {
        size_t n = strcspn(s, special);
        gs_buf_put(b, s, n);
        s += n;
        if (!*s)
            break;
        unsigned char c = (unsigned char)*s++;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            gs_buf_put(b, esc, 2);
        } else {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            gs_buf_put(b, esc, 6);
        }
    }
    gs_buf_put(b, "\"", 1);
}

void gs_buf_free(struct gs_buf *b)
{
    free(b->buf);
    *b = (struct gs_buf){0};
}

int gs_buf_read_file(struct gs_buf *b, const char *path, size_t max, struct gs_err *e)
{
    FILE *f = fopen(path, "rb");
    size_t start = b->len;
    int rc = 0;

    if (!f)
        return gs_errf(e, GS_EIO, "%s: %s", path, strerror(errno));
    for (;;) {
        size_t want = 65536;
        if (gs_buf_reserve(b, want) < 0) {
            rc = gs_errf(e, GS_ENOMEM, "%s: out of memory", path);
            break;
        }
        size_t got = fread(b->buf + b->len, 1, want, f);
        b->len += got;
        b->buf[b->len] = '\0';
        if (b->len - start > max) {
            rc = gs_errf(e, GS_ETOOBIG, "%s: larger than %zu bytes", path, max);
            break;
        }
        if (got < want) {
            if (ferror(f))
                rc = gs_errf(e, GS_EIO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (rc < 0 && b->buf) {
        b->oom = 0;
        b->len = start;
        b->buf[start] = '\0';
    }
    return rc;
}
