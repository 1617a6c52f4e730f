/*
 * stop_signal.h - SIGINT and SIGTERM ask a training run to stop: the handler
 * only notes the signal; the run finishes the step it is in, writes a
 * checkpoint of it and exits with 128 + the signal's number (130, 143).
 * Data-parallel ranks agree on the step to stop after (the note travels
 * with the step's loss sum), and the supervisor passes a signal it gets on
 * to the ranks.
 *
 * A second signal ends a single-process run at once (the default action; the
 * last checkpoint on disk stays intact). A signal that was ignored when the
 * program started (a background job of a non-interactive shell ignores
 * SIGINT) stays ignored.
 */
#ifndef BFP8_TRAIN_STOP_SIGNAL_H
#define BFP8_TRAIN_STOP_SIGNAL_H

/* Install the handlers. second_signal_kills: a second signal takes its
 * default action (single process); otherwise every signal is only noted
 * (data-parallel supervisor and ranks: the supervisor decides). */
void stop_signal_install(int second_signal_kills);

/* Back to the default actions (the run's loop is over). */
void stop_signal_restore(void);

/* The first signal received since stop_signal_install, 0 if none. */
int stop_signal_received(void);

/* How many signals were received since stop_signal_install. */
int stop_signal_count(void);

/* "SIGINT", "SIGTERM", or "signal N". */
const char *stop_signal_name(int sig);

#endif /* BFP8_TRAIN_STOP_SIGNAL_H */
