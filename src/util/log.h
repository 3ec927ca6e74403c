/*
 * util/log.h - one line per event, for the long-running servers.
 *
 * Human-readable by default ("2026-11-22T15:20:01Z info  extender: listening
 * on 127.0.0.1:8888"), JSON lines with log_set_format(LOG_FORMAT_JSON).
 * Thread-safe: each line is written with one write(2) to stderr.
 * Library modules may log events of long-running work (a watch restarted);
 * they still return errors rather than print them.
 */
#ifndef GPUSCHED_LOG_H
#define GPUSCHED_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

void log_set_level(enum log_level level);
void log_set_format(enum log_format fmt);
/* Parses "debug|info|warn|error" / "text|json"; returns 0 or -1. */
int log_parse_level(const char *s, enum log_level *out);
int log_parse_format(const char *s, enum log_format *out);

void log_msg(enum log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(c, ...) log_msg(LOG_DEBUG, c, __VA_ARGS__)
#define log_info(c, ...) log_msg(LOG_INFO, c, __VA_ARGS__)
#define log_warn(c, ...) log_msg(LOG_WARN, c, __VA_ARGS__)
#define log_error(c, ...) log_msg(LOG_ERROR, c, __VA_ARGS__)

#endif
