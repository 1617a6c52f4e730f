/*
 * stop_signal.c - the SIGINT / SIGTERM notes of a training run.
 */
#define _POSIX_C_SOURCE 200809L
#include "train/stop_signal.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t first_signal, signal_count, repeat_kills;
static const int handled[] = {SIGINT, SIGTERM};
static int installed[2];

static void on_signal(int sig) {
    if (first_signal == 0) first_signal = sig;
    else if (repeat_kills) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    signal_count = signal_count + 1;
}

void stop_signal_install(int second_signal_kills) {
    first_signal = 0;
    signal_count = 0;
    repeat_kills = second_signal_kills;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* file and pipe I/O carry on; the run checks the note between steps */
    for (int i = 0; i < 2; ++i) {
        struct sigaction old;
        installed[i] = 0;
        if (sigaction(handled[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
        installed[i] = sigaction(handled[i], &sa, NULL) == 0;
    }
}

void stop_signal_restore(void) {
    for (int i = 0; i < 2; ++i)
        if (installed[i]) signal(handled[i], SIG_DFL);
    installed[0] = installed[1] = 0;
}

int stop_signal_received(void) { return first_signal; }

int stop_signal_count(void) { return signal_count; }

const char *stop_signal_name(int sig) {
    static char other[32];
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGTERM) return "SIGTERM";
    snprintf(other, sizeof other, "signal %d", sig);
    return other;
}
