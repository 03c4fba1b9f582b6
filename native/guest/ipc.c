/* SysV IPC cleanup of the guest agent; see ipc.h. */
#define _GNU_SOURCE
#include "ipc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

enum ipc_kind { KIND_SHM, KIND_MSG, KIND_SEM };

static const struct {
  const char *list;    /* under /proc/sysvipc */
  const char *id_name; /* the id's column in its header */
  const char *what;    /* for messages */
} KINDS[] = {
    [KIND_SHM] = {"/proc/sysvipc/shm", "shmid", "shared memory segment"},
    [KIND_MSG] = {"/proc/sysvipc/msg", "msqid", "message queue"},
    [KIND_SEM] = {"/proc/sysvipc/sem", "semid", "semaphore set"},
};

#define MAX_COLUMNS 32

static int remove_object(enum ipc_kind kind, int id) {
  switch (kind) {
  case KIND_SHM: return shmctl(id, IPC_RMID, NULL);
  case KIND_MSG: return msgctl(id, IPC_RMID, NULL);
  default: return semctl(id, 0, IPC_RMID);
  }
}

/* In a child, as `uid`: switching the agent's own effective uid would clear its
   parent-death signal and reset its dumpability (commit_creds), and a failed
   switch back would leave it as that user. Returns 0, or -1 with errno. */
static int remove_as_user(enum ipc_kind kind, int id, uid_t uid) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (seteuid(uid) != 0) _exit(errno);
    _exit(remove_object(kind, id) == 0 ? 0 : errno);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  errno = WIFEXITED(status) ? WEXITSTATUS(status) : EPERM;
  return -1;
}

/* IPC_RMID is allowed to the object's owner or creator, or with CAP_SYS_ADMIN,
   which a container's root lacks: then it is done as the owner (root may take
   any uid). Returns 0, or -1 with errno. */
static int remove_as_owner(enum ipc_kind kind, int id, uid_t owner, uid_t creator) {
  if (remove_object(kind, id) == 0) return 0;
  if (errno != EPERM || geteuid() != 0) return -1;
  uid_t candidates[2] = {owner, creator};
  for (int i = 0; i < 2; i++) {
    if (candidates[i] == 0 || (i == 1 && creator == owner)) continue;
    if (remove_as_user(kind, id, candidates[i]) == 0) return 0;
  }
  errno = EPERM;
  return -1;
}

/* Column index of `name` in a /proc/sysvipc header, or -1. */
static int column_of(char *header, const char *name) {
  int index = 0;
  for (char *save = NULL, *token = strtok_r(header, " \t\n", &save); token != NULL; token = strtok_r(NULL, " \t\n", &save), index++)
    if (strcmp(token, name) == 0) return index;
  return -1;
}

static int remove_kind(enum ipc_kind kind, int *removed, char *error, size_t size) {
  FILE *list = fopen(KINDS[kind].list, "re");
  if (list == NULL) {
    /* /proc is there but the list is not: a kernel without SysV IPC, so there is nothing to remove. */
    if (errno == ENOENT && access("/proc/self/stat", F_OK) == 0) return 0;
    snprintf(error, size, "cannot list the SysV IPC objects (%s): %s", KINDS[kind].list, strerror(errno));
    return -1;
  }
  char line[1024], copy[sizeof line];
  if (fgets(line, sizeof line, list) == NULL) { fclose(list); return 0; }
  memcpy(copy, line, sizeof line);
  int id_at = column_of(copy, KINDS[kind].id_name);
  memcpy(copy, line, sizeof line);
  int uid_at = column_of(copy, "uid");
  memcpy(copy, line, sizeof line);
  int cuid_at = column_of(copy, "cuid");
  if (id_at < 0) {
    snprintf(error, size, "cannot read the SysV IPC list %s: no %s column", KINDS[kind].list, KINDS[kind].id_name);
    fclose(list);
    return -1;
  }
  int result = 0;
  while (result == 0 && fgets(line, sizeof line, list) != NULL) {
    long columns[MAX_COLUMNS];
    int count = 0;
    char *at = line, *end;
    while (count < MAX_COLUMNS) {
      long value = strtol(at, &end, 10);
      if (end == at) break;
      columns[count++] = value;
      at = end;
    }
    if (id_at >= count) continue;
    int id = (int)columns[id_at];
    uid_t owner = uid_at >= 0 && uid_at < count ? (uid_t)columns[uid_at] : 0;
    uid_t creator = cuid_at >= 0 && cuid_at < count ? (uid_t)columns[cuid_at] : 0;
    if (remove_as_owner(kind, id, owner, creator) == 0) (*removed)++;
    else if (errno != EINVAL && errno != EIDRM) { /* those: already gone */
      snprintf(error, size, "cannot remove the SysV %s %d (owner uid %u): %s", KINDS[kind].what, id, (unsigned)owner, strerror(errno));
      result = -1;
    }
  }
  fclose(list);
  return result;
}

int ipc_remove_all(char *error, size_t error_size) {
  int removed = 0;
  for (enum ipc_kind kind = KIND_SHM; kind <= KIND_SEM; kind++)
    if (remove_kind(kind, &removed, error, error_size) != 0) return -1;
  return removed;
}
