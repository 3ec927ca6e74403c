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

int cmd_version(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_gen_trace(int argc, char **argv);
int cmd_webhook(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_extender(int argc, char **argv);
int cmd_device_plugin(int argc, char **argv);

#endif
