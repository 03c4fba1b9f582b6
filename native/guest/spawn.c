/*
 * Starting a child process for every kind of exec (see process.h): the
 * user, the environment, the working directory, stdin as asked, a new
 * process group (or a new session on a pseudo-terminal), every other fd
 * closed, signals reset. Whether exec worked is known before this returns,
 * through a close-on-exec pipe that stays empty on success.
 */
#define _GNU_SOURCE
#include "process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pty.h"

#define BASE_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define MAX_ENV 256
/* How long a child may take from fork to exec before it is taken as started. */
#define SPAWN_REPORT_MS 2000
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The environment: a fixed base (PATH, HOME) with the request's entries over it. */
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

/* Every fd from 3 up close-on-exec, whatever the agent inherited or opened
   (belt and braces: the agent opens all its own close-on-exec), so the
   program starts with exactly 0, 1 and 2. Close-on-exec rather than closed:
   the report pipe must live until exec. */
static void cloexec_from_3(void) {
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  DIR *fds = opendir("/proc/self/fd"); /* a kernel before 5.11 */
  if (fds != NULL) {
    struct dirent *entry;
    while ((entry = readdir(fds)) != NULL) {
      int fd = atoi(entry->d_name);
      if (fd >= 3 && fd != dirfd(fds)) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    closedir(fds);
    return;
  }
  for (int fd = 3; fd < 65536; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static void run_child(const struct spawn_request *request, const struct user *user, char **env, int in_fd, int out_fd, int err_fd,
                      int report_fd) {
  if (request->tty) {
    if (pty_child_setup(in_fd) != 0) child_fail(report_fd, "failed to set up", "the terminal");
  } else {
    setpgid(0, 0);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  if (!request->tty) {
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (in_fd < 0) in_fd = null_fd;
    if (out_fd < 0) out_fd = null_fd;
    if (err_fd < 0) err_fd = null_fd;
    if (in_fd < 0 || out_fd < 0 || err_fd < 0) child_fail(report_fd, "failed to open", "/dev/null");
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) child_fail(report_fd, "failed to set up", "stdio");
  }
  cloexec_from_3();
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
  argv[0] = (char *)(request->argv0 != NULL ? request->argv0 : request->path);
  for (int i = 1; i < argc; i++) argv[i] = (char *)request->args[i - 1];
  environ = env; /* execvp searches the PATH of the new environment */
  execvp(request->path, argv);
  child_fail(report_fd, "failed to execute", request->path);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* The child's ends and the agent's ends of its stdio, by what the request asks. */
static int make_stdio(const struct spawn_request *request, const struct user *user, int in[2], int out[2], int err[2], char *error, size_t size) {
  if (request->tty) {
    /* in[1] (the agent's end) is the master, in[0] (the child's) the slave. */
    if (pty_open(&in[1], &in[0], request->rows, request->cols, error, size) != 0) return -1;
    if (user != NULL && fchown(in[0], user->uid, (gid_t)-1) != 0) { /* the terminal is the user's, as login makes it: best effort */ }
    out[0] = fcntl(in[1], F_DUPFD_CLOEXEC, 3);
    if (out[0] < 0) { snprintf(error, size, "failed to set up the terminal: %s", strerror(errno)); return -1; }
    return 0;
  }
  int ok = 1;
  if (request->input_length > 0 || request->stdin_pipe) ok = pipe2(in, O_CLOEXEC) == 0;
  if (ok && request->capture) ok = pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0;
  if (!ok) snprintf(error, size, "failed to start %s: %s", request->path, strerror(errno));
  return ok ? 0 : -1;
}

struct child *process_spawn(const struct spawn_request *request, int *exec_errno, pid_t *failed_pid, char *error, size_t error_size) {
  struct user resolved;
  const struct user *user = request->ids;
  *exec_errno = 0;
  *failed_pid = 0;
  if (user == NULL && request->user != NULL) {
    if (user_resolve(request->user, &resolved, error, error_size) != 0) return NULL;
    user = &resolved;
  }
  char *env[MAX_ENV];
  char home[512];
  if (build_env(request, user, env, home, sizeof home) != 0) {
    snprintf(error, error_size, "env must be at most %d entries of the form KEY=VALUE", MAX_ENV - 3);
    return NULL;
  }
  struct child *child = process_track(request->managed, error, error_size);
  if (child == NULL) return NULL;
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, report_pipe[2] = {-1, -1};
  pid_t pid = -1;
  int saved = 0;
  if (make_stdio(request, user, in, out, err, error, error_size) == 0) {
    pid = pipe2(report_pipe, O_CLOEXEC) == 0 ? fork() : -1;
    saved = errno;
    if (pid < 0) snprintf(error, error_size, "failed to start %s: %s", request->path, strerror(saved));
  }
  if (pid == 0) run_child(request, user, env, in[0], out[1], err[1], report_pipe[1]);
  close_fd(&in[0]);
  close_fd(&out[1]);
  close_fd(&err[1]);
  close_fd(&report_pipe[1]);
  if (pid < 0) {
    close_fd(&in[1]); close_fd(&out[0]); close_fd(&err[0]); close_fd(&report_pipe[0]);
    process_release(child);
    return NULL;
  }
  if (!request->tty) setpgid(pid, pid); /* also in the child: whichever runs first, the group exists before a timeout can kill it */
  child->pid = pid;
  child->in_fd = in[1];
  child->out_fd = out[0];
  child->err_fd = err[0];
  child->tty = request->tty;
  child->max_output = request->max_output;
  child->started_ms = now_ms();
  child->deadline_ms = request->timeout_ms > 0 ? child->started_ms + request->timeout_ms : 0;
  child->async = request->async;
  /* Exec succeeded when the report pipe closes empty. The wait is bounded: the
     child is an ordinary process until its exec, and sandbox code running as
     root could stop it (SIGSTOP) there to hang the agent. Past the bound it is
     taken as started (a stopped process is the sandbox's doing; its timeout
     still applies), and a late report goes nowhere. */
  struct spawn_report report;
  ssize_t n = 0;
  int64_t deadline = now_ms() + SPAWN_REPORT_MS;
  struct pollfd waiting = {report_pipe[0], POLLIN, 0};
  for (int64_t left = SPAWN_REPORT_MS; left > 0; left = deadline - now_ms()) {
    int ready = poll(&waiting, 1, (int)left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0) do n = read(report_pipe[0], &report, sizeof report); while (n < 0 && errno == EINTR);
    break;
  }
  close_fd(&report_pipe[0]);
  if (n > 0) {
    report.message[sizeof report.message - 1] = 0;
    if (n != (ssize_t)sizeof report) snprintf(report.message, sizeof report.message, "failed to start %s", request->path);
    else *exec_errno = report.exec_errno;
    snprintf(error, error_size, "%s", report.message);
    *failed_pid = pid;
    process_release(child); /* the reaper collects it: it exits at once */
    return NULL;
  }
  if (child->in_fd >= 0 && request->input_length > 0) {
    child->input = malloc(request->input_length);
    if (child->input == NULL) close_fd(&child->in_fd);
    else memcpy(child->input, request->input, request->input_length);
    child->input_length = child->input != NULL ? request->input_length : 0;
  }
  if (child->in_fd >= 0) fcntl(child->in_fd, F_SETFL, fcntl(child->in_fd, F_GETFL) | O_NONBLOCK);
  if (child->out_fd >= 0) fcntl(child->out_fd, F_SETFL, fcntl(child->out_fd, F_GETFL) | O_NONBLOCK);
  if (child->err_fd >= 0) fcntl(child->err_fd, F_SETFL, fcntl(child->err_fd, F_GETFL) | O_NONBLOCK);
  return child;
}
