/*
 * commands.h - the subcommands of the `blockfp8` program. Each takes the
 * whole argv (argv[1] is the subcommand's name) and returns the exit code
 * (docs/TRAINING.md, "Exit codes"):
 *   0    success
 *   1    the work failed (files, data, numerics; one line on stderr)
 *   2    the command line is wrong (one line on stderr; nothing was
 *        written)
 *   130, 143  `train` stopped by SIGINT / SIGTERM after writing a checkpoint
 */
#ifndef BFP8_TRAIN_COMMANDS_H
#define BFP8_TRAIN_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_plot(int argc, char **argv);

#endif /* BFP8_TRAIN_COMMANDS_H */
