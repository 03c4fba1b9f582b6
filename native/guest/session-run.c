/*
 * A session's runs (see session-run.h): the wrapper written to the shell, the
 * markers its output is cut at, the answer, and interrupts. The markers
 * carry a nonce of 16 random hex characters per run (getrandom), so the
 * command cannot end its run early by printing a marker of its own unless
 * it reads the shell's pending input; a command that does only confuses
 * its own session.
 */
#define _GNU_SOURCE
#include "session-run.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include "exec.h"
#include "proctree.h"
#include "reply.h"

enum { NO_MATCH, PARTIAL, FULL };

/* Whether text[0..left) is the marker (FULL, with its length and status), a start of it cut by the end (PARTIAL), or not. */
static int match_marker(const char *text, size_t left, const char *nonce, int with_status, size_t *length, int *status) {
  size_t at = 0;
  const char *expected[2] = {"\n\036", nonce};
  for (int part = 0; part < 2; part++)
    for (const char *e = expected[part]; *e; e++, at++) {
      if (at >= left) return PARTIAL;
      if (text[at] != *e) return NO_MATCH;
    }
  int value = 0;
  if (with_status) {
    if (at >= left) return PARTIAL;
    if (text[at++] != ' ') return NO_MATCH;
    int digits = 0;
    for (; at < left && text[at] >= '0' && text[at] <= '9'; at++) {
      if (++digits > 3) return NO_MATCH;
      value = value * 10 + (text[at] - '0');
    }
    if (at >= left) return PARTIAL;
    if (digits == 0) return NO_MATCH;
  }
  if (at >= left) return PARTIAL;
  if (text[at++] != '\036') return NO_MATCH;
  if (at >= left) return PARTIAL;
  if (text[at++] != '\n') return NO_MATCH;
  *length = at;
  *status = value;
  return FULL;
}

/* Output that belongs to the command: counted against max-output, streamed or kept, in events of at most OUTPUT_CHUNK. */
static void emit(struct session *s, int stream, const char *data, size_t n) {
  struct run_stream *r = &s->out[stream];
  size_t room = s->max_output > r->counted ? s->max_output - r->counted : 0;
  size_t keep = n < room ? n : room;
  if (keep < n) r->truncated = 1;
  r->counted += keep;
  if (!s->stream) {
    buffer_append(&r->kept, data, keep);
    if (r->kept.failed) r->truncated = 1;
    return;
  }
  for (size_t at = 0; at < keep && reply_current(s->generation); at += OUTPUT_CHUNK)
    output_event(s->handle, stream, data + at, keep - at < OUTPUT_CHUNK ? keep - at : OUTPUT_CHUNK);
}

void run_output(struct session *s, int stream, const char *data, size_t n) {
  static char scan[OUTPUT_CHUNK + MARKER_MAX];
  struct run_stream *r = &s->out[stream];
  while (n > 0) {
    /* The held-back tail, then as much of the new data as fits. */
    size_t take = n < OUTPUT_CHUNK ? n : OUTPUT_CHUNK;
    memcpy(scan, r->hold, r->hold_length);
    memcpy(scan + r->hold_length, data, take);
    size_t total = r->hold_length + take;
    r->hold_length = 0;
    data += take;
    n -= take;
    size_t emit_to = total;
    for (const char *at = memchr(scan, '\n', total); at != NULL; at = memchr(at + 1, '\n', (size_t)(scan + total - at - 1))) {
      size_t length;
      int status;
      int m = match_marker(at, (size_t)(scan + total - at), s->nonce, stream == 0, &length, &status);
      if (m == NO_MATCH) continue;
      emit_to = (size_t)(at - scan);
      if (m == FULL) {
        emit(s, stream, scan, emit_to);
        r->marker_seen = 1; /* what follows the marker is not the command's (a background job's): dropped */
        if (stream == 0) s->status = status;
        return;
      }
      break; /* a marker may be starting: hold it back until more comes */
    }
    emit(s, stream, scan, emit_to);
    r->hold_length = total - emit_to;
    memcpy(r->hold, scan + emit_to, r->hold_length);
  }
}

