/*
 * Async mode's commands: dsec-hello, dsec-exec (async) and the commands on
 * a process's handle (see async.h, docs/guest-agent.md). Each answers
 * through reply.h; dsec-exec (foreground), dsec-wait and dsec-input keep the
 * request id and answer later.
 */
#define _GNU_SOURCE
#include "async.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base64.h"
#include "commands.h"
#include "exec.h"
#include "pty.h"
#include "reply.h"
#include "session.h"

static void refuse(const struct json *id, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void refuse(const struct json *id, const char *format, ...) {
  char error[512];
  va_list args;
  va_start(args, format);
  vsnprintf(error, sizeof error, format, args);
  va_end(args);
  reply_error(id, "GenericError", error);
}

void cmd_hello(const struct json *args, struct json **id) {
  if (json_get_string(args, "client") == NULL) { refuse(*id, "'client' must be a string"); return; }
  /* The previous host's session ends: its foreground work goes, background
     processes and sessions stay for the new one. */
  int killed = async_end_host();
  session_end_host();
  async_generation++;
  async_mode = 1;
  struct buffer value = {0};
  buffer_printf(&value, "{\"version\":\"dsec-guest " DSEC_GUEST_VERSION "\",\"protocol\":%d,\"pid\":%d,\"generation\":%u,\"killed\":%d}",
                DSEC_GUEST_PROTOCOL, (int)getpid(), async_generation, killed);
  reply_value(*id, &value);
  buffer_free(&value);
}

/* The record for args' handle, or NULL after answering NotFound. */
static struct aproc *find_process(const struct json *args, const struct json *id) {
  const char *handle = json_get_string(args, "handle");
  struct aproc *p = aproc_find(handle);
  if (p != NULL) return p;
  char error[256];
  if (handle != NULL && session_find(handle) != NULL) snprintf(error, sizeof error, "%.64s is a session, not a process", handle);
  else snprintf(error, sizeof error, "no process with handle %.64s", handle != NULL ? handle : "(none)");
  reply_error(id, "NotFound", error);
  return NULL;
}

static char *args_as_json(const struct spawn_request *request) {
  struct buffer out = {0};
  buffer_append_str(&out, "[");
  for (const char *const *a = request->args; a != NULL && *a != NULL; a++) {
    if (a != request->args) buffer_append_str(&out, ",");
    json_write_string(&out, *a, strlen(*a));
  }
  buffer_append_str(&out, "]");
  if (out.failed) { buffer_free(&out); return NULL; }
  return out.data;
}

/* The arguments dsec-exec has beyond spawn_arguments. Returns 0 or -1 with error. */
static int exec_options(const struct json *args, struct spawn_request *request, struct user *ids, int *background, int *stream, int *stdin_pipe,
                        char *error, size_t size) {
  int has_ids;
  int64_t timeout, max_output;
  request->cwd = json_get_string(args, "cwd");
  if (json_get(args, "cwd") != NULL && request->cwd == NULL) { snprintf(error, size, "'cwd' must be a string"); return -1; }
  if (user_arguments(args, &request->user, ids, &has_ids, error, size) != 0) return -1;
  if (has_ids) request->ids = ids;
  if (limit_arguments(args, &timeout, &max_output, error, size) != 0) return -1;
  request->timeout_ms = timeout;
  request->max_output = (size_t)max_output;
  if (bool_argument(args, "stream", 0, stream) != 0 || bool_argument(args, "background", 0, background) != 0) {
    snprintf(error, size, "'stream' and 'background' must be booleans");
    return -1;
  }
  const struct json *in = json_get(args, "stdin");
  const char *mode = json_get_string(args, "stdin");
  if (in != NULL && (mode == NULL || (strcmp(mode, "null") != 0 && strcmp(mode, "pipe") != 0))) {
    snprintf(error, size, "'stdin' must be \"null\" or \"pipe\"");
    return -1;
  }
  *stdin_pipe = mode != NULL && strcmp(mode, "pipe") == 0;
  const struct json *tty = json_get(args, "tty");
  if (tty != NULL && tty->type != JSON_NULL) {
    int64_t rows = 24, cols = 80;
    if (tty->type != JSON_OBJECT || (json_get(tty, "rows") != NULL && !json_get_int(tty, "rows", 0, 65535, &rows)) ||
        (json_get(tty, "cols") != NULL && !json_get_int(tty, "cols", 0, 65535, &cols))) {
      snprintf(error, size, "'tty' must be {\"rows\":R,\"cols\":C} with integers from 0 to 65535");
      return -1;
    }
    request->tty = 1;
    request->rows = (unsigned short)rows;
    request->cols = (unsigned short)cols;
    *stdin_pipe = 1; /* input goes to the terminal's master */
  }
  return 0;
}

/* Room for one more process: the live limit, and for a background one the record limit. */
static int make_room(int background, char *error, size_t size) {
  if (process_live_managed() >= MAX_LIVE_PROCESSES) {
    snprintf(error, size, "too many processes are running (%d)", MAX_LIVE_PROCESSES);
    return -1;
  }
  if (!background || aproc_background_count() < MAX_BACKGROUND) return 0;
  struct aproc *oldest = aproc_oldest_finished();
  if (oldest == NULL) {
    snprintf(error, size, "too many background processes are running (%d); forget some first", MAX_BACKGROUND);
    return -1;
  }
  aproc_drop(oldest);
  return 0;
}

void cmd_async_exec(const struct json *args, struct json **id) {
  char error[1024] = {0};
  struct spawn_request request;
  struct user ids;
  int background, stream, stdin_pipe;
  const char *handle = json_get_string(args, "handle");
  int ok = spawn_arguments(args, &request, error, sizeof error) == 0 &&
           exec_options(args, &request, &ids, &background, &stream, &stdin_pipe, error, sizeof error) == 0;
  if (ok && !handle_valid(handle)) { snprintf(error, sizeof error, "'handle' must be 1 to %d characters of A-Z a-z 0-9 _ -", MAX_HANDLE); ok = 0; }
  if (ok && handle_taken(handle)) { snprintf(error, sizeof error, "handle %s is already in use", handle); ok = 0; }
  if (ok && make_room(background, error, sizeof error) != 0) ok = 0;
  struct aproc *p = ok ? aproc_add(handle) : NULL;
  if (ok && p == NULL) { snprintf(error, sizeof error, "out of memory"); ok = 0; }
  if (!ok) {
    spawn_free(&request);
    reply_error(*id, "GenericError", error);
    return;
  }
  request.capture = 1;
  request.managed = 1;
  /* stdin "null" with input-data: a pipe closed once the data is written. */
  request.stdin_pipe = stdin_pipe;
  p->background = background;
  p->stream = stream;
  p->tty = request.tty;
  p->keep = background || !stream;
  p->stdin_open = stdin_pipe;
  p->path = strdup(request.path);
  p->args_json = args_as_json(&request);
  int exec_errno;
  pid_t failed;
  p->child = process_spawn(&request, &exec_errno, &failed, error, sizeof error);
  spawn_free(&request);
  if (p->child == NULL && exec_errno == 0) { /* a bad user or cwd: an error answer, as in sync mode */
    aproc_drop(p);
    reply_error(*id, "GenericError", error);
    return;
  }
  if (p->child == NULL) {
    /* It could not be executed: a record that finished with 127 or 126 and the reason on stderr, as a shell says. */
    char ignored[64];
    p->child = process_track(1, ignored, sizeof ignored);
    if (p->child == NULL) { aproc_drop(p); reply_error(*id, "GenericError", "out of memory"); return; }
    p->child->pid = failed;
    p->child->max_output = request.max_output;
    p->child->started_ms = now_ms();
  }
  if (!background) {
    p->id = *id; /* answered when it has exited */
    *id = NULL;
  } else {
    struct buffer value = {0};
    buffer_printf(&value, "{\"handle\":\"%s\",\"pid\":%d}", p->handle, (int)p->child->pid);
    reply_value(*id, &value);
    buffer_free(&value);
  }
  if (exec_errno != 0) aproc_finish_unexecuted(p, exec_errno == ENOENT || exec_errno == ENOTDIR ? 127 : 126, error);
}

void cmd_input(const struct json *args, struct json **id) {
  struct aproc *p = find_process(args, *id);
  if (p == NULL) return;
  struct child *c = p->child;
  int eof;
  const struct json *data = json_get(args, "data");
  if (bool_argument(args, "eof", 0, &eof) != 0 || (data != NULL && data->type != JSON_STRING && data->type != JSON_NULL)) {
    refuse(*id, "'data' must be base64 and 'eof' a boolean");
    return;
  }
  if (p->finished || c->exited || c->in_fd < 0 || !p->stdin_open) { refuse(*id, "process %s has no open stdin", p->handle); return; }
  if (p->input_id != NULL) {
    reply_error(*id, "Busy", "a dsec-input to this process is still being written: send the next after its answer");
    return;
  }
  unsigned char *bytes = NULL;
  size_t length = 0;
  if (data != NULL && data->type == JSON_STRING && !base64_decode(data->string, data->length, &bytes, &length)) {
    refuse(*id, "'data' must be base64");
    return;
  }
  if (length > MAX_INPUT_CHUNK) {
    free(bytes);
    refuse(*id, "'data' must be at most 4 MiB");
    return;
  }
  /* A terminal has no end-of-file of its own: eof is its EOF character (^D),
     which ends a read of a program in canonical mode, as typing it would. */
  unsigned char eof_char = p->tty && eof ? pty_eof_char(c->in_fd) : 0;
  int failed = aproc_queue_input(p, bytes, length) != 0 || (eof_char && aproc_queue_input(p, &eof_char, 1) != 0);
  free(bytes);
  if (failed) { reply_error(*id, "GenericError", "out of memory"); return; }
  p->input_eof = eof;
  p->input_id = *id;
  p->input_generation = async_generation;
  *id = NULL;
  aproc_write_stdin(p); /* answers at once when the pipe takes it all */
}

void cmd_signal(const struct json *args, struct json **id) {
  struct aproc *p = find_process(args, *id);
  if (p == NULL) return;
  int64_t number;
  int group;
  if (!json_get_int(args, "signal", 1, 64, &number) || bool_argument(args, "group", 1, &group) != 0) {
    refuse(*id, "'signal' must be an integer from 1 to 64 and 'group' a boolean");
    return;
  }
  if (!p->finished && !p->child->exited) {
    if (group) kill(-p->child->pid, (int)number);
    else kill(p->child->pid, (int)number);
  }
  reply_empty(*id);
}

void cmd_resize(const struct json *args, struct json **id) {
  struct aproc *p = find_process(args, *id);
  if (p == NULL) return;
  int64_t rows, cols;
  if (!json_get_int(args, "rows", 0, 65535, &rows) || !json_get_int(args, "cols", 0, 65535, &cols)) {
    refuse(*id, "'rows' and 'cols' must be integers from 0 to 65535");
    return;
  }
  if (!p->tty) { refuse(*id, "process %s has no terminal", p->handle); return; }
  if (p->child->in_fd >= 0 && pty_resize(p->child->in_fd, (unsigned short)rows, (unsigned short)cols) != 0) {
    refuse(*id, "failed to resize the terminal of %s", p->handle);
    return;
  }
  reply_empty(*id);
}

void cmd_wait(const struct json *args, struct json **id) {
  struct aproc *p = find_process(args, *id);
  if (p == NULL) return;
  int64_t timeout = 0;
  if (json_get(args, "timeout-ms") != NULL && !json_get_int(args, "timeout-ms", 0, 0x7FFFFFFF, &timeout)) {
    refuse(*id, "'timeout-ms' must be an integer from 0 (none) to 2147483647");
    return;
  }
  if (!p->background) { refuse(*id, "process %s is not a background process: its dsec-exec answers when it ends", p->handle); return; }
  if (p->finished) {
    struct buffer result = {0};
    aproc_write_result(&result, p);
    reply_value(*id, &result);
    buffer_free(&result);
    return;
  }
  struct waiter *grown = realloc(p->waiters, (size_t)(p->waiter_count + 1) * sizeof *grown);
  if (grown == NULL) { reply_error(*id, "GenericError", "out of memory"); return; }
  p->waiters = grown;
  p->waiters[p->waiter_count++] = (struct waiter){*id, async_generation, timeout > 0 ? now_ms() + timeout : 0};
  *id = NULL;
}

void cmd_output(const struct json *args, struct json **id) {
  struct aproc *p = find_process(args, *id);
  if (p == NULL) return;
  struct buffer value = {0};
  aproc_write_snapshot(&value, p);
  reply_value(*id, &value);
  buffer_free(&value);
}

void cmd_procs(const struct json *args, struct json **id) {
  (void)args;
  struct buffer value = {0};
  int64_t now = now_ms();
  int first = 1;
  buffer_append_str(&value, "[");
  for (int i = 0; i < aproc_count(); i++) {
    const struct aproc *p = aproc_at(i);
    if (!p->background) continue;
    const struct child *c = p->child;
    buffer_printf(&value, "%s{\"handle\":\"%s\",\"pid\":%d,\"running\":%s", first ? "" : ",", p->handle, (int)c->pid, p->finished ? "false" : "true");
    first = 0;
    if (p->finished && WIFEXITED(c->status)) buffer_printf(&value, ",\"exitcode\":%d", WEXITSTATUS(c->status));
    if (p->finished && WIFSIGNALED(c->status)) buffer_printf(&value, ",\"signal\":%d", WTERMSIG(c->status));
    json_write_key(&value, "path", 0);
    json_write_string(&value, p->path != NULL ? p->path : "", p->path != NULL ? strlen(p->path) : 0);
    buffer_printf(&value, ",\"arg\":%s,\"age-ms\":%lld}", p->args_json != NULL ? p->args_json : "[]", (long long)(now - p->created_ms));
  }
  buffer_append_str(&value, "]");
  reply_value(*id, &value);
  buffer_free(&value);
}

void cmd_forget(const struct json *args, struct json **id) {
  struct aproc *p = find_process(args, *id);
  if (p == NULL) return;
  if (p->background) aproc_drop(p);
  else if (!p->child->exited) process_kill_group(p->child->pid, SIGKILL); /* its dsec-exec answers (signal 9) */
  reply_empty(*id);
}
