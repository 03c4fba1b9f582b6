/* The agent's poll array; see pollset.h. */
#include "pollset.h"

#include <stdlib.h>

void pollset_reset(struct pollset *set) {
  set->count = 0;
  set->failed = 0;
}

int pollset_add(struct pollset *set, int fd, short events) {
  if (fd < 0) return -1;
  if (set->count == set->capacity) {
    int capacity = set->capacity ? set->capacity * 2 : 64;
    struct pollfd *grown = realloc(set->fds, (size_t)capacity * sizeof *grown);
    if (grown == NULL) { set->failed = 1; return -1; }
    set->fds = grown;
    set->capacity = capacity;
  }
  set->fds[set->count] = (struct pollfd){fd, events, 0};
  return set->count++;
}

short pollset_revents(const struct pollset *set, int index) {
  return index >= 0 && index < set->count ? set->fds[index].revents : 0;
}

void timeout_lower(int *timeout_ms, long long ms) {
  if (ms < 0) return;
  if (ms > 0x7FFFFFFF) ms = 0x7FFFFFFF;
  if (*timeout_ms < 0 || ms < *timeout_ms) *timeout_ms = (int)ms;
}
