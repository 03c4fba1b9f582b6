/*
 * Async processes: the records and their servicing by the main loop (see
 * async.h). Output is read in chunks of at most OUTPUT_CHUNK bytes, counted
 * against max-output (kept bytes and streamed bytes alike), kept and/or
 * sent as dsec-output events. When a process exits, what its pipes hold
 * then is read, the answer (foreground) or dsec-exit event (background)
 * goes out, and pipes a descendant still holds linger (linger.c).
 */
#define _GNU_SOURCE
#include "async.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pty.h"
#include "reply.h"

/* How much one round reads from a pipe (fairness between processes), and
   from an exited process's pipes before the rest is left to linger.c (a
   descendant may keep writing for ever). */
#define ROUND_BUDGET (256u * 1024)
#define EXIT_BUDGET (1024u * 1024)

static struct aproc **procs;
static int proc_count, proc_capacity;
static unsigned long next_serial = 1;

int handle_valid(const char *h) {
  size_t n = h != NULL ? strlen(h) : 0;
  if (n == 0 || n > MAX_HANDLE) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = h[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return 0;
  }
  return 1;
}

struct aproc *aproc_find(const char *handle) {
  for (int i = 0; handle != NULL && i < proc_count; i++)
    if (strcmp(procs[i]->handle, handle) == 0) return procs[i];
  return NULL;
}

int aproc_count(void) { return proc_count; }
struct aproc *aproc_at(int index) { return procs[index]; }

struct aproc *aproc_add(const char *handle) {
  if (proc_count == proc_capacity) {
    int capacity = proc_capacity ? proc_capacity * 2 : 64;
    struct aproc **grown = realloc(procs, (size_t)capacity * sizeof *grown);
    if (grown == NULL) return NULL;
    procs = grown;
    proc_capacity = capacity;
  }
  struct aproc *p = calloc(1, sizeof *p);
  if (p == NULL) return NULL;
  snprintf(p->handle, sizeof p->handle, "%s", handle);
  p->serial = next_serial++;
  p->generation = async_generation;
  p->created_ms = now_ms();
  procs[proc_count++] = p;
  return p;
}

void aproc_drop(struct aproc *p) {
  struct child *c = p->child;
  if (c != NULL && !c->exited) process_kill_group(c->pid, SIGKILL);
  linger_close_owner(p->serial);
  process_release(c); /* its pipes closed; the reaper collects the pid */
  json_free(p->id);
  json_free(p->input_id);
  for (int i = 0; i < p->waiter_count; i++) json_free(p->waiters[i].id);
  free(p->waiters);
  free(p->path);
  free(p->args_json);
  for (int i = 0; i < proc_count; i++)
    if (procs[i] == p) { procs[i] = procs[--proc_count]; break; }
  free(p);
}

int aproc_background_count(void) {
  int n = 0;
  for (int i = 0; i < proc_count; i++) n += procs[i]->background;
  return n;
}

struct aproc *aproc_oldest_finished(void) {
  struct aproc *oldest = NULL;
  for (int i = 0; i < proc_count; i++)
    if (procs[i]->background && procs[i]->finished && (oldest == NULL || procs[i]->serial < oldest->serial)) oldest = procs[i];
  return oldest;
}

void output_event(const char *handle, int stream, const char *data, size_t length) {
  struct buffer event = {0};
  buffer_printf(&event, "{\"handle\":\"%s\",\"stream\":\"%s\"", handle, stream ? "stderr" : "stdout");
  write_b64_member(&event, "data", data, length);
  buffer_append_str(&event, "}");
  reply_event("dsec-output", &event);
  buffer_free(&event);
}

/* Output bytes of one stream: counted against max-output, streamed and/or kept. */
static void on_output(struct aproc *p, int stream, const char *data, size_t n) {
  struct child *c = p->child;
  size_t room = c->max_output > p->counted[stream] ? c->max_output - p->counted[stream] : 0;
  size_t keep = n < room ? n : room;
  int *truncated = stream ? &c->err_truncated : &c->out_truncated;
  if (keep < n) *truncated = 1;
  if (keep == 0) return;
  p->counted[stream] += keep;
  if (p->stream && reply_current(p->generation)) output_event(p->handle, stream, data, keep);
  if (p->keep) {
    struct buffer *into = stream ? &c->err : &c->out;
    buffer_append(into, data, keep);
    if (into->failed) *truncated = 1;
  }
}

