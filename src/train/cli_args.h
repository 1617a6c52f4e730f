/*
 * cli_args.h - long options for the blockfp8 subcommands: "--name value" or
 * "--name=value", strict number parsing, one-line errors, generated --help.
 */
#ifndef BFP8_TRAIN_CLI_ARGS_H
#define BFP8_TRAIN_CLI_ARGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum cli_arg_kind {
    CLI_FLAG,            /* no value: sets *(int *)target = 1 */
    CLI_INT,             /* int64_t */
    CLI_FLOAT,           /* float, finite */
    CLI_STRING,          /* const char * */
    CLI_OPTIONAL_STRING  /* "--name" alone (or before another option) sets "";
                            "--name value" and "--name=value" set value */
} cli_arg_kind;

typedef struct cli_option {
    const char *name; /* without the dashes */
    cli_arg_kind kind;
    void *target;
    const char *metavar;
    const char *help;
    int seen; /* set by cli_parse */
} cli_option;

/* Parse argv[first..argc). Positional arguments are collected into
 * positional (capacity max_positional). Returns 0 on success, 1 after
 * printing a one-line error to stderr, 2 when --help was asked for. */
int cli_parse(const char *command, cli_option *options, int num_options, int argc, char **argv,
              int first, const char **positional, int max_positional, int *num_positional);

void cli_print_help(FILE *out, const char *usage, const char *description,
                    const cli_option *options, int num_options);

/* The option called name, or NULL. */
const cli_option *cli_find(const cli_option *options, int num_options, const char *name);

#endif /* BFP8_TRAIN_CLI_ARGS_H */
