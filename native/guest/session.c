/*
 * Session shells: open, close, list, and their servicing by the main loop
 * (see session.h). Between runs the shells' output is read and dropped, so
 * a background job of an earlier run never blocks on a full pipe.
 */
#define _GNU_SOURCE
#include "session.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "commands.h"
#include "exec.h"
#include "proctree.h"
#include "reply.h"

#define MAX_ENV_ENTRIES 250

static struct session *sessions[MAX_SESSIONS];
static int session_count;
static unsigned long next_serial = 1UL << 40; /* apart from processes' serials (lingering pipes' owners) */

struct session *session_find(const char *handle) {
  for (int i = 0; handle != NULL && i < session_count; i++)
    if (strcmp(sessions[i]->handle, handle) == 0) return sessions[i];
  return NULL;
}

int handle_taken(const char *handle) { return aproc_find(handle) != NULL || session_find(handle) != NULL; }

static struct session *find_session(const struct json *args, const struct json *id) {
  const char *handle = json_get_string(args, "handle");
  struct session *s = session_find(handle);
  if (s != NULL) return s;
  char error[256];
  if (aproc_find(handle) != NULL) snprintf(error, sizeof error, "%.64s is a process, not a session", handle);
  else snprintf(error, sizeof error, "no session with handle %.64s", handle != NULL ? handle : "(none)");
  reply_error(id, "NotFound", error);
  return NULL;
}

static int executable_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

void cmd_session_open(const struct json *args, struct json **id) {
  char error[1024] = {0};
  struct spawn_request request;
  struct user ids;
  int has_ids = 0;
  memset(&request, 0, sizeof request);
  const char *handle = json_get_string(args, "handle");
  const char *shell = json_get_string(args, "shell");
  request.cwd = json_get_string(args, "cwd");
  if (!handle_valid(handle)) snprintf(error, sizeof error, "'handle' must be 1 to %d characters of A-Z a-z 0-9 _ -", MAX_HANDLE);
  else if (handle_taken(handle)) snprintf(error, sizeof error, "handle %s is already in use", handle);
  else if (session_count >= MAX_SESSIONS) snprintf(error, sizeof error, "too many sessions (%d); close some first", MAX_SESSIONS);
  else if (process_live_managed() >= MAX_LIVE_PROCESSES) snprintf(error, sizeof error, "too many processes are running (%d)", MAX_LIVE_PROCESSES);
  else if (json_get(args, "shell") != NULL && (shell == NULL || shell[0] != '/' || strlen(shell) >= sizeof sessions[0]->shell))
    snprintf(error, sizeof error, "'shell' must be an absolute path");
  else if (json_get(args, "cwd") != NULL && request.cwd == NULL) snprintf(error, sizeof error, "'cwd' must be a string");
  else if (!json_get_strings(args, "env", MAX_ENV_ENTRIES, (const char ***)&request.env))
    snprintf(error, sizeof error, "'env' must be an array of at most %d KEY=VALUE strings", MAX_ENV_ENTRIES);
  else if (user_arguments(args, &request.user, &ids, &has_ids, error, sizeof error) != 0) {}
  struct session *s = error[0] ? NULL : calloc(1, sizeof *s);
  if (s == NULL) {
    free((void *)request.env);
    reply_error(*id, "GenericError", error[0] ? error : "out of memory");
    return;
  }
  if (shell == NULL) shell = executable_file("/bin/bash") ? "/bin/bash" : "/bin/sh";
  const char *base = strrchr(shell, '/') + 1;
  int bash = strcmp(base, "bash") == 0;
  static const char *const BASH_ARGS[] = {"--noprofile", "--norc", NULL};
  request.path = shell;
  request.argv0 = bash ? "bash" : "sh";
  request.args = bash ? BASH_ARGS : NULL;
  request.ids = has_ids ? &ids : NULL;
  request.stdin_pipe = 1;
  request.capture = 1;
  request.managed = 1;
  int exec_errno;
  pid_t failed;
  s->child = process_spawn(&request, &exec_errno, &failed, error, sizeof error);
  free((void *)request.env);
  if (s->child == NULL) {
    free(s);
    reply_error(*id, "GenericError", error);
    return;
  }
  snprintf(s->handle, sizeof s->handle, "%s", handle);
  snprintf(s->shell, sizeof s->shell, "%s", shell);
  s->serial = next_serial++;
  sessions[session_count++] = s;
  struct buffer value = {0};
  buffer_printf(&value, "{\"handle\":\"%s\",\"pid\":%d,\"shell\":", s->handle, (int)s->child->pid);
  json_write_string(&value, s->shell, strlen(s->shell));
  buffer_append_str(&value, "}");
  reply_value(*id, &value);
  buffer_free(&value);
}

