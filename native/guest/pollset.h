/*
 * The descriptors one poll() call watches, in a growable array: the agent
 * may watch well over a thousand (three pipes per process, sessions,
 * lingering pipes), so no fixed-size array. Each module adds its fds every
 * round and keeps the index pollset_add returned to read revents back in
 * O(1), instead of searching the array per fd.
 */
#ifndef DSEC_GUEST_POLLSET_H
#define DSEC_GUEST_POLLSET_H

#include <poll.h>

struct pollset {
  struct pollfd *fds;
  int count;
  int capacity;
  int failed; /* out of memory: the fds that did not fit are not watched this round */
};

/* Start a new round (keeps the allocation). */
void pollset_reset(struct pollset *set);
/* Watch fd for events. Returns its index, or -1 (fd < 0, or no memory). */
int pollset_add(struct pollset *set, int fd, short events);
/* What poll() reported for the fd at `index` (0 for -1 or before a poll). */
short pollset_revents(const struct pollset *set, int index);
/* Lower *timeout_ms (-1: none) to `ms` when that is sooner; ms < 0 means no deadline. */
void timeout_lower(int *timeout_ms, long long ms);

#endif
