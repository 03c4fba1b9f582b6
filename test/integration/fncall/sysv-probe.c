/*
 * A task's tool for test/integration/fncall/isolation.test.ts, compiled
 * statically by the test and sent as a task file (the workers' busybox has
 * neither ipcmk nor ptrace):
 *
 *   sysv-probe make       make a SysV shared memory segment (left attached by
 *                         a background process), a message queue, a semaphore
 *                         set, and a message queue of uid 1234; prints "made 4"
 *   sysv-probe reach PID  try to read /proc/PID/environ, open /proc/PID/mem,
 *                         take fd 0 with pidfd_getfd and ptrace-attach PID;
 *                         prints "<what> ok" or "<what> <errno name>" each
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/msg.h>
#include <sys/ptrace.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what) {
  perror(what);
  exit(1);
}

static int make(void) {
  int segment = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
  if (segment < 0 || shmat(segment, NULL, 0) == (void *)-1) fail("shm");
  if (fork() == 0) { /* keeps the segment attached */
    setsid();
    for (;;) pause();
  }
  if (msgget(IPC_PRIVATE, IPC_CREAT | 0600) < 0) fail("msgget");
  if (semget(IPC_PRIVATE, 3, IPC_CREAT | 0600) < 0) fail("semget");
  pid_t other = fork();
  if (other == 0) {
    if (setgid(1234) != 0 || setuid(1234) != 0) fail("setuid");
    _exit(msgget(IPC_PRIVATE, IPC_CREAT | 0600) < 0);
  }
  int status;
  if (waitpid(other, &status, 0) != other || status != 0) fail("msgget as uid 1234");
  printf("made 4\n");
  return 0;
}

static void report(const char *what, int ok) {
  const char *name = errno == EACCES ? "EACCES" : errno == EPERM ? "EPERM" : strerror(errno);
  printf("%s %s\n", what, ok ? "ok" : name);
}

static int reach(pid_t pid) {
  char path[64], bytes[16];
  snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
  int fd = open(path, O_RDONLY);
  report("environ", fd >= 0 && read(fd, bytes, sizeof bytes) >= 0);
  snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
  report("mem", open(path, O_RDONLY) >= 0);
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  report("pidfd_getfd", pidfd >= 0 && syscall(SYS_pidfd_getfd, pidfd, 0, 0) >= 0);
  int attached = ptrace(PTRACE_ATTACH, pid, NULL, NULL) == 0;
  report("ptrace", attached);
  if (attached) ptrace(PTRACE_DETACH, pid, NULL, NULL);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "make") == 0) return make();
  if (argc == 3 && strcmp(argv[1], "reach") == 0) return reach((pid_t)atoi(argv[2]));
  fprintf(stderr, "usage: sysv-probe make | reach PID\n");
  return 2;
}
