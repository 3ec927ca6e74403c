/* util/log.c - see log.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

static enum log_level g_level = LOG_INFO;
static enum log_format g_format = LOG_FORMAT_TEXT;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level) { g_level = level; }
void log_set_format(enum log_format fmt) { g_format = fmt; }

int log_parse_level(const char *s, enum log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    return -1;
}

int log_parse_format(const char *s, enum log_format *out)
{
    if (strcmp(s, "text") == 0) *out = LOG_FORMAT_TEXT;
    else if (strcmp(s, "json") == 0) *out = LOG_FORMAT_JSON;
    else return -1;
    return 0;
}

/* Appends s to buf as the inside of a JSON string. */
static size_t json_escape(char *buf, size_t cap, size_t n, const char *s)
{
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
        } else {
            buf[n++] = (char)c;
        }
    }
    return n;
}

void log_msg(enum log_level level, const char *component, const char *fmt, ...)
{
    char msg[2048], line[4608], ts[32];
    struct timespec now;
    struct tm tm;
    va_list ap;
    size_t n;

    if (level < g_level)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);

    if (g_format == LOG_FORMAT_JSON) {
        n = (size_t)snprintf(line, sizeof line,
                             "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"component\":\"",
                             ts, now.tv_nsec / 1000000, level_names[level]);
        n = json_escape(line, sizeof line, n, component);
        n += (size_t)snprintf(line + n, sizeof line - n, "\",\"msg\":\"");
        n = json_escape(line, sizeof line, n, msg);
        n += (size_t)snprintf(line + n, sizeof line - n, "\"}\n");
    } else {
        n = (size_t)snprintf(line, sizeof line, "%s.%03ldZ %-5s %s: %s\n", ts,
                             now.tv_nsec / 1000000, level_names[level], component, msg);
    }
    if (n >= sizeof line)
        n = sizeof line - 1;
    if (write(STDERR_FILENO, line, n) < 0) {
        /* nowhere left to report a failed log write */
    }
}
