/*
 * Lingering pipes (see async.h): when an async process exits while a
 * descendant still holds its stdout/stderr (`cmd &`, `nohup cmd &`), the
 * answer goes out at once and the pipes stay open here, drained and the
 * bytes dropped, until their last writer closes them. Closing them instead
 * would kill that descendant with SIGPIPE at its next write; not reading
 * them would block it once the pipe is full. At most MAX_LINGERING pairs:
 * past that the oldest is closed.
 */
#define _GNU_SOURCE
#include "async.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINGERING 256

struct lingering {
  int fds[2];
  int index[2];
  unsigned long owner;
};

/* In order of arrival: the oldest first. */
static struct lingering pairs[MAX_LINGERING];
static int pair_count;

static void close_pair(int at) {
  for (int i = 0; i < 2; i++)
    if (pairs[at].fds[i] >= 0) close(pairs[at].fds[i]);
  memmove(&pairs[at], &pairs[at + 1], (size_t)(pair_count - at - 1) * sizeof pairs[0]);
  pair_count--;
}

void linger_add(int out_fd, int err_fd, unsigned long owner) {
  if (out_fd < 0 && err_fd < 0) return;
  if (pair_count == MAX_LINGERING) close_pair(0);
  pairs[pair_count++] = (struct lingering){{out_fd, err_fd}, {-1, -1}, owner};
}

void linger_close_owner(unsigned long owner) {
  for (int i = pair_count; i-- > 0;)
    if (pairs[i].owner == owner) close_pair(i);
}

void linger_add_pollfds(struct pollset *set) {
  for (int i = 0; i < pair_count; i++)
    for (int j = 0; j < 2; j++) pairs[i].index[j] = pollset_add(set, pairs[i].fds[j], POLLIN);
}

void linger_service(const struct pollset *set) {
  static char sink[65536];
  for (int i = pair_count; i-- > 0;) {
    for (int j = 0; j < 2; j++) {
      int *fd = &pairs[i].fds[j];
      if (*fd < 0 || !pollset_revents(set, pairs[i].index[j])) continue;
      /* A bounded drain per round: a writer that never stops must not hold the loop. */
      for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = read(*fd, sink, sizeof sink);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        close(*fd); /* end-of-file: the last writer is gone (EIO: a terminal's last holder) */
        *fd = -1;
        break;
      }
    }
    if (pairs[i].fds[0] < 0 && pairs[i].fds[1] < 0) close_pair(i);
  }
}
