/*
 * The processes the agent starts (dsec-exec, guest-exec) and the reaping of
 * every other child it inherits as PID 1. One table of tracked children:
 * the reaper records a tracked child's exit status there instead of
 * throwing it away, so reaping orphans never steals an exit code.
 */
#ifndef DSEC_GUEST_PROCESS_H
#define DSEC_GUEST_PROCESS_H

#include <poll.h>
#include <stdint.h>
#include <sys/types.h>
#include "json.h"

#define MAX_CHILDREN 64
/* Per stream; the same bound the node agent puts on exec output (MAX_EXEC_OUTPUT_BYTES). */
#define MAX_OUTPUT_LIMIT (32u * 1024 * 1024)
/* What guest-exec captures per stream (qemu-ga's own limit is 16 MB). */
#define GUEST_EXEC_OUTPUT (16u * 1024 * 1024)

struct child {
  int used;
  pid_t pid;
  int in_fd, out_fd, err_fd; /* -1 when closed */
  unsigned char *input;
  size_t input_length, input_offset;
  struct buffer out, err;
  size_t max_output;
  int out_truncated, err_truncated;
  int exited;
  int status; /* waitpid's */
  int timed_out;
  int64_t started_ms, deadline_ms; /* deadline 0: none */
  int64_t duration_ms;
  int async; /* guest-exec: kept until guest-exec-status reports it */
};

struct spawn_request {
  const char *path;
  const char *const *args; /* argv[1..], NULL-terminated */
  const char *const *env;  /* "K=V" entries laid over the base environment, NULL-terminated */
  const char *cwd;         /* NULL: / */
  const char *user;        /* NULL: the agent's own */
  const unsigned char *input;
  size_t input_length;
  int capture; /* 0: stdout and stderr go to /dev/null */
  size_t max_output;
  int64_t timeout_ms; /* 0: none */
  int async;
};

int64_t now_ms(void);
/* Set up the SIGCHLD self-pipe. Returns its read end, to poll. */
int process_init(void);
/* Drain the self-pipe and reap every child that exited. Returns how many. */
int process_reap(void);

/* Start a process. Returns NULL with `error` filled when it could not start
   (bad user, cwd, path: found before exec through a close-on-exec pipe);
   *exec_errno is then execvp's errno when exec itself failed, else 0. */
struct child *process_spawn(const struct spawn_request *request, int *exec_errno, char *error, size_t error_size);
struct child *process_find(pid_t pid);
void process_release(struct child *child);
/* Exited and its output read. */
int process_done(const struct child *child);

/* Add the open pipes of every child to fds (from *count, at most max). */
void process_add_pollfds(struct pollfd *fds, int *count, int max);
/* Service the pipes poll() found ready, drain exited children, enforce deadlines. */
void process_service(const struct pollfd *fds, int count);
/* Milliseconds until the nearest deadline (or `fallback`). */
int process_poll_timeout(int fallback);

/* Kill every process the agent may: as PID 1 all of them, otherwise its
   descendants. Waits (up to a few seconds) until they are reaped. */
int process_kill_all(void);
/* Close every tracked child's pipes (after process_kill_all: their processes are gone). */
void process_close_pipes(void);

#endif
