/*
 * commands.h - the subcommands of the `blockfp8` program. Each takes the
 * whole argv (argv[1] is the subcommand's name) and returns the exit code:
 * 0 success, 1 a failure (one line on stderr), 2 bad usage.
 */
#ifndef BFP8_TRAIN_COMMANDS_H
#define BFP8_TRAIN_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_plot(int argc, char **argv);

#endif /* BFP8_TRAIN_COMMANDS_H */
