/*
 * cmd/cmd.h - the subcommands of the one gpusched binary.
 *
 * Each cmd_<name> gets the arguments after its name (argv[0] is the
 * subcommand), parses its flags with util/opt, calls library code, and is
 * the only layer that prints errors and chooses the exit status:
 * 0 success, 1 runtime failure, 2 bad usage or bad input.
 * To add a subcommand: write src/cmd/<name>.c, declare it here, add a row to
 * the table in src/main.c.
 */
#ifndef GPUSCHED_CMD_H
#define GPUSCHED_CMD_H

#include "util/opt.h"

/* Parses a subcommand's flags (argv holds only what follows the names).
 * Returns -1 when the command goes on, with *npos positional arguments
 * first in argv; else the exit status to return at once: 0 after --help
 * (usage printed), 2 after a bad flag or more than max_pos positional
 * arguments (printed as "gpusched NAME: ..."). */
int cmd_flags(const char *name, int argc, char **argv, const struct opt *opts,
              const char *usage, int max_pos, int *npos);

/* SIGINT and SIGTERM call fn (which sets the command's stop flag); SIGPIPE
 * is ignored. */
void cmd_on_signals(void (*fn)(int));

int cmd_version(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_gen_trace(int argc, char **argv);
int cmd_webhook(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_extender(int argc, char **argv);
int cmd_device_plugin(int argc, char **argv);

#endif