void cmd_session_interrupt(const struct json *args, struct json **id) {
  struct session *s = find_session(args, *id);
  if (s == NULL) return;
  if (s->busy) run_interrupt(s, 0);
  reply_empty(*id);
}

void cmd_session_close(const struct json *args, struct json **id) {
  struct session *s = find_session(args, *id);
  if (s == NULL) return;
  pid_t pid = s->child->pid;
  if (!s->child->exited) {
    proctree_signal(pid, 0, SIGKILL); /* every descendant, of any run */
    process_kill_group(pid, SIGKILL);
  }
  if (s->busy) { s->ended = 1; run_finish(s); } /* its run answers: the shell is gone */
  linger_close_owner(s->serial);
  process_release(s->child);
  for (int i = 0; i < session_count; i++)
    if (sessions[i] == s) sessions[i] = sessions[--session_count];
  free(s);
  reply_empty(*id);
}

void cmd_sessions(const struct json *args, struct json **id) {
  (void)args;
  struct buffer value = {0};
  buffer_append_str(&value, "[");
  for (int i = 0; i < session_count; i++) {
    const struct session *s = sessions[i];
    buffer_printf(&value, "%s{\"handle\":\"%s\",\"pid\":%d,\"shell\":", i ? "," : "", s->handle, (int)s->child->pid);
    json_write_string(&value, s->shell, strlen(s->shell));
    buffer_printf(&value, ",\"busy\":%s,\"ended\":%s", s->busy ? "true" : "false", s->ended ? "true" : "false");
    char link[64], cwd[4096];
    snprintf(link, sizeof link, "/proc/%d/cwd", (int)s->child->pid);
    ssize_t n = s->ended ? -1 : readlink(link, cwd, sizeof cwd);
    if (n > 0 && (size_t)n < sizeof cwd) {
      json_write_key(&value, "cwd", 0);
      json_write_string(&value, cwd, (size_t)n);
    }
    buffer_append_str(&value, "}");
  }
  buffer_append_str(&value, "]");
  reply_value(*id, &value);
  buffer_free(&value);
}

void session_end_host(void) {
  for (int i = 0; i < session_count; i++) {
    struct session *s = sessions[i];
    if (!s->busy) continue;
    run_interrupt(s, 0); /* the run goes on being interrupted; nobody gets its answer */
    json_free(s->id);
    s->id = NULL;
  }
}

void session_add_pollfds(struct pollset *set, int *timeout_ms) {
  int reading = !reply_backpressure();
  int64_t now = now_ms();
  for (int i = 0; i < session_count; i++) {
    struct session *s = sessions[i];
    struct child *c = s->child;
    c->in_index = c->out_index = c->err_index = -1;
    if (s->ended) continue;
    run_timers(s, now, timeout_ms);
    if (c->exited) { if (reading) timeout_lower(timeout_ms, 0); continue; }
    if (c->input_offset < c->input_length) c->in_index = pollset_add(set, c->in_fd, POLLOUT);
    if (reading) {
      c->out_index = pollset_add(set, c->out_fd, POLLIN);
      c->err_index = pollset_add(set, c->err_fd, POLLIN);
    }
  }
}

static void write_shell_input(struct child *c) {
  while (c->in_fd >= 0 && c->input_offset < c->input_length) {
    ssize_t n = write(c->in_fd, c->input + c->input_offset, c->input_length - c->input_offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0) { close(c->in_fd); c->in_fd = -1; } /* the shell is going away */
    else c->input_offset += (size_t)n;
  }
  free(c->input);
  c->input = NULL;
  c->input_length = c->input_offset = 0;
}

