/*
 * Killing every other process for dsec-reset: as PID 1 (of a VM or a pid
 * namespace) everything but the agent; elsewhere only what it started.
 * See process.h.
 */
#define _GNU_SOURCE
#include "process.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PF_KTHREAD 0x00200000 /* a kernel thread (include/linux/sched.h): no signal reaches it */

/* Read a process's parent, state and flags from /proc/PID/stat. Returns 0, or -1 when it is gone. */
static int read_stat(int pid, int *parent, char *state, unsigned *flags) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *file = fopen(path, "re");
  if (file == NULL) return -1;
  char *got = fgets(line, sizeof line, file);
  fclose(file);
  /* The command name may hold spaces and parentheses: the fields start after the last ')'. */
  char *close_paren = got != NULL ? strrchr(line, ')') : NULL;
  if (close_paren == NULL || sscanf(close_paren + 2, "%c %d %*d %*d %*d %*d %u", state, parent, flags) != 3) return -1;
  return 0;
}

/* Every process of /proc but us and the kernel's threads; with `only_descendants`, those whose parent chain reaches us. */
static int kill_visible(int only_descendants) {
  int self = (int)getpid();
  int killed = 0;
  DIR *proc = opendir("/proc");
  if (proc == NULL) return 0;
  struct dirent *entry;
  while ((entry = readdir(proc)) != NULL) {
    int pid = atoi(entry->d_name);
    int parent;
    char state;
    unsigned flags;
    if (pid <= 1 || pid == self || read_stat(pid, &parent, &state, &flags) != 0) continue;
    if ((flags & PF_KTHREAD) || state == 'Z' || state == 'X') continue;
    int ours = !only_descendants;
    for (int at = parent, depth = 0; !ours && at > 1 && depth < 64; depth++) {
      if (at == self) ours = 1;
      else if (read_stat(at, &at, &state, &flags) != 0) break;
    }
    if (ours && kill(pid, SIGKILL) == 0) killed++;
  }
  closedir(proc);
  return killed;
}

int process_kill_all(void) {
  /* As PID 1 (of a VM or a pid namespace) everyone else is ours to kill; otherwise
     (a test on the host) only what we started, never the host's processes. */
  int everyone = getpid() == 1;
  int killed = kill_visible(!everyone);
  if (everyone) kill(-1, SIGKILL); /* also what /proc does not show (not mounted, or forked meanwhile) */
  /* Wait until they are gone: reaping each (recording tracked ones' statuses). */
  int64_t deadline = now_ms() + 5000;
  int reaped = 0;
  while (now_ms() < deadline) {
    reaped += process_reap();
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD) break;
    kill_visible(!everyone); /* anything forked while the first pass ran */
    usleep(2000);
  }
  /* Every tracked process is gone now, its output pipes with it. */
  process_close_pipes();
  return killed > 0 ? killed : reaped; /* no /proc: count what was reaped */
}
