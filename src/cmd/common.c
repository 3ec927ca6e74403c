/*
 * cmd/common.c - what every subcommand does the same way: parse its flags
 * (printing usage or the error), and route SIGINT/SIGTERM to a stop flag.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "util/err.h"

int cmd_flags(const char *name, int argc, char **argv, const struct opt *opts,
              const char *usage, int max_pos, int *npos)
{
    struct gs_err e = GS_ERR_INIT;
    int rc = opt_parse(argc, argv, opts, npos, &e);
    if (rc == OPT_HELP) {
        opt_usage(stdout, usage, opts);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "gpusched %s: %s\n", name, e.msg);
        return 2;
    }
    if (*npos > max_pos) {
        fprintf(stderr, "gpusched %s: unexpected argument '%s' (see --help)\n", name,
                argv[max_pos]);
        return 2;
    }
    return -1;
}

void cmd_on_signals(void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
