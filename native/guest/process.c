/* Child processes of the guest agent; see process.h. */
#define _GNU_SOURCE
#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "users.h"

static struct child children[MAX_CHILDREN];
static int sigchld_pipe[2] = {-1, -1};

#define BASE_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define MAX_ENV 256

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

struct child *process_find(pid_t pid) {
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (children[i].used && children[i].pid == pid) return &children[i];
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
    struct child *child = process_find(pid);
    if (child != NULL && !child->exited) {
      child->exited = 1;
      child->status = status;
      child->duration_ms = now_ms() - child->started_ms;
    }
  }
  return reaped;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

void process_release(struct child *child) {
  close_fd(&child->in_fd);
  close_fd(&child->out_fd);
  close_fd(&child->err_fd);
  free(child->input);
  buffer_free(&child->out);
  buffer_free(&child->err);
  memset(child, 0, sizeof *child);
}

int process_done(const struct child *child) {
  return child->exited && child->out_fd < 0 && child->err_fd < 0;
}

/* A free slot; when none, the oldest finished guest-exec nobody asked about is dropped. */
static struct child *free_slot(void) {
  struct child *oldest = NULL;
  for (int i = 0; i < MAX_CHILDREN; i++) {
    if (!children[i].used) return &children[i];
    if (children[i].async && process_done(&children[i]) && (oldest == NULL || children[i].started_ms < oldest->started_ms))
      oldest = &children[i];
  }
  if (oldest != NULL) process_release(oldest);
  return oldest;
}

/* The environment: a fixed base (PATH, HOME, USER) with the request's entries over it. */
static int build_env(const struct spawn_request *request, const struct user *user, char **env, char *storage, size_t size) {
  int n = 0;
  snprintf(storage, size, "HOME=%s", user != NULL ? user->home : "/root");
  env[n++] = BASE_PATH;
  env[n++] = storage;
  for (const char *const *entry = request->env; entry != NULL && *entry != NULL; entry++) {
    const char *equals = strchr(*entry, '=');
    if (equals == NULL || equals == *entry || n >= MAX_ENV - 1) return -1;
    size_t key = (size_t)(equals - *entry) + 1;
    int replaced = 0;
    for (int i = 0; i < n && !replaced; i++)
      if (strncmp(env[i], *entry, key) == 0) { env[i] = (char *)*entry; replaced = 1; }
    if (!replaced) env[n++] = (char *)*entry;
  }
  env[n] = NULL;
  return 0;
}

/* Why a child could not exec, sent to the parent on a close-on-exec pipe. */
struct spawn_report {
  int exec_errno; /* execvp's errno; 0 when an earlier step failed */
  char message[500];
};

/* In the child: report why it could not exec, then exit. */
static void child_fail(int report_fd, const char *stage, const char *what) {
  struct spawn_report report;
  memset(&report, 0, sizeof report);
  int code = errno;
  report.exec_errno = strcmp(stage, "failed to execute") == 0 ? code : 0;
  snprintf(report.message, sizeof report.message, "%s %s: %s", stage, what, strerror(code));
  ssize_t ignored = write(report_fd, &report, sizeof report);
  (void)ignored;
  _exit(127);
}

static void run_child(const struct spawn_request *request, const struct user *user, char **env, int in_fd, int out_fd, int err_fd,
                      int report_fd) {
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  int null_fd = open("/dev/null", O_RDWR);
  if (in_fd < 0) in_fd = null_fd;
  if (out_fd < 0) out_fd = null_fd;
  if (err_fd < 0) err_fd = null_fd;
  if (in_fd < 0 || out_fd < 0 || err_fd < 0) child_fail(report_fd, "failed to open", "/dev/null");
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) child_fail(report_fd, "failed to set up", "stdio");
  if (user != NULL) {
    if (setgroups((size_t)user->group_count, user->groups) != 0) child_fail(report_fd, "failed to set the groups of", "the user");
    if (setgid(user->gid) != 0) child_fail(report_fd, "failed to switch to", "the group");
    if (setuid(user->uid) != 0) child_fail(report_fd, "failed to switch to", "the user");
  }
  const char *cwd = request->cwd != NULL ? request->cwd : "/";
  if (chdir(cwd) != 0) child_fail(report_fd, "failed to change directory to", cwd);
  int argc = 1;
  for (const char *const *a = request->args; a != NULL && *a != NULL; a++) argc++;
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  if (argv == NULL) child_fail(report_fd, "failed to start", request->path);
  argv[0] = (char *)request->path;
  for (int i = 1; i < argc; i++) argv[i] = (char *)request->args[i - 1];
  environ = env; /* execvp searches the PATH of the new environment */
  execvp(request->path, argv);
  child_fail(report_fd, "failed to execute", request->path);
}

