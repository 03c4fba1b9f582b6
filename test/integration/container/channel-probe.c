/*
 * A sandbox's attempt on its exec server (PID 1), for
 * test/integration/container/exec-channel.test.ts, compiled statically by
 * the test and written into the sandbox (its busybox has no ptrace tool):
 *
 *   channel-probe   try to ptrace-attach PID 1, read its memory (/proc/1/mem
 *                   and process_vm_readv), take its fds 3 and 4 (the FIFOs to
 *                   the node agent) with pidfd_getfd, open /proc/1/fd/3 and 4
 *                   for reading and writing; prints "<what> ok" or
 *                   "<what> <errno name>" for each
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *errno_name(int code) {
  switch (code) {
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ESRCH: return "ESRCH";
    case ENOENT: return "ENOENT";
    case ENOSYS: return "ENOSYS";
    case EBADF: return "EBADF";
    case ENXIO: return "ENXIO";
    default: return strerror(code);
  }
}

static void report(const char *what, int ok) {
  if (ok) printf("%s ok\n", what);
  else printf("%s %s\n", what, errno_name(errno));
}

int main(void) {
  char byte;
  report("ptrace-attach", ptrace(PTRACE_ATTACH, 1, NULL, NULL) == 0);
  int mem = open("/proc/1/mem", O_RDONLY);
  report("open-mem", mem >= 0);
  struct iovec local = {&byte, 1}, remote = {(void *)0x400000, 1};
  report("vm-readv", syscall(SYS_process_vm_readv, 1, &local, 1, &remote, 1, 0) >= 0);
  int pidfd = (int)syscall(SYS_pidfd_open, 1, 0);
  report("pidfd-open", pidfd >= 0);
  for (int fd = 3; fd <= 4; fd++) {
    char what[32];
    snprintf(what, sizeof what, "getfd-%d", fd);
    report(what, pidfd >= 0 && syscall(SYS_pidfd_getfd, pidfd, fd, 0) >= 0);
    char path[32];
    snprintf(path, sizeof path, "/proc/1/fd/%d", fd);
    snprintf(what, sizeof what, "open-fd-%d-read", fd);
    report(what, open(path, O_RDONLY | O_NONBLOCK) >= 0);
    snprintf(what, sizeof what, "open-fd-%d-write", fd);
    report(what, open(path, O_WRONLY | O_NONBLOCK) >= 0);
  }
  return 0;
}
