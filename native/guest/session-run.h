/*
 * One run in a session (session.h): the state a session keeps of its shell
 * and of the run in flight, and what session.c calls as the shell's output
 * comes and its timers fire. Knows nothing of how sessions are found or
 * kept, so it sits below session.c.
 */
#ifndef DSEC_GUEST_SESSION_RUN_H
#define DSEC_GUEST_SESSION_RUN_H

#include <stddef.h>
#include <stdint.h>
#include "async.h"
#include "json.h"
#include "process.h"

#define MAX_COMMAND (1024u * 1024)
#define NONCE_LENGTH 16
/* "\n\036" nonce " " status(at most 3 digits) "\036\n" */
#define MARKER_MAX (2 + NONCE_LENGTH + 1 + 3 + 2)
/* The interrupt's steps: SIGINT to the run's processes, SIGKILL 2 s later, the shell itself 2 s after that. */
#define INTERRUPT_STEP_MS 2000

struct run_stream {
  char hold[MARKER_MAX]; /* a tail that may be the start of the marker */
  size_t hold_length;
  int marker_seen;
  size_t counted;
  int truncated;
  struct buffer kept;
};

struct session {
  char handle[MAX_HANDLE + 1];
  unsigned long serial;
  struct child *child; /* the shell */
  char shell[256];
  int ended; /* the shell is gone (its pipes read) */
  /* the run in flight */
  int busy;
  struct json *id;
  unsigned generation;
  char nonce[NONCE_LENGTH + 1];
  int stream;
  size_t max_output;
  struct run_stream out[2];
  int status;
  int64_t started_ms, deadline_ms;
  unsigned long long start_ticks;
  int interrupted, timed_out;
  int stage; /* 0; 1 SIGINT sent; 2 SIGKILL sent; 3 the shell killed */
  int64_t stage_ms;
};

/* Output of the shell while a run is in flight (stream 0 stdout, 1 stderr). */
void run_output(struct session *s, int stream, const char *data, size_t length);
/* Both markers seen, or the shell ended: answer and clear the run. */
void run_finish(struct session *s);
/* Start the interrupt (dsec-session-interrupt, a timeout, a hello). */
void run_interrupt(struct session *s, int timed_out);
/* The interrupt's later steps and the run's deadline; lowers *timeout_ms to the next. */
void run_timers(struct session *s, int64_t now, int *timeout_ms);
/* 16 random hex characters for a run's markers. */
void run_make_nonce(char *out);

#endif
