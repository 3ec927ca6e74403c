/*
 * main.c - command table and dispatch, nothing else (Git's git.c shape).
 */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"

struct cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct cmd cmds[] = {
    {"extender", cmd_extender, "kube-scheduler extender: filter, prioritize, bind, preempt"},
    {"device-plugin", cmd_device_plugin, "node agent: kubelet device plugin for NVIDIA GPUs"},
    {"webhook", cmd_webhook, "admission webhook: validate and normalise GPU pods, quotas"},
    {"status", cmd_status, "who holds which GPU: per node and GPU, per model, quotas"},
    {"simulate", cmd_simulate, "replay a cluster + workload trace, compare scheduling policies"},
    {"gen-trace", cmd_gen_trace, "generate a synthetic cluster and workload (openb CSV schema)"},
    {"version", cmd_version, "print the version"},
    {"help", cmd_help, "list the subcommands, or `help CMD` for one"},
    {NULL, NULL, NULL},
};

static void list_cmds(FILE *out)
{
    fprintf(out, "usage: gpusched <command> [options]\n\n"
                 "GPU scheduling for Kubernetes: scheduler extender, device plugin,\n"
                 "admission webhook and trace simulator in one binary.\n\ncommands:\n");
    for (const struct cmd *c = cmds; c->name; c++)
        fprintf(out, "  %-14s %s\n", c->name, c->summary);
    fprintf(out, "\nRun `gpusched <command> --help` for a command's options.\n");
}

static const struct cmd *lookup(const char *name)
{
    for (const struct cmd *c = cmds; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

int cmd_help(int argc, char **argv)
{
    if (argc > 1) {
        const struct cmd *c = lookup(argv[1]);
        if (!c || c->fn == cmd_help) {
            fprintf(stderr, "gpusched: unknown command '%s'\n", argv[1]);
            return 2;
        }
        char help[] = "--help";
        char *args[] = {argv[1], help, NULL};
        return c->fn(2, args);
    }
    list_cmds(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    /* Installed as kubectl-gpusched, the binary is a kubectl plugin:
     * `kubectl gpusched status ...`, and `kubectl gpusched` alone is status. */
    const char *base = strrchr(argv[0], '/');
    if (strcmp(base ? base + 1 : argv[0], "kubectl-gpusched") == 0 && argc < 2)
        return cmd_status(argc, argv);
    if (argc < 2) {
        list_cmds(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return cmd_help(1, argv + 1);
    if (strcmp(argv[1], "--version") == 0)
        return cmd_version(1, argv + 1);
    const struct cmd *c = lookup(argv[1]);
    if (!c) {
        fprintf(stderr, "gpusched: unknown command '%s' (see `gpusched help`)\n", argv[1]);
        return 2;
    }
    return c->fn(argc - 1, argv + 1);
}