static void clear_run(struct session *s) {
  json_free(s->id);
  s->id = NULL;
  for (int i = 0; i < 2; i++) {
    buffer_free(&s->out[i].kept);
    memset(&s->out[i], 0, sizeof s->out[i]);
  }
  s->busy = 0;
  s->stage = 0;
  s->interrupted = s->timed_out = 0;
}

void run_finish(struct session *s) {
  /* A stream without its marker (the shell ended): what was held back in case a marker began there is output. */
  for (int i = 0; i < 2; i++)
    if (!s->out[i].marker_seen && s->out[i].hold_length > 0) {
      size_t held = s->out[i].hold_length;
      s->out[i].hold_length = 0;
      emit(s, i, s->out[i].hold, held);
    }
  if (s->id != NULL && reply_current(s->generation)) {
    struct buffer value = {0};
    const struct child *c = s->child;
    int complete = s->out[0].marker_seen && s->out[1].marker_seen;
    /* The status the shell printed; when it ended first, its own exit code (`exit 3`), or null when it was killed. */
    if (complete) buffer_printf(&value, "{\"exitcode\":%d", s->status);
    else if (c->exited && WIFEXITED(c->status)) buffer_printf(&value, "{\"exitcode\":%d", WEXITSTATUS(c->status));
    else buffer_append_str(&value, "{\"exitcode\":null");
    write_b64_member(&value, "out-data", s->out[0].kept.data, s->out[0].kept.length);
    write_b64_member(&value, "err-data", s->out[1].kept.data, s->out[1].kept.length);
    buffer_printf(&value, ",\"out-truncated\":%s,\"err-truncated\":%s,\"timed-out\":%s,\"interrupted\":%s,\"ended\":%s,\"duration-ms\":%lld}",
                  s->out[0].truncated ? "true" : "false", s->out[1].truncated ? "true" : "false", s->timed_out ? "true" : "false",
                  s->interrupted ? "true" : "false", !complete && s->ended ? "true" : "false", (long long)(now_ms() - s->started_ms));
    reply_value(s->id, &value);
    buffer_free(&value);
  }
  clear_run(s);
}

/* 16 hex characters from getrandom (never blocking for long: early in a VM's boot the pool may not be ready). */
void run_make_nonce(char *out) {
  unsigned char bytes[NONCE_LENGTH / 2];
  ssize_t n = getrandom(bytes, sizeof bytes, GRND_NONBLOCK);
  if (n != (ssize_t)sizeof bytes) n = getrandom(bytes, sizeof bytes, 0x0004 /* GRND_INSECURE, Linux 5.6 */);
  if (n != (ssize_t)sizeof bytes) n = getrandom(bytes, sizeof bytes, 0);
  for (size_t i = 0; i < sizeof bytes; i++) sprintf(out + 2 * i, "%02x", bytes[i]);
  out[NONCE_LENGTH] = 0;
}

void run_interrupt(struct session *s, int timed_out) {
  if (!s->busy) return;
  if (timed_out) s->timed_out = 1;
  if (s->stage > 0) return; /* already under way */
  s->interrupted = 1;
  s->stage = 1;
  s->stage_ms = now_ms();
  /* Only what the run started, never the shell: the session keeps its state. */
  proctree_signal(s->child->pid, s->start_ticks, SIGINT);
}

void run_timers(struct session *s, int64_t now, int *timeout_ms) {
  if (!s->busy || s->child->exited) return;
  if (s->stage == 0 && s->deadline_ms > 0) {
    if (now >= s->deadline_ms) run_interrupt(s, 1);
    else timeout_lower(timeout_ms, s->deadline_ms - now);
  }
  if (s->stage == 0 || s->stage == 3) return;
  int64_t next = s->stage_ms + INTERRUPT_STEP_MS;
  if (now < next) { timeout_lower(timeout_ms, next - now); return; }
  if (s->stage == 1) {
    proctree_signal(s->child->pid, s->start_ticks, SIGKILL); /* those still alive, and any started meanwhile */
  } else {
    /* The markers have not come: the shell itself is stuck (a loop of builtins). */
    kill(s->child->pid, SIGKILL);
  }
  s->stage++;
  s->stage_ms = now;
  if (s->stage < 3) timeout_lower(timeout_ms, INTERRUPT_STEP_MS);
}
