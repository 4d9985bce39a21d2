/*
 * The signals of a daemon (timelined, tl-msc4140, tl-chronos): the main
 * thread waits for them, every other thread has them blocked.
 */
#ifndef TLI_SIGNALS_H
#define TLI_SIGNALS_H

#include <signal.h>
#include <stdbool.h>

/* A daemon's signals: block SIGTERM and SIGINT (and SIGHUP with hup) in
 * the calling thread before it starts any other, so every thread inherits
 * the mask and only tli_signal_wait receives them; ignore SIGPIPE. */
void tli_signals_block(sigset_t *sigs, bool hup);
/* Wait for the next of the blocked signals and return it (SIGTERM when
 * waiting fails). */
int tli_signal_wait(const sigset_t *sigs);

#endif