/* Read a bounded amount; output of a run in flight goes to it, the rest is dropped. */
static void read_shell(struct session *s, int stream, size_t budget) {
  int *fd = stream ? &s->child->err_fd : &s->child->out_fd;
  char chunk[OUTPUT_CHUNK];
  size_t done = 0;
  while (*fd >= 0 && done < budget) {
    ssize_t n = read(*fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { close(*fd); *fd = -1; return; }
    done += (size_t)n;
    if (s->busy && !s->out[stream].marker_seen) run_output(s, stream, chunk, (size_t)n);
    if (s->busy && s->out[0].marker_seen && s->out[1].marker_seen) run_finish(s);
    if (s->busy && s->stream && reply_backpressure()) return;
  }
}

void session_service(const struct pollset *set) {
  int64_t now = now_ms();
  for (int i = 0; i < session_count; i++) {
    struct session *s = sessions[i];
    struct child *c = s->child;
    if (s->ended) continue;
    if (c->in_fd >= 0 && c->input_offset < c->input_length && pollset_revents(set, c->in_index)) write_shell_input(c);
    if (!reply_backpressure()) {
      if (pollset_revents(set, c->out_index)) read_shell(s, 0, 256 * 1024);
      if (pollset_revents(set, c->err_index)) read_shell(s, 1, 256 * 1024);
    }
    if (c->exited && !reply_backpressure()) {
      /* The shell is gone: what it wrote is in the pipes; a job it left may hold them on. */
      read_shell(s, 0, 1024 * 1024);
      read_shell(s, 1, 1024 * 1024);
      if (c->in_fd >= 0) { close(c->in_fd); c->in_fd = -1; }
      s->ended = 1;
      if (s->busy) run_finish(s);
      linger_add(c->out_fd, c->err_fd, s->serial);
      c->out_fd = c->err_fd = -1;
      continue;
    }
    int ignored = -1;
    run_timers(s, now, &ignored);
  }
}

void cmd_session_run(const struct json *args, struct json **id) {
  const char *handle = json_get_string(args, "handle");
  struct session *s = session_find(handle);
  char error[512];
  int64_t timeout, max_output;
  int stream;
  const char *command = json_get_string(args, "command");
  if (s == NULL) {
    snprintf(error, sizeof error, "no session with handle %.64s", handle != NULL ? handle : "(none)");
    reply_error(*id, "NotFound", error);
    return;
  }
  if (s->busy) { reply_error(*id, "Busy", "a run is already in flight in this session"); return; }
  if (s->ended || s->child->exited || s->child->in_fd < 0) { reply_error(*id, "GenericError", "the session's shell has ended; close it"); return; }
  if (command == NULL || strlen(command) > MAX_COMMAND) { reply_error(*id, "GenericError", "'command' must be a string of at most 1 MiB without NUL"); return; }
  if (limit_arguments(args, &timeout, &max_output, error, sizeof error) != 0) { reply_error(*id, "GenericError", error); return; }
  if (bool_argument(args, "stream", 0, &stream) != 0) { reply_error(*id, "GenericError", "'stream' must be a boolean"); return; }
  run_make_nonce(s->nonce);
  /* command eval keeps a syntax error or a failing special builtin from ending
     the shell; </dev/null keeps the command from reading the shell's own input
     (the lines after it); the markers go on two lines, so that when the first
     is cut short the second still runs. */
  struct buffer text = {0};
  buffer_append_str(&text, "command eval '");
  for (const char *c = command; *c; c++) {
    if (*c == '\'') buffer_append_str(&text, "'\\''");
    else buffer_append(&text, c, 1);
  }
  buffer_printf(&text, "' </dev/null\n__dsec_s=$?; printf '\\n\\036%%s %%d\\036\\n' '%s' \"$__dsec_s\"; printf '\\n\\036%%s\\036\\n' '%s' >&2\n",
                s->nonce, s->nonce);
  struct child *c = s->child;
  if (text.failed) { buffer_free(&text); reply_error(*id, "GenericError", "out of memory"); return; }
  free(c->input);
  c->input = (unsigned char *)text.data; /* written as the shell reads it (session.c) */
  c->input_length = text.length;
  c->input_offset = 0;
  s->busy = 1;
  s->id = *id;
  *id = NULL;
  s->generation = async_generation;
  s->stream = stream;
  s->max_output = (size_t)max_output;
  s->started_ms = now_ms();
  s->deadline_ms = timeout > 0 ? s->started_ms + timeout : 0;
  s->start_ticks = proctree_now_ticks();
}
