/*
 * SysV IPC cleanup for dsec-reset: shared memory segments, message queues
 * and semaphore sets outlive the processes that made them, so a task could
 * leave data (or a full queue) for the next one. They belong to the IPC
 * namespace, which the agent owns only when it owns the guest (PID 1).
 */
#ifndef DSEC_GUEST_IPC_H
#define DSEC_GUEST_IPC_H

#include <stddef.h>

/* Remove (IPC_RMID) every SysV IPC object of the agent's IPC namespace, as
   listed by /proc/sysvipc/{shm,msg,sem}. An object owned by another user is
   removed by a child process with that user's effective uid when the agent
   lacks CAP_SYS_ADMIN (a container's root). Returns how many were removed, or -1 with `error`
   filled when one could not be removed or the lists could not be read. */
int ipc_remove_all(char *error, size_t error_size);

#endif
