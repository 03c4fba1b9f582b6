/*
 * The byte stream requests arrive on: a serial device (a virtio port such as
 * /dev/vport0p1, found by name with "auto"), a unix socket the agent listens
 * on (serving one connection at a time), or two inherited descriptors
 * (--fds IN,OUT: the FIFO pair of a container sandbox, opened read-write by
 * its launcher). Requests are lines; a 0xFF byte drops whatever came before
 * it on the line (QGA's resync marker). Everything sent goes through the
 * outgoing queue (queue.h), so sending never blocks.
 */
#ifndef DSEC_GUEST_TRANSPORT_H
#define DSEC_GUEST_TRANSPORT_H

#include <stdint.h>
#include "json.h"
#include "pollset.h"
#include "queue.h"

/* The longest request line; longer ones are dropped with an error answer. The
   host client sends files in chunks of a few MiB; this bounds a guest's memory. */
#define MAX_REQUEST_LINE (32u * 1024 * 1024)
#define QGA_PORT_NAME "org.qemu.guest_agent.0"

enum transport_kind { TRANSPORT_SOCKET, TRANSPORT_SERIAL, TRANSPORT_FDS };

struct transport {
  enum transport_kind kind;
  const char *path;  /* as given ("auto" for the virtio port by name) */
  int fd;            /* read side: the device, the accepted connection or IN; -1: none */
  int out_fd;        /* write side: the same descriptor, or OUT */
  int listen_fd;
  int in_eof;        /* --fds: IN read end-of-file (a plain pipe whose writers left): no longer polled */
  int out_broken;    /* --fds: OUT failed for good (EPIPE): what is sent is dropped */
  unsigned connection; /* +1 per accepted connection: a new host, in sync mode until its hello */
  int64_t quiet_until; /* a serial port whose host side is away is not polled until then */
  struct buffer in;
  size_t scanned;      /* bytes of `in` known to hold no newline */
  int discarding;      /* dropping the rest of an over-long line */
  int too_long;        /* an over-long line was dropped: answer it once */
  struct queue queue;
  int in_index, out_index; /* in this round's pollset */
};

/* Open the device or start listening (serial 1: a device). Returns 0, or -1 with a message on stderr. */
int transport_open(struct transport *t, int serial, const char *path);
/* Take over inherited descriptors IN and OUT. Returns 0, or -1 with a message on stderr. */
int transport_open_fds(struct transport *t, int in_fd, int out_fd);
/* Add this round's descriptors: the read side when `reading` (requests are
   wanted now), the write side while the queue holds bytes. May lower
   *timeout_ms (a serial port to look at again later). */
void transport_add_pollfds(struct transport *t, struct pollset *set, int *timeout_ms, int reading);
/* After poll(): accept, read into the line buffer, write queued bytes. */
void transport_ready(struct transport *t, const struct pollset *set);
/* The next complete line (0xFF and CR handled), valid until transport_consume(). */
int transport_next_line(struct transport *t, char **line, size_t *length, size_t *consume);
void transport_consume(struct transport *t, size_t count);
/* Queue one line (an event when `event`: droppable past the hard cap) and write what the peer takes now. */
void transport_send(struct transport *t, const char *data, size_t length, int event);

#endif
