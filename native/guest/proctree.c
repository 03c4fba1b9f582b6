/* Descendants of a process through /proc; see proctree.h. */
#define _GNU_SOURCE
#include "proctree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct entry {
  pid_t pid, parent, group;
  unsigned long long start;
  int mark; /* 1: a descendant */
};

unsigned long long proctree_now_ticks(void) {
  struct timespec t;
  long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) hz = 100;
  clock_gettime(CLOCK_BOOTTIME, &t); /* what the kernel counts start times from (time namespaces included) */
  return (unsigned long long)t.tv_sec * (unsigned long long)hz + (unsigned long long)t.tv_nsec / (1000000000ull / (unsigned long long)hz);
}

static int read_entry(pid_t pid, struct entry *out) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, line, sizeof line - 1);
  close(fd);
  if (n <= 0) return -1;
  line[n] = 0;
  /* The command name may hold spaces and parentheses: the fields start after the last ')'. */
  char *close_paren = strrchr(line, ')');
  int parent, group;
  char state;
  if (close_paren == NULL ||
      sscanf(close_paren + 2, "%c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &state, &parent, &group, &out->start) != 4)
    return -1;
  if (state == 'Z' || state == 'X') return -1; /* dead already: nothing to signal */
  out->pid = pid;
  out->parent = parent;
  out->group = group;
  out->mark = 0;
  return 0;
}

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const struct entry *)a)->pid, y = ((const struct entry *)b)->pid;
  return (x > y) - (x < y);
}

int proctree_signal(pid_t root, unsigned long long since, int signal_number) {
  DIR *proc = opendir("/proc");
  if (proc == NULL) return 0;
  struct entry *all = NULL;
  size_t count = 0, capacity = 0;
  struct dirent *d;
  while ((d = readdir(proc)) != NULL) {
    pid_t pid = (pid_t)atoi(d->d_name);
    if (pid <= 0) continue;
    if (count == capacity) {
      size_t grown_capacity = capacity ? capacity * 2 : 256;
      struct entry *grown = realloc(all, grown_capacity * sizeof *grown);
      if (grown == NULL) break;
      all = grown;
      capacity = grown_capacity;
    }
    if (read_entry(pid, &all[count]) == 0) count++;
  }
  closedir(proc);
  /* Each process's chain of parents, looked up by pid in the sorted array. */
  qsort(all, count, sizeof *all, by_pid);
  for (size_t i = 0; i < count; i++) {
    if (all[i].pid == root) continue;
    all[i].mark = all[i].group == root;
    const struct entry *at = &all[i];
    for (int depth = 0; !all[i].mark && at != NULL && depth < 256; depth++) {
      if (at->parent == root) all[i].mark = 1;
      struct entry key = {.pid = at->parent};
      at = at->parent > 1 ? bsearch(&key, all, count, sizeof *all, by_pid) : NULL;
    }
  }
  int signalled = 0;
  for (size_t i = 0; i < count; i++)
    if (all[i].mark && all[i].start >= since && kill(all[i].pid, signal_number) == 0) signalled++;
  free(all);
  return signalled;
}