struct child *process_spawn(const struct spawn_request *request, int *exec_errno, char *error, size_t error_size) {
  struct user user;
  *exec_errno = 0;
  if (request->user != NULL && user_resolve(request->user, &user, error, error_size) != 0) return NULL;
  char *env[MAX_ENV];
  char home[512];
  if (build_env(request, request->user != NULL ? &user : NULL, env, home, sizeof home) != 0) {
    snprintf(error, error_size, "env must be at most %d entries of the form KEY=VALUE", MAX_ENV - 3);
    return NULL;
  }
  struct child *child = free_slot();
  if (child == NULL) {
    snprintf(error, error_size, "too many processes are being tracked (%d)", MAX_CHILDREN);
    return NULL;
  }
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, report_pipe[2] = {-1, -1};
  int ok = pipe2(report_pipe, O_CLOEXEC) == 0;
  if (ok && request->input_length > 0) ok = pipe2(in, O_CLOEXEC) == 0;
  if (ok && request->capture) ok = pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0;
  pid_t pid = ok ? fork() : -1;
  if (pid == 0) run_child(request, request->user != NULL ? &user : NULL, env, in[0], out[1], err[1], report_pipe[1]);
  int saved = errno;
  close_fd(&in[0]);
  close_fd(&out[1]);
  close_fd(&err[1]);
  close_fd(&report_pipe[1]);
  if (pid < 0) {
    snprintf(error, error_size, "failed to start %s: %s", request->path, strerror(saved));
    close_fd(&in[1]); close_fd(&out[0]); close_fd(&err[0]); close_fd(&report_pipe[0]);
    return NULL;
  }
  setpgid(pid, pid); /* also in the child: whichever runs first, the group exists before a timeout can kill it */
  memset(child, 0, sizeof *child);
  child->used = 1;
  child->pid = pid;
  child->in_fd = in[1];
  child->out_fd = out[0];
  child->err_fd = err[0];
  child->max_output = request->max_output;
  child->started_ms = now_ms();
  child->deadline_ms = request->timeout_ms > 0 ? child->started_ms + request->timeout_ms : 0;
  child->async = request->async;
  /* Exec succeeded when the report pipe closes empty. */
  struct spawn_report report;
  ssize_t n;
  do n = read(report_pipe[0], &report, sizeof report); while (n < 0 && errno == EINTR);
  close_fd(&report_pipe[0]);
  if (n > 0) {
    report.message[sizeof report.message - 1] = 0;
    if (n != (ssize_t)sizeof report) snprintf(report.message, sizeof report.message, "failed to start %s", request->path);
    else *exec_errno = report.exec_errno;
    snprintf(error, error_size, "%s", report.message);
    waitpid(pid, NULL, 0); /* it exits at once; the reaper may have it already */
    process_release(child);
    return NULL;
  }
  if (child->in_fd >= 0) {
    child->input = malloc(request->input_length);
    if (child->input == NULL) close_fd(&child->in_fd);
    else memcpy(child->input, request->input, request->input_length);
    child->input_length = request->input_length;
    fcntl(child->in_fd, F_SETFL, O_NONBLOCK);
  }
  if (child->out_fd >= 0) fcntl(child->out_fd, F_SETFL, O_NONBLOCK);
  if (child->err_fd >= 0) fcntl(child->err_fd, F_SETFL, O_NONBLOCK);
  return child;
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

void process_add_pollfds(struct pollfd *fds, int *count, int max) {
  for (int i = 0; i < MAX_CHILDREN; i++) {
    struct child *c = &children[i];
    if (!c->used) continue;
    if (c->in_fd >= 0 && *count < max) fds[(*count)++] = (struct pollfd){c->in_fd, POLLOUT, 0};
    if (c->out_fd >= 0 && *count < max) fds[(*count)++] = (struct pollfd){c->out_fd, POLLIN, 0};
    if (c->err_fd >= 0 && *count < max) fds[(*count)++] = (struct pollfd){c->err_fd, POLLIN, 0};
  }
}

static short revents_of(const struct pollfd *fds, int count, int fd) {
  for (int i = 0; i < count; i++)
    if (fds[i].fd == fd) return fds[i].revents;
  return 0;
}

void process_service(const struct pollfd *fds, int count) {
  int64_t now = now_ms();
  for (int i = 0; i < MAX_CHILDREN; i++) {
    struct child *c = &children[i];
    if (!c->used) continue;
    if (c->in_fd >= 0 && (c->exited || revents_of(fds, count, c->in_fd))) {
      if (c->exited) close_fd(&c->in_fd);
      else write_input(c);
    }
    /* After exit everything the child wrote is in the pipe: drain it and stop (a
       background grandchild keeping the pipe open must not hold the answer back). */
    if (c->out_fd >= 0 && (c->exited || revents_of(fds, count, c->out_fd))) read_output(c, &c->out_fd, &c->out, &c->out_truncated);
    if (c->err_fd >= 0 && (c->exited || revents_of(fds, count, c->err_fd))) read_output(c, &c->err_fd, &c->err, &c->err_truncated);
    if (c->exited) { close_fd(&c->out_fd); close_fd(&c->err_fd); }
    if (!c->exited && c->deadline_ms > 0 && now >= c->deadline_ms && !c->timed_out) {
      c->timed_out = 1;
      kill(-c->pid, SIGKILL);
      kill(c->pid, SIGKILL); /* in case it left its group */
    }
  }
}

int process_poll_timeout(int fallback) {
  int64_t now = now_ms();
  int64_t best = fallback;
  for (int i = 0; i < MAX_CHILDREN; i++) {
    const struct child *c = &children[i];
    if (c->used && !c->exited && !c->timed_out && c->deadline_ms > 0) {
      int64_t left = c->deadline_ms - now;
      if (left < 0) left = 0;
      if (best < 0 || left < best) best = left;
    }
  }
  return (int)best;
}

void process_close_pipes(void) {
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (children[i].used) { close_fd(&children[i].in_fd); close_fd(&children[i].out_fd); close_fd(&children[i].err_fd); }
}
