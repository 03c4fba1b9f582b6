/* The agent's outgoing queue; see queue.h. */
#define _GNU_SOURCE
#include "queue.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct queue_entry {
  struct queue_entry *next;
  int event;
  size_t length;
  char data[];
};

static void unlink_entry(struct queue *q, struct queue_entry *prev, struct queue_entry *entry) {
  if (prev == NULL) q->head = entry->next;
  else prev->next = entry->next;
  if (q->tail == entry) q->tail = prev;
  q->bytes -= entry->length;
  free(entry);
}

/* Drop the oldest events (never the head once it is half written: the host
   would see a cut line) until `needed` more bytes fit under the hard cap. */
static void make_room(struct queue *q, size_t needed) {
  struct queue_entry *prev = NULL, *entry = q->head;
  if (entry != NULL && q->head_sent > 0) { prev = entry; entry = entry->next; }
  while (entry != NULL && q->bytes + needed > QUEUE_HARD_CAP) {
    struct queue_entry *next = entry->next;
    if (entry->event) {
      unlink_entry(q, prev, entry);
      if (q->dropped_events++ % 1000 == 0) fprintf(stderr, "dsec-guest: the host is not reading: %llu event(s) dropped\n", q->dropped_events);
    } else {
      prev = entry;
    }
    entry = next;
  }
}

void queue_push(struct queue *q, const char *data, size_t length, int event) {
  if (length == 0) return;
  if (event && q->bytes + length > QUEUE_HARD_CAP) {
    make_room(q, length);
    if (q->bytes + length > QUEUE_HARD_CAP) { q->dropped_events++; return; } /* answers fill it: drop this one */
  }
  struct queue_entry *entry = malloc(sizeof *entry + length);
  if (entry == NULL) { fprintf(stderr, "dsec-guest: out of memory queueing %zu bytes: dropped\n", length); return; }
  entry->next = NULL;
  entry->event = event;
  entry->length = length;
  memcpy(entry->data, data, length);
  if (q->tail != NULL) q->tail->next = entry;
  else q->head = entry;
  q->tail = entry;
  q->bytes += length;
}

int queue_flush(struct queue *q, int fd) {
  while (q->head != NULL) {
    struct queue_entry *entry = q->head;
    ssize_t n = write(fd, entry->data + q->head_sent, entry->length - q->head_sent);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return 0;
    if (n <= 0) return -1;
    q->head_sent += (size_t)n;
    if (q->head_sent < entry->length) continue;
    q->head_sent = 0;
    unlink_entry(q, NULL, entry);
  }
  return 0;
}

void queue_clear(struct queue *q) {
  while (q->head != NULL) unlink_entry(q, NULL, q->head);
  q->head_sent = 0;
}

int queue_empty(const struct queue *q) { return q->head == NULL; }

int queue_over_high_water(const struct queue *q) { return q->bytes > QUEUE_HIGH_WATER; }