/* Read up to `budget` bytes. Closes the fd at end-of-file (EIO: a terminal nobody holds any more). */
static void read_stream(struct aproc *p, int stream, int *fd, size_t budget) {
  char chunk[OUTPUT_CHUNK];
  size_t done = 0;
  while (*fd >= 0 && done < budget) {
    ssize_t n = read(*fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { close(*fd); *fd = -1; return; }
    on_output(p, stream, chunk, (size_t)n);
    done += (size_t)n;
    if (p->stream && reply_backpressure()) return;
  }
}

static void answer_input(struct aproc *p, const char *error) {
  if (p->input_id == NULL) return;
  if (reply_current(p->input_generation)) {
    if (error != NULL) reply_error(p->input_id, "GenericError", error);
    else { struct buffer ok = {0}; buffer_append_str(&ok, "{}"); reply_value(p->input_id, &ok); buffer_free(&ok); }
  }
  json_free(p->input_id);
  p->input_id = NULL;
}

int aproc_queue_input(struct aproc *p, const unsigned char *data, size_t length) {
  struct child *c = p->child;
  size_t left = c->input_length - c->input_offset;
  unsigned char *joined = malloc(left + length + 1);
  if (joined == NULL) return -1;
  if (left > 0) memcpy(joined, c->input + c->input_offset, left);
  if (length > 0) memcpy(joined + left, data, length);
  free(c->input);
  c->input = joined;
  c->input_offset = 0;
  c->input_length = left + length;
  return 0;
}

/* Write pending stdin bytes; when done, answer the dsec-input and apply eof. */
void aproc_write_stdin(struct aproc *p) {
  struct child *c = p->child;
  while (c->in_fd >= 0 && c->input_offset < c->input_length) {
    ssize_t n = write(c->in_fd, c->input + c->input_offset, c->input_length - c->input_offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0) { /* EPIPE: the process closed its stdin */
      close(c->in_fd);
      c->in_fd = -1;
      p->stdin_open = 0;
      answer_input(p, "the process closed its stdin");
      return;
    }
    c->input_offset += (size_t)n;
  }
  if (c->in_fd < 0 || c->input_offset < c->input_length) return;
  free(c->input);
  c->input = NULL;
  c->input_length = c->input_offset = 0;
  if (!p->stdin_open || (p->input_eof && !p->tty)) { close(c->in_fd); c->in_fd = -1; p->stdin_open = 0; }
  answer_input(p, NULL);
}

static void write_status(struct buffer *out, const struct child *c) {
  if (WIFEXITED(c->status)) buffer_printf(out, "\"exitcode\":%d", WEXITSTATUS(c->status));
  else buffer_printf(out, "\"exitcode\":null,\"signal\":%d", WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0);
}

static void write_flags(struct buffer *out, const struct child *c) {
  buffer_printf(out, ",\"out-truncated\":%s,\"err-truncated\":%s", c->out_truncated ? "true" : "false", c->err_truncated ? "true" : "false");
}

void aproc_write_result(struct buffer *out, const struct aproc *p) {
  const struct child *c = p->child;
  buffer_printf(out, "{\"pid\":%d,", (int)c->pid);
  write_status(out, c);
  write_b64_member(out, "out-data", c->out.data, c->out.length);
  write_b64_member(out, "err-data", c->err.data, c->err.length);
  write_flags(out, c);
  buffer_printf(out, ",\"timed-out\":%s,\"duration-ms\":%lld}", c->timed_out ? "true" : "false", (long long)c->duration_ms);
}

void aproc_write_snapshot(struct buffer *out, const struct aproc *p) {
  const struct child *c = p->child;
  buffer_printf(out, "{\"running\":%s,\"pid\":%d", p->finished ? "false" : "true", (int)c->pid);
  write_b64_member(out, "out-data", c->out.data, c->out.length);
  write_b64_member(out, "err-data", c->err.data, c->err.length);
  write_flags(out, c);
  if (p->finished) {
    buffer_append_str(out, ",");
    write_status(out, c);
    buffer_printf(out, ",\"timed-out\":%s,\"duration-ms\":%lld", c->timed_out ? "true" : "false", (long long)c->duration_ms);
  }
  buffer_append_str(out, "}");
}

static void answer_waiters(struct aproc *p) {
  struct buffer result = {0};
  aproc_write_result(&result, p);
  for (int i = 0; i < p->waiter_count; i++) {
    if (reply_current(p->waiters[i].generation)) reply_value(p->waiters[i].id, &result);
    json_free(p->waiters[i].id);
  }
  p->waiter_count = 0;
  buffer_free(&result);
}

/* The process exited and its pipes were read: answer or announce it. Returns 1 when the record is gone. */
static int finish(struct aproc *p) {
  struct child *c = p->child;
  p->finished = 1;
  if (!p->background) {
    if (p->id != NULL && reply_current(p->generation)) {
      struct buffer result = {0};
      aproc_write_result(&result, p);
      reply_value(p->id, &result);
      buffer_free(&result);
    }
    aproc_drop(p);
    return 1;
  }
  struct buffer event = {0};
  buffer_printf(&event, "{\"handle\":\"%s\",\"pid\":%d,", p->handle, (int)c->pid);
  write_status(&event, c);
  buffer_printf(&event, ",\"timed-out\":%s", c->timed_out ? "true" : "false");
  write_flags(&event, c);
  buffer_printf(&event, ",\"duration-ms\":%lld}", (long long)c->duration_ms);
  reply_event("dsec-exit", &event); /* to whichever host is connected now */
  buffer_free(&event);
  answer_waiters(p);
  return 0;
}

void aproc_finish_unexecuted(struct aproc *p, int code, const char *message) {
  struct child *c = p->child;
  c->exited = 1;
  c->status = code << 8; /* as waitpid reports exit(code) */
  struct buffer reason = {0};
  buffer_printf(&reason, "dsec-guest: %s\n", message);
  on_output(p, 1, reason.data, reason.length);
  buffer_free(&reason);
  finish(p);
}

/* Exited: read what the pipes hold now, close stdin, leave the rest to linger. */
static int on_exit_of(struct aproc *p) {
  struct child *c = p->child;
  read_stream(p, 0, &c->out_fd, EXIT_BUDGET);
  read_stream(p, 1, &c->err_fd, EXIT_BUDGET);
  if (c->in_fd >= 0) { close(c->in_fd); c->in_fd = -1; }
  p->stdin_open = 0;
  answer_input(p, "the process has exited");
  /* A foreground record goes with its answer: its pipes then belong to nobody
     (owner 0); a background one's are closed by dsec-forget. */
  linger_add(c->out_fd, c->err_fd, p->background ? p->serial : 0);
  c->out_fd = c->err_fd = -1;
  return finish(p);
}

void async_add_pollfds(struct pollset *set, int *timeout_ms) {
  int reading = !reply_backpressure();
  int64_t now = now_ms();
  for (int i = 0; i < proc_count; i++) {
    struct aproc *p = procs[i];
    struct child *c = p->child;
    for (int w = 0; w < p->waiter_count; w++)
      if (p->waiters[w].deadline_ms > 0) timeout_lower(timeout_ms, p->waiters[w].deadline_ms > now ? p->waiters[w].deadline_ms - now : 0);
    c->in_index = c->out_index = c->err_index = -1;
    if (p->finished) continue;
    if (c->exited) { if (reading) timeout_lower(timeout_ms, 0); continue; } /* finish it this round */
    if (c->deadline_ms > 0 && !c->timed_out) timeout_lower(timeout_ms, c->deadline_ms > now ? c->deadline_ms - now : 0);
    if (c->input_offset < c->input_length) c->in_index = pollset_add(set, c->in_fd, POLLOUT);
    if (reading) {
      c->out_index = pollset_add(set, c->out_fd, POLLIN);
      c->err_index = pollset_add(set, c->err_fd, POLLIN);
    }
  }
}

static void expire_waiters(struct aproc *p, int64_t now) {
  for (int w = p->waiter_count; w-- > 0;) {
    if (p->waiters[w].deadline_ms == 0 || now < p->waiters[w].deadline_ms) continue;
    if (reply_current(p->waiters[w].generation)) {
      struct buffer value = {0};
      buffer_append_str(&value, "{\"exited\":false}");
      reply_value(p->waiters[w].id, &value);
      buffer_free(&value);
    }
    json_free(p->waiters[w].id);
    p->waiters[w] = p->waiters[--p->waiter_count];
  }
}

void async_service(const struct pollset *set) {
  int64_t now = now_ms();
  /* Downwards: finish() may drop the record, moving the last one into its place. */
  for (int i = proc_count; i-- > 0;) {
    struct aproc *p = procs[i];
    struct child *c = p->child;
    expire_waiters(p, now);
    if (p->finished) continue;
    if (c->in_fd >= 0 && c->input_offset < c->input_length && !c->exited && pollset_revents(set, c->in_index)) aproc_write_stdin(p);
    if (!reply_backpressure()) {
      if (pollset_revents(set, c->out_index)) read_stream(p, 0, &c->out_fd, ROUND_BUDGET);
      if (pollset_revents(set, c->err_index)) read_stream(p, 1, &c->err_fd, ROUND_BUDGET);
    }
    if (c->exited) {
      /* Under back-pressure the answer waits: it would only grow the queue. */
      if (!reply_backpressure()) on_exit_of(p);
      continue;
    }
    if (c->deadline_ms > 0 && now >= c->deadline_ms && !c->timed_out) {
      c->timed_out = 1;
      process_kill_group(c->pid, SIGKILL);
    }
  }
}

int async_end_host(void) {
  int killed = 0;
  for (int i = proc_count; i-- > 0;) {
    struct aproc *p = procs[i];
    if (!p->background) {
      if (!p->child->exited) killed++;
      aproc_drop(p); /* SIGKILL to its group; its answer is never sent */
      continue;
    }
    p->stream = 0;
    json_free(p->input_id);
    p->input_id = NULL;
    for (int w = 0; w < p->waiter_count; w++) json_free(p->waiters[w].id);
    p->waiter_count = 0;
  }
  return killed;
}
