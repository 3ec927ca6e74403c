/*
 * util/opt.h - command-line flags from a table, the same for every subcommand.
 *
 * Each cmd_* declares `static const struct opt opts[] = { OPT_STR("nodes",
 * &nodes, "FILE", "node list (CSV or JSON)"), ..., OPT_END() };` and calls
 * opt_parse(). Flags are `--name VALUE` or `--name=VALUE` (a one-letter name is
 * spelt `-x VALUE`); booleans take no value. `--help`/`-h` makes opt_parse return OPT_HELP; the caller prints
 * opt_usage() and exits 0. Positional arguments are moved to the front of
 * argv and counted in *npos. Errors name the flag.
 */
#ifndef GPUSCHED_OPT_H
#define GPUSCHED_OPT_H

#include <stdio.h>

#include "util/err.h"

enum opt_type { OPT_T_END, OPT_T_STR, OPT_T_INT, OPT_T_DBL, OPT_T_BOOL };

struct opt {
    enum opt_type type;
    const char *name;  /* long name without dashes */
    void *dst;         /* const char **, long *, double *, int * */
    const char *arg;   /* placeholder shown in usage ("FILE"), NULL for bools */
    const char *help;
    long min, max;     /* bounds for OPT_T_INT (min > max: unbounded) */
};

#define OPT_STR(n, d, a, h) {OPT_T_STR, n, d, a, h, 1, 0}
#define OPT_INT(n, d, a, h, lo, hi) {OPT_T_INT, n, d, a, h, lo, hi}
#define OPT_DBL(n, d, a, h) {OPT_T_DBL, n, d, a, h, 1, 0}
#define OPT_BOOL(n, d, h) {OPT_T_BOOL, n, d, NULL, h, 1, 0}
#define OPT_END() {OPT_T_END, NULL, NULL, NULL, NULL, 0, 0}

#define OPT_HELP 1

/* Returns 0, OPT_HELP, or a negative GS_E* code with *e naming the flag. */
int opt_parse(int argc, char **argv, const struct opt *opts, int *npos, struct gs_err *e);

/* Prints "usage: <usage>\n\n" then one line per flag. */
void opt_usage(FILE *out, const char *usage, const struct opt *opts);

#endif
