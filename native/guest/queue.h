/*
 * The outgoing queue: every answer and event line goes here first and is
 * written to the transport as it accepts bytes, so the agent never blocks on
 * a host that reads slowly or not at all (a node agent restarting). Its size
 * drives back-pressure: over QUEUE_HIGH_WATER the main loop stops reading
 * process output and requests (the processes writing output stall in their
 * full pipes, the agent's memory does not grow). Past QUEUE_HARD_CAP, which
 * only events produced regardless of back-pressure can reach (exit events,
 * a process's last output), the oldest whole events are dropped; answers
 * never are.
 */
#ifndef DSEC_GUEST_QUEUE_H
#define DSEC_GUEST_QUEUE_H

#include <stddef.h>

#define QUEUE_HIGH_WATER (4u * 1024 * 1024)
#define QUEUE_HARD_CAP (64u * 1024 * 1024)

struct queue_entry;

struct queue {
  struct queue_entry *head, *tail;
  size_t bytes;             /* queued (the head counted whole until it is all sent) */
  size_t head_sent;         /* bytes of the head already written */
  unsigned long long dropped_events;
};

/* Queue a copy of one line (an event when `event`, else an answer). */
void queue_push(struct queue *q, const char *data, size_t length, int event);
/* Write what the fd takes now. Returns 0 (all written, or the fd is full), -1
   when the fd failed (EPIPE, a reset): the caller drops the peer. */
int queue_flush(struct queue *q, int fd);
/* Drop everything unsent (a line half written included). */
void queue_clear(struct queue *q);
int queue_empty(const struct queue *q);
int queue_over_high_water(const struct queue *q);

#endif
