/* util/err.c - see err.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/err.h"

int gs_errf(struct gs_err *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return -code;
}

void gs_err_prefix(struct gs_err *e, const char *fmt, ...)
{
    char pre[256], old[sizeof e->msg];
    va_list ap;

    if (!e)
        return;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    size_t n;

    memcpy(old, e->msg, sizeof old);
    n = strlen(pre);
    if (n > sizeof e->msg - 3)
        n = sizeof e->msg - 3;
    memcpy(e->msg, pre, n);
    e->msg[n++] = ':';
    e->msg[n++] = ' ';
    size_t rest = strnlen(old, sizeof old - 1);
    if (rest > sizeof e->msg - 1 - n)
        rest = sizeof e->msg - 1 - n;
    memcpy(e->msg + n, old, rest);
    e->msg[n + rest] = '\0';
}

const char *gs_err_name(int code)
{
    switch (code < 0 ? -code : code) {
    case GS_OK: return "OK";
#define XX(name, desc) case GS_E##name: return "E" #name;
    GS_ERR_MAP(XX)
#undef XX
    }
    return "EUNKNOWN";
}

const char *gs_strerror(int code)
{
    switch (code < 0 ? -code : code) {
    case GS_OK: return "success";
#define XX(name, desc) case GS_E##name: return desc;
    GS_ERR_MAP(XX)
#undef XX
    }
    return "unknown error";
}
