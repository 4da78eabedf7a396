/* cli/command.h: how a subcommand declares itself.
 *
 * Each cli/cmd_*.c declares its command with one line at column 0, then
 * defines the function that line names:
 *
 *   KVCAL_COMMAND(validate_scales, "validate-scales", "check a scales file");
 *
 *   int kvcal_cmd_validate_scales(int argc, char **argv) { ... }
 *
 * The Makefile greps those lines into the command table of cli/main.c, so
 * adding a command touches no other file. argv[0] is the command name.
 * Return 0 ok, 1 invalid input / failed check, 2 usage or I/O error. */
#ifndef KVCAL_CLI_COMMAND_H
#define KVCAL_CLI_COMMAND_H

#define KVCAL_COMMAND(id, name, summary) int kvcal_cmd_##id(int argc, char **argv)

enum { KVCAL_EXIT_OK = 0, KVCAL_EXIT_INVALID = 1, KVCAL_EXIT_USAGE = 2 };

#endif
