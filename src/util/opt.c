/* util/opt.c - see opt.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/opt.h"

static const struct opt *find(const struct opt *opts, const char *name, size_t len)
{
    for (; opts->type != OPT_T_END; opts++)
        if (strlen(opts->name) == len && strncmp(opts->name, name, len) == 0)
            return opts;
    return NULL;
}

static int set_value(const struct opt *o, const char *v, struct gs_err *e)
{
    char *end;

    switch (o->type) {
    case OPT_T_STR:
        *(const char **)o->dst = v;
        return 0;
    case OPT_T_INT: {
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end)
            return gs_errf(e, GS_EINVAL, "--%s: '%s' is not an integer", o->name, v);
        if (o->min <= o->max && (x < o->min || x > o->max))
            return gs_errf(e, GS_EINVAL, "--%s: %ld is out of range %ld..%ld", o->name, x,
                           o->min, o->max);
        *(long *)o->dst = x;
        return 0;
    }
    case OPT_T_DBL: {
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x)) /* nan meant "unset" downstream */
            return gs_errf(e, GS_EINVAL, "--%s: '%s' is not a number", o->name, v);
        *(double *)o->dst = x;
        return 0;
    }
    default:
        return gs_errf(e, GS_EINVAL, "--%s takes no value", o->name);
    }
}

int opt_parse(int argc, char **argv, const struct opt *opts, int *npos, struct gs_err *e)
{
    int pos = 0;

    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return OPT_HELP;
        if (strcmp(a, "--") == 0) {
            while (++i < argc)
                argv[pos++] = argv[i];
            break;
        }
        /* a one-letter option is spelt -x (kubectl's -o), the others --name */
        int is_short = a[0] == '-' && a[1] && a[1] != '-' && a[2] == '\0';
        if (!is_short && (strncmp(a, "--", 2) != 0 || a[2] == '\0')) {
            argv[pos++] = a;
            continue;
        }
        const char *name = a + (is_short ? 1 : 2), *eq = is_short ? NULL : strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct opt *o = find(opts, name, len);
        if (!o)
            return gs_errf(e, GS_EINVAL, "unknown option '%s%.*s' (see --help)",
                           is_short ? "-" : "--", (int)len, name);
        if (o->type == OPT_T_BOOL) {
            if (eq)
                return gs_errf(e, GS_EINVAL, "--%s takes no value", o->name);
            *(int *)o->dst = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v)
            return gs_errf(e, GS_EINVAL, "--%s needs a value (%s)", o->name, o->arg ? o->arg : "VALUE");
        int rc = set_value(o, v, e);
        if (rc)
            return rc;
    }
    if (npos)
        *npos = pos;
    return 0;
}

void opt_usage(FILE *out, const char *usage, const struct opt *opts)
{
    fprintf(out, "usage: %s\n\n", usage);
    for (; opts->type != OPT_T_END; opts++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s", opts->name[1] ? "--" : "-", opts->name,
                 opts->arg ? " " : "",
                 opts->arg ? opts->arg : "");
        fprintf(out, "  %-28s %s\n", left, opts->help);
    }
    fprintf(out, "  %-28s %s\n", "-h, --help", "show this help");
}
