/*
 * Pseudo-terminals for dsec-exec's `tty`: a new pair from the guest's
 * /dev/ptmx, the slave opened through the master (TIOCGPTPEER: no path to
 * race), both close-on-exec, the master non-blocking for the main loop.
 */
#ifndef DSEC_GUEST_PTY_H
#define DSEC_GUEST_PTY_H

#include <stddef.h>

/* Returns 0 with *master and *slave open, or -1 with `error` filled. */
int pty_open(int *master, int *slave, unsigned short rows, unsigned short cols, char *error, size_t error_size);
/* TIOCSWINSZ (the kernel sends SIGWINCH to the terminal's foreground group). */
int pty_resize(int master, unsigned short rows, unsigned short cols);
/* In the child: a new session with the slave as controlling terminal and as fds 0, 1, 2. */
int pty_child_setup(int slave);
/* The terminal's end-of-file character (^D unless the program changed it). */
unsigned char pty_eof_char(int master);

#endif
