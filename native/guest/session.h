/*
 * Sessions: persistent shells (cwd, variables and functions carry from one
 * run to the next). A run writes the command to the shell's stdin wrapped
 * in `command eval '...'` and two printf lines that end its stdout and
 * stderr with markers holding a fresh random nonce and, on stdout, the
 * status; the agent cuts the output at the markers. session.c keeps the
 * shells and answers the session commands; session-run.c (session-run.h,
 * below this file) has a run's markers, answer and interrupts.
 */
#ifndef DSEC_GUEST_SESSION_H
#define DSEC_GUEST_SESSION_H

#include "pollset.h"
#include "session-run.h"

#define MAX_SESSIONS 64

struct session *session_find(const char *handle);
/* A handle in use by a process or a session. */
int handle_taken(const char *handle);
/* A hello: runs in flight are interrupted, their answers dropped. */
void session_end_host(void);
void session_add_pollfds(struct pollset *set, int *timeout_ms);
void session_service(const struct pollset *set);


#endif
