/*
 * Finding a shell's descendants through /proc, for session interrupts and
 * closes: a process descends from the shell when its chain of parents
 * reaches it, or when it is still in the shell's process group (a child
 * whose parent exited is re-parented to the agent, but keeps its group).
 * Start times (field 22 of /proc/PID/stat, clock ticks since boot) tell
 * which started after a run began.
 */
#ifndef DSEC_GUEST_PROCTREE_H
#define DSEC_GUEST_PROCTREE_H

#include <sys/types.h>

/* Now in the clock ticks /proc/PID/stat start times are in (CLOCK_BOOTTIME). */
unsigned long long proctree_now_ticks(void);
/* Send `signal_number` to every process descending from `root` (never root
   itself) that started at or after `since` ticks (0: all). Returns how many. */
int proctree_signal(pid_t root, unsigned long long since, int signal_number);

#endif
