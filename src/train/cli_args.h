/*
 * cli_args.h - long options for the blockfp8 subcommands: "--name value" or
 * "--name=value", strict number parsing with a range per numeric option,
 * one-line errors, generated --help.
 */
#ifndef BFP8_TRAIN_CLI_ARGS_H
#define BFP8_TRAIN_CLI_ARGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum cli_arg_kind {
    CLI_FLAG,            /* no value: sets *(int *)target = 1 */
    CLI_INT,             /* int64_t, min <= value <= max */
    CLI_FLOAT,           /* float, finite, within [fmin, fmax] (ends excluded by `open`) */
    CLI_STRING,          /* const char * */
    CLI_OPTIONAL_STRING  /* "--name" alone (or before another option) sets "";
                            "--name value" and "--name=value" set value */
} cli_arg_kind;

/* CLI_FLOAT ranges: which ends are excluded. */
enum { CLI_CLOSED = 0, CLI_OPEN_MIN = 1, CLI_OPEN_MAX = 2, CLI_ANY_FINITE = 4 };

typedef struct cli_option {
    const char *name; /* without the dashes */
    cli_arg_kind kind;
    void *target;
    const char *metavar;
    const char *help;
    int seen;             /* set by cli_parse */
    int64_t min, max;     /* CLI_INT */
    double fmin, fmax;    /* CLI_FLOAT, with `open` */
    int open;
} cli_option;

/* Exit codes of the subcommands (commands.h). */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILURE = 1, CLI_EXIT_USAGE = 2 };

/* Parse argv[first..argc). Positional arguments are collected into
 * positional (capacity max_positional). Returns 0 on success, 1 after
 * printing a one-line error to stderr (an unknown option, a malformed or
 * out-of-range value, a missing value, a positional argument too many), 2
 * when --help was asked for. */
int cli_parse(const char *command, cli_option *options, int num_options, int argc, char **argv,
              int first, const char **positional, int max_positional, int *num_positional);

/* The help: a line per option, numeric ones with their range. */
void cli_print_help(FILE *out, const char *usage, const char *description,
                    const cli_option *options, int num_options);

/* The option called name, or NULL. */
const cli_option *cli_find(const cli_option *options, int num_options, const char *name);

/* The range of a numeric option as text, e.g. "between 1 and 1000" or "> 0 and <= 10". */
void cli_range_text(const cli_option *o, char *buf, size_t size);

#endif /* BFP8_TRAIN_CLI_ARGS_H */
