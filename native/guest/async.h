/*
 * Async mode's processes (dsec-exec after dsec-hello): each has a handle
 * the host chose, runs in the foreground (answered when it exited and its
 * output was read) or the background (answered at once, its record kept
 * until dsec-forget), with stdin, tty, stream, timeout and output caps as
 * docs/guest-agent.md describes. async.c keeps the records and services
 * their pipes; async-cmds.c has the commands; linger.c the pipes that
 * outlive their process.
 */
#ifndef DSEC_GUEST_ASYNC_H
#define DSEC_GUEST_ASYNC_H

#include <stddef.h>
#include <stdint.h>
#include "json.h"
#include "pollset.h"
#include "process.h"

#define MAX_LIVE_PROCESSES 1024
#define MAX_BACKGROUND 256
#define MAX_HANDLE 64
/* Raw bytes per dsec-output event. */
#define OUTPUT_CHUNK 65536
/* The most one dsec-input carries. */
#define MAX_INPUT_CHUNK (4u * 1024 * 1024)

struct waiter {
  struct json *id;
  unsigned generation;
  int64_t deadline_ms; /* 0: none */
};

struct aproc {
  char handle[MAX_HANDLE + 1];
  unsigned long serial; /* names its lingering pipes */
  struct child *child;
  int background, stream, tty;
  int keep;             /* keep output (background, or foreground without stream) */
  unsigned generation;  /* the hello it was started under */
  struct json *id;      /* foreground: the exec's request id */
  size_t counted[2];    /* stdout, stderr bytes kept or streamed, against max-output */
  int stdin_open;       /* stdin stays open for dsec-input until eof */
  struct json *input_id; /* the dsec-input in flight (answered once written) */
  unsigned input_generation;
  int input_eof;
  int finished;         /* exited, drained, answered or dsec-exit sent */
  int64_t created_ms;
  char *path, *args_json; /* for dsec-procs */
  struct waiter *waiters;
  int waiter_count;
};

/* Handles: [A-Za-z0-9_-]{1,64}, one namespace for processes and sessions. */
int handle_valid(const char *handle);
int handle_taken(const char *handle);
struct aproc *aproc_find(const char *handle);
/* A new record (started under the current generation); NULL when out of memory. */
struct aproc *aproc_add(const char *handle);
/* Drop a record: SIGKILL its group if it runs, close its pipes (lingering ones too). */
void aproc_drop(struct aproc *p);
int aproc_background_count(void);
/* The oldest finished background record, or NULL. */
struct aproc *aproc_oldest_finished(void);
/* Visit every record (for dsec-procs). */
int aproc_count(void);
struct aproc *aproc_at(int index);

/* dsec-exec's result value: {"pid",...,"duration-ms"}; out-data/err-data the kept output. */
void aproc_write_result(struct buffer *out, const struct aproc *p);
/* A finished or running process's output so far (dsec-output). */
void aproc_write_snapshot(struct buffer *out, const struct aproc *p);
/* Write a dsec-output event for handle (stream 0 stdout, 1 stderr). */
void output_event(const char *handle, int stream, const char *data, size_t length);
/* Add bytes to write to stdin after those still pending (dsec-input). Returns 0, -1 out of memory. */
int aproc_queue_input(struct aproc *p, const unsigned char *data, size_t length);
/* Write what stdin takes now; when all is written, answer the dsec-input in flight and apply eof. */
void aproc_write_stdin(struct aproc *p);
/* Finish a record whose process never ran (exec failed): exit code `code`, `message` as stderr. */
void aproc_finish_unexecuted(struct aproc *p, int code, const char *message);

/* The main loop's part. */
void async_add_pollfds(struct pollset *set, int *timeout_ms);
void async_service(const struct pollset *set);
/* A hello: the previous host's foreground processes killed and dropped,
   pending waits and inputs dropped, stream flags cleared. Returns how many were killed. */
int async_end_host(void);

/* Pipes that outlive their process (linger.c): read and dropped until the last
   writer closes them, so a background descendant never gets SIGPIPE or blocks. */
void linger_add(int out_fd, int err_fd, unsigned long owner);
void linger_close_owner(unsigned long owner);
void linger_add_pollfds(struct pollset *set);
void linger_service(const struct pollset *set);

#endif
