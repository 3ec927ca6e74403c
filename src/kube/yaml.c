/* kube/yaml.c - see yaml.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "kube/yaml.h"
#include "util/buf.h"

#define MAX_DEPTH 64

static json_t *plain_scalar(const char *s, size_t n)
{
    char *end;
    if (n == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
        strcmp(s, "NULL") == 0)
        return json_null();
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
        return json_true();
    if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
        return json_false();
    if ((s[0] >= '0' && s[0] <= '9') || ((s[0] == '-' || s[0] == '+') && n > 1)) {
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (!*end && !errno)
            return json_integer(v);
        double d = strtod(s, &end);
        if (!*end && !errno && strpbrk(s, "xXnN") == NULL)
            return json_real(d);
    }
    return json_stringn(s, n);
}

static int err_at(struct gs_err *e, const yaml_event_t *ev, const char *what)
{
    return gs_errf(e, GS_EINVAL, "line %lu column %lu: %s", (unsigned long)ev->start_mark.line + 1,
                   (unsigned long)ev->start_mark.column + 1, what);
}

/* Parses one node whose first event is *ev (already taken). */
static int parse_node(yaml_parser_t *p, yaml_event_t *ev, int depth, json_t **out,
                      struct gs_err *e)
{
    if (depth > MAX_DEPTH)
        return err_at(e, ev, "nested too deeply");
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        return err_at(e, ev, "anchors and aliases are not supported");
    case YAML_SCALAR_EVENT: {
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        if (ev->data.scalar.anchor)
            return err_at(e, ev, "anchors and aliases are not supported");
        *out = ev->data.scalar.plain_implicit && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE
                   ? plain_scalar(v, n)
                   : json_stringn(v, n);
        return *out ? 0 : err_at(e, ev, "invalid UTF-8 or out of memory");
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int is_map = ev->type == YAML_MAPPING_START_EVENT;
        json_t *c = is_map ? json_object() : json_array();
        if ((is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor)) {
            json_decref(c);
            return err_at(e, ev, "anchors and aliases are not supported");
        }
        for (;;) {
            yaml_event_t k, v;
            json_t *child = NULL;
            int rc;
            if (!yaml_parser_parse(p, &k)) {
                json_decref(c);
                return gs_errf(e, GS_EINVAL, "line %lu: %s", (unsigned long)p->problem_mark.line + 1,
                               p->problem ? p->problem : "syntax error");
            }
            if (k.type == YAML_MAPPING_END_EVENT || k.type == YAML_SEQUENCE_END_EVENT) {
                yaml_event_delete(&k);
                break;
            }
            if (!is_map) {
                rc = parse_node(p, &k, depth + 1, &child, e);
                yaml_event_delete(&k);
                if (rc < 0 || json_array_append_new(c, child) < 0) {
                    json_decref(c);
                    return rc < 0 ? rc : gs_errf(e, GS_ENOMEM, "out of memory");
                }
                continue;
            }
            if (k.type != YAML_SCALAR_EVENT) {
                rc = err_at(e, &k, "mapping keys must be scalars");
                yaml_event_delete(&k);
                json_decref(c);
                return rc;
            }
            char *key = strndup((const char *)k.data.scalar.value, k.data.scalar.length);
            yaml_event_delete(&k);
            if (!key || !yaml_parser_parse(p, &v)) {
                free(key);
                json_decref(c);
                return gs_errf(e, GS_EINVAL, "line %lu: %s", (unsigned long)p->problem_mark.line + 1,
                               p->problem ? p->problem : "syntax error");
            }
            rc = parse_node(p, &v, depth + 1, &child, e);
            yaml_event_delete(&v);
            if (rc < 0) {
                free(key);
                json_decref(c);
                return rc;
            }
            json_object_set_new(c, key, child);
            free(key);
        }
        *out = c;
        return 0;
    }
    default:
        return err_at(e, ev, "unexpected YAML event");
    }
}

int kube_yaml_parse(const char *text, size_t len, json_t **out, struct gs_err *e)
{
    yaml_parser_t p;
    yaml_event_t ev;
    int rc = 0;

    *out = NULL;
    if (len > KUBE_YAML_MAX)
        return gs_errf(e, GS_ETOOBIG, "YAML larger than %u bytes", KUBE_YAML_MAX);
    if (!yaml_parser_initialize(&p))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    for (;;) {
        if (!yaml_parser_parse(&p, &ev)) {
            rc = gs_errf(e, GS_EINVAL, "line %lu column %lu: %s",
                         (unsigned long)p.problem_mark.line + 1,
                         (unsigned long)p.problem_mark.column + 1,
                         p.problem ? p.problem : "syntax error");
            break;
        }
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            *out = json_object(); /* an empty file is an empty mapping */
            break;
        }
        if (ev.type == YAML_STREAM_START_EVENT || ev.type == YAML_DOCUMENT_START_EVENT) {
            yaml_event_delete(&ev);
            continue;
        }
        rc = parse_node(&p, &ev, 0, out, e);
        yaml_event_delete(&ev);
        break;
    }
    yaml_parser_delete(&p);
    return rc;
}

int kube_yaml_load(const char *path, json_t **out, struct gs_err *e)
{
    struct gs_buf b = {0};
    int rc;

    *out = NULL;
    if ((rc = gs_buf_read_file(&b, path, KUBE_YAML_MAX, e)) < 0)
        return rc;
    rc = kube_yaml_parse(b.buf, b.len, out, e);
    gs_buf_free(&b);
    if (rc < 0)
        gs_err_prefix(e, "%s", path);
    return rc;
}
