/*
 * cli_args.c - the long-option parser.
 */
#include "train/cli_args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const cli_option *cli_find(const cli_option *options, int num_options, const char *name) {
    for (int i = 0; i < num_options; ++i)
        if (strcmp(options[i].name, name) == 0) return &options[i];
    return NULL;
}

void cli_range_text(const cli_option *o, char *buf, size_t size) {
    if (o->kind == CLI_INT) {
        snprintf(buf, size, "between %lld and %lld", (long long)o->min, (long long)o->max);
    } else if (o->kind == CLI_FLOAT && !(o->open & CLI_ANY_FINITE)) {
        if (!(o->open & (CLI_OPEN_MIN | CLI_OPEN_MAX)))
            snprintf(buf, size, "between %.10g and %.10g", o->fmin, o->fmax);
        else
            snprintf(buf, size, "%s %.10g and %s %.10g", o->open & CLI_OPEN_MIN ? ">" : ">=", o->fmin,
                     o->open & CLI_OPEN_MAX ? "<" : "<=", o->fmax);
    } else {
        snprintf(buf, size, "finite");
    }
}

static int float_in_range(const cli_option *o, double v) {
    if (o->open & CLI_ANY_FINITE) return 1;
    const int above = o->open & CLI_OPEN_MIN ? v > o->fmin : v >= o->fmin;
    const int below = o->open & CLI_OPEN_MAX ? v < o->fmax : v <= o->fmax;
    return above && below;
}

static int out_of_range(const char *command, const cli_option *o, const char *value) {
    char range[96];
    cli_range_text(o, range, sizeof range);
    fprintf(stderr, "blockfp8 %s: --%s must be %s (got %s)\n", command, o->name, range, value);
    return 1;
}

static int set_value(const char *command, cli_option *o, const char *value) {
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_INT: {
        const long long v = strtoll(value, &end, 10);
        if (*value == 0 || *end != 0 || errno) {
            fprintf(stderr, "blockfp8 %s: --%s expects an integer, got '%s'\n", command, o->name, value);
            return 1;
        }
        if (v < o->min || v > o->max) {
            char shown[32];
            snprintf(shown, sizeof shown, "%lld", v);
            return out_of_range(command, o, shown);
        }
        *(int64_t *)o->target = v;
        return 0;
    }
    case CLI_FLOAT: {
        const double v = strtod(value, &end);
        if (*value == 0 || *end != 0 || errno || !isfinite(v) || !isfinite((float)v)) {
            fprintf(stderr, "blockfp8 %s: --%s expects a finite number, got '%s'\n", command, o->name,
                    value);
            return 1;
        }
        if (!float_in_range(o, v)) {
            char shown[32];
            snprintf(shown, sizeof shown, "%.10g", v);
            return out_of_range(command, o, shown);
        }
        *(float *)o->target = (float)v;
        return 0;
    }
    case CLI_STRING:
    case CLI_OPTIONAL_STRING:
        *(const char **)o->target = value;
        return 0;
    case CLI_FLAG:
        break;
    }
    return 1;
}

int cli_parse(const char *command, cli_option *options, int num_options, int argc, char **argv,
              int first, const char **positional, int max_positional, int *num_positional) {
    *num_positional = 0;
    for (int i = first; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return 2;
        if (strncmp(arg, "--", 2) != 0 || arg[2] == 0) {
            if (arg[0] == '-' && arg[1] != 0) {
                fprintf(stderr, "blockfp8 %s: unknown option '%s' (see blockfp8 %s --help)\n",
                        command, arg, command);
                return 1;
            }
            if (*num_positional >= max_positional) {
                fprintf(stderr, "blockfp8 %s: unexpected argument '%s' (see blockfp8 %s --help)\n",
                        command, arg, command);
                return 1;
            }
            positional[(*num_positional)++] = arg;
            continue;
        }
        char name[64];
        const char *eq = strchr(arg + 2, '=');
        const size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), arg + 2);
        cli_option *o = (cli_option *)cli_find(options, num_options, name);
        if (!o) {
            fprintf(stderr, "blockfp8 %s: unknown option '--%s' (see blockfp8 %s --help)\n", command,
                    name, command);
            return 1;
        }
        o->seen = 1;
        if (o->kind == CLI_FLAG) {
            if (eq) {
                fprintf(stderr, "blockfp8 %s: --%s takes no value\n", command, name);
                return 1;
            }
            *(int *)o->target = 1;
            continue;
        }
        if (o->kind == CLI_OPTIONAL_STRING && !eq && (i + 1 >= argc || argv[i + 1][0] == '-')) {
            *(const char **)o->target = ""; /* no value follows */
            continue;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "blockfp8 %s: --%s needs a value (%s)\n", command, name,
                        o->metavar ? o->metavar : "VALUE");
                return 1;
            }
            value = argv[++i];
        }
        if (set_value(command, o, value)) return 1;
    }
    return 0;
}

void cli_print_help(FILE *out, const char *usage, const char *description,
                    const cli_option *options, int num_options) {
    fprintf(out, "usage: %s\n\n%s\n\noptions:\n", usage, description);
    for (int i = 0; i < num_options; ++i) {
        const cli_option *o = &options[i];
        char left[64], range[96] = "";
        if (o->kind == CLI_FLAG)
            snprintf(left, sizeof left, "--%s", o->name);
        else if (o->kind == CLI_OPTIONAL_STRING)
            snprintf(left, sizeof left, "--%s [%s]", o->name, o->metavar ? o->metavar : "VALUE");
        else
            snprintf(left, sizeof left, "--%s %s", o->name, o->metavar ? o->metavar : "VALUE");
        if (o->kind == CLI_INT || (o->kind == CLI_FLOAT && !(o->open & CLI_ANY_FINITE))) {
            range[0] = ' ', range[1] = '[';
            cli_range_text(o, range + 2, sizeof range - 3);
            strcat(range, "]");
        }
        fprintf(out, "  %-26s %s%s\n", left, o->help, range);
    }
    fprintf(out, "  %-26s %s\n", "-h, --help", "show this help");
}
