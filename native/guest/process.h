/*
 * Child processes of the guest agent: spawning (user, cwd, environment, a
 * new process group or, for a terminal, a new session), reaping (the agent
 * may be PID 1 and a child subreaper, so it reaps every orphan), and for
 * the sync-mode commands (guest-exec, the blocking dsec-exec) the pipes and
 * deadlines too. Async processes and session shells are "managed": async.c
 * and session.c service their pipes and deadlines themselves; this file
 * only spawns and reaps them.
 */
#ifndef DSEC_GUEST_PROCESS_H
#define DSEC_GUEST_PROCESS_H

#include <stdint.h>
#include <sys/types.h>
#include "json.h"
#include "pollset.h"
#include "users.h"

/* Sync-mode processes tracked at once (guest-exec records and the pending dsec-exec). */
#define MAX_CHILDREN 64
/* The most a dsec-exec or session run keeps per stream. */
#define MAX_OUTPUT_LIMIT (32u * 1024 * 1024)
/* What guest-exec keeps per stream (qemu-ga keeps 16 MB). */
#define GUEST_EXEC_OUTPUT (16u * 1024 * 1024)

struct child {
  pid_t pid;
  int in_fd, out_fd, err_fd; /* -1 when closed; a tty's in_fd and out_fd are both its master */
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
  int async;   /* guest-exec: kept until guest-exec-status reports it */
  int managed; /* pipes and deadline are serviced by async.c or session.c */
  int tty;
  /* this round's pollset indices (sync children) */
  int in_index, out_index, err_index;
};

struct spawn_request {
  const char *path;
  const char *const *args; /* argv[1..], NULL-terminated */
  const char *const *env;  /* "K=V" entries laid over the base environment, NULL-terminated */
  const char *argv0;       /* NULL: path */
  const char *cwd;         /* NULL: / */
  const char *user;        /* NULL: the agent's own (or `ids`) */
  const struct user *ids;  /* numeric uid, gid, groups and home, no /etc/passwd (NULL: `user`) */
  const unsigned char *input;
  size_t input_length;
  int stdin_pipe; /* a pipe to stdin even without input (kept open for dsec-input) */
  int capture;    /* 0: stdout and stderr go to /dev/null */
  int tty;        /* a new pseudo-terminal as stdin, stdout, stderr and controlling terminal */
  unsigned short rows, cols;
  size_t max_output;
  int64_t timeout_ms; /* 0: none */
  int async;
  int managed;
};

int64_t now_ms(void);
/* Set up the SIGCHLD self-pipe. Returns its read end, to poll. */
int process_init(void);
/* Drain the self-pipe and reap every child that exited. Returns how many. */
int process_reap(void);

/* Start a process. Returns NULL with `error` filled when it could not start
   (bad user, cwd, path: found before exec through a close-on-exec pipe);
   *exec_errno is then execvp's errno when exec itself failed, else 0, and
   *failed_pid the pid the attempt had (0 when there was none). */
struct child *process_spawn(const struct spawn_request *request, int *exec_errno, pid_t *failed_pid, char *error, size_t error_size);
/* A new tracked record (fds -1): NULL with `error` filled when the sync-mode
   table is full (64, a finished guest-exec nobody asked about dropped first). */
struct child *process_track(int managed, char *error, size_t error_size);
/* A tracked sync-mode (guest-exec) child. */
struct child *process_find(pid_t pid);
/* Close its pipes, free it and stop tracking it. */
void process_release(struct child *child);
/* Exited and its output read. */
int process_done(const struct child *child);
/* How many live (not yet reaped) managed children there are. */
int process_live_managed(void);

/* Add the open pipes of every sync-mode child. */
void process_add_pollfds(struct pollset *set);
/* Service the pipes poll() found ready, drain exited children, enforce deadlines. */
void process_service(const struct pollset *set);
/* Lower *timeout_ms to the nearest sync-mode deadline. */
void process_poll_timeout(int *timeout_ms);

/* Kill every process the agent may: as PID 1 all of them, otherwise its
   descendants. Waits (up to a few seconds) until they are reaped. */
int process_kill_all(void);
/* Close every tracked child's pipes (after process_kill_all: their processes are gone). */
void process_close_pipes(void);
/* SIGKILL a process's group, and the process itself should it have left the group. */
void process_kill_group(pid_t pid, int signal_number);

#endif
