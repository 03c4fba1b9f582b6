/* The agent's child table, reaping, and the sync-mode pipes; see process.h (spawning is in spawn.c). */
#define _GNU_SOURCE
#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Every tracked child, in a growable array of stable pointers (async.c and session.c keep them). */
static struct child **table;
static int table_count, table_capacity;
static int sigchld_pipe[2] = {-1, -1};

int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void on_sigchld(int signal_number) {
  (void)signal_number;
  int saved = errno;
  ssize_t ignored = write(sigchld_pipe[1], "c", 1); /* full pipe: a wake-up is already pending */
  (void)ignored;
  errno = saved;
}

int process_init(void) {
  if (pipe2(sigchld_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  /* SIGCHLD is the only signal with a handler: as PID 1 of a pid namespace the
     agent then gets no other signal from the processes inside (the kernel drops
     signals to a namespace's init that it does not handle: kill -9 1, kill -TERM 1
     and kill -1 do nothing to it). */
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_sigchld;
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &action, NULL);
  signal(SIGPIPE, SIG_IGN); /* a host that hangs up is a write error, not death */
  /* Orphans of our descendants come back to us, so they are reaped and reset can find them. */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  return sigchld_pipe[0];
}

struct child *process_track(int managed, char *error, size_t size) {
  if (!managed) {
    /* The sync-mode limit: when full, the oldest finished guest-exec nobody asked about goes. */
    struct child *oldest = NULL;
    int count = 0;
    for (int i = 0; i < table_count; i++) {
      struct child *c = table[i];
      if (c->managed) continue;
      count++;
      if (c->async && process_done(c) && (oldest == NULL || c->started_ms < oldest->started_ms)) oldest = c;
    }
    if (count >= MAX_CHILDREN && oldest == NULL) {
      snprintf(error, size, "too many processes are being tracked (%d)", MAX_CHILDREN);
      return NULL;
    }
    if (count >= MAX_CHILDREN) process_release(oldest);
  }
  if (table_count == table_capacity) {
    int capacity = table_capacity ? table_capacity * 2 : 64;
    struct child **grown = realloc(table, (size_t)capacity * sizeof *grown);
    if (grown == NULL) { snprintf(error, size, "out of memory"); return NULL; }
    table = grown;
    table_capacity = capacity;
  }
  struct child *child = calloc(1, sizeof *child);
  if (child == NULL) { snprintf(error, size, "out of memory"); return NULL; }
  child->in_fd = child->out_fd = child->err_fd = -1;
  child->in_index = child->out_index = child->err_index = -1;
  child->managed = managed;
  table[table_count++] = child;
  return child;
}

struct child *process_find(pid_t pid) {
  for (int i = 0; i < table_count; i++)
    if (!table[i]->managed && table[i]->pid == pid) return table[i];
  return NULL;
}

int process_reap(void) {
  char drain[64];
  while (read(sigchld_pipe[0], drain, sizeof drain) > 0) {}
  int reaped = 0;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    reaped++;
    /* The running record with this pid: a finished one kept for its status may
       carry the same (reused) number. */
    for (int i = 0; i < table_count; i++) {
      struct child *child = table[i];
      if (child->pid != pid || child->exited) continue;
      child->exited = 1;
      child->status = status;
      child->duration_ms = now_ms() - child->started_ms;
      break;
    }
  }
  return reaped;
}

int process_live_managed(void) {
  int live = 0;
  for (int i = 0; i < table_count; i++)
    if (table[i]->managed && !table[i]->exited) live++;
  return live;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

void process_release(struct child *child) {
  if (child == NULL) return;
  close_fd(&child->in_fd);
  close_fd(&child->out_fd);
  close_fd(&child->err_fd);
  free(child->input);
  buffer_free(&child->out);
  buffer_free(&child->err);
  for (int i = 0; i < table_count; i++)
    if (table[i] == child) { table[i] = table[--table_count]; break; }
  free(child);
}

int process_done(const struct child *child) {
  return child->exited && child->out_fd < 0 && child->err_fd < 0;
}

void process_kill_group(pid_t pid, int signal_number) {
  if (pid <= 0) return;
  kill(-pid, signal_number);
  kill(pid, signal_number); /* in case it left its group */
}

/* Read what is there; output past the limit is read and dropped, so the child never blocks on it. */
static void read_output(struct child *child, int *fd, struct buffer *into, int *truncated) {
  char chunk[65536];
  for (;;) {
    ssize_t n = read(*fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { close_fd(fd); return; }
    size_t room = child->max_output > into->length ? child->max_output - into->length : 0;
    size_t keep = (size_t)n < room ? (size_t)n : room;
    buffer_append(into, chunk, keep);
    if (keep < (size_t)n || into->failed) *truncated = 1;
  }
}

static void write_input(struct child *child) {
  while (child->input_offset < child->input_length) {
    ssize_t n = write(child->in_fd, child->input + child->input_offset, child->input_length - child->input_offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0) break; /* EPIPE: the child stopped reading */
    child->input_offset += (size_t)n;
  }
  close_fd(&child->in_fd);
}

void process_add_pollfds(struct pollset *set) {
  for (int i = 0; i < table_count; i++) {
    struct child *c = table[i];
    c->in_index = c->out_index = c->err_index = -1;
    if (c->managed) continue;
    c->in_index = pollset_add(set, c->in_fd, POLLOUT);
    c->out_index = pollset_add(set, c->out_fd, POLLIN);
    c->err_index = pollset_add(set, c->err_fd, POLLIN);
  }
}

void process_service(const struct pollset *set) {
  int64_t now = now_ms();
  for (int i = 0; i < table_count; i++) {
    struct child *c = table[i];
    if (c->managed) continue;
    if (c->in_fd >= 0 && (c->exited || pollset_revents(set, c->in_index))) {
      if (c->exited) close_fd(&c->in_fd);
      else write_input(c);
    }
    /* After exit everything the child wrote is in the pipe: drain it and stop (a
       background grandchild keeping the pipe open must not hold the answer back). */
    if (c->out_fd >= 0 && (c->exited || pollset_revents(set, c->out_index))) read_output(c, &c->out_fd, &c->out, &c->out_truncated);
    if (c->err_fd >= 0 && (c->exited || pollset_revents(set, c->err_index))) read_output(c, &c->err_fd, &c->err, &c->err_truncated);
    if (c->exited) { close_fd(&c->out_fd); close_fd(&c->err_fd); }
    if (!c->exited && c->deadline_ms > 0 && now >= c->deadline_ms && !c->timed_out) {
      c->timed_out = 1;
      process_kill_group(c->pid, SIGKILL);
    }
  }
}

void process_poll_timeout(int *timeout_ms) {
  int64_t now = now_ms();
  for (int i = 0; i < table_count; i++) {
    const struct child *c = table[i];
    if (!c->managed && !c->exited && !c->timed_out && c->deadline_ms > 0) timeout_lower(timeout_ms, c->deadline_ms > now ? c->deadline_ms - now : 0);
  }
}

void process_close_pipes(void) {
  for (int i = 0; i < table_count; i++) {
    close_fd(&table[i]->in_fd);
    close_fd(&table[i]->out_fd);
    close_fd(&table[i]->err_fd);
  }
}
