/*
 * The byte stream requests arrive on: a serial device (a virtio port such as
 * /dev/vport0p1, found by name with "auto") or a unix socket the agent
 * listens on, serving one connection at a time. Requests are lines; a 0xFF
 * byte drops whatever came before it on the line (QGA's resync marker).
 */
#ifndef DSEC_GUEST_TRANSPORT_H
#define DSEC_GUEST_TRANSPORT_H

#include <poll.h>
#include <stdint.h>
#include "json.h"

/* The longest request line; longer ones are dropped with an error answer. The
   host client sends files in chunks of a few MiB; this bounds a guest's memory. */
#define MAX_REQUEST_LINE (32u * 1024 * 1024)
#define QGA_PORT_NAME "org.qemu.guest_agent.0"

struct transport {
  int serial;       /* 1: a serial device; 0: a listening unix socket */
  const char *path; /* as given ("auto" for the virtio port by name) */
  int fd;           /* the device or the accepted connection; -1: none */
  int listen_fd;
  int64_t quiet_until; /* a serial port whose host side is away is not polled until then */
  struct buffer in;
  size_t scanned;      /* bytes of `in` known to hold no newline */
  int discarding;      /* dropping the rest of an over-long line */
  int too_long;        /* an over-long line was dropped: answer it once */
};

/* Open the device or start listening. Returns 0, or -1 with a message on stderr. */
int transport_open(struct transport *t, int serial, const char *path);
/* The descriptor to poll now (returns 0 when there is none, and lowers
   *timeout_ms to when there may be one). */
int transport_pollfd(struct transport *t, struct pollfd *fd, int *timeout_ms);
/* poll() said the descriptor is ready: accept, or read into the line buffer. */
void transport_ready(struct transport *t, short revents);
/* The next complete line (0xFF and CR handled), valid until transport_consume(). */
int transport_next_line(struct transport *t, char **line, size_t *length, size_t *consume);
void transport_consume(struct transport *t, size_t count);
/* Send all of data, waiting a bounded time for a slow peer. Returns 0 or -1 (dropped). */
int transport_send(struct transport *t, const char *data, size_t length);

#endif
