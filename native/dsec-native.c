/*
 * dsec-native: the few kernel calls the node agent needs that Node cannot make.
 *
 *   dsec-native spawn [--merge] [--sched-idle] [--core-sched] -- CMD ARGS...
 *       Give this process the requested attributes, then exec CMD. Every one
 *       of them is inherited at fork and kept across exec, so CMD (runc) and
 *       everything it starts (runc init, the sandbox's processes) has them.
 *       A requested attribute that cannot be set is an error (exit 125, CMD
 *       never runs): a sandbox never silently starts without what it asked for.
 *         --merge       prctl(PR_SET_MEMORY_MERGE, 1): KSM may merge every
 *                       anonymous page of the process and its children.
 *         --sched-idle  sched_setscheduler(SCHED_IDLE): run only on CPU time
 *                       nobody else wants.
 *         --core-sched  prctl(PR_SCHED_CORE, CREATE, thread group): a fresh
 *                       core-scheduling cookie, so tasks of other cookies never
 *                       share an SMT core with these.
 *
 *   dsec-native probe
 *       One JSON line saying which of the three this kernel and machine
 *       allow: {"memoryMerge":{"ok":true},"schedIdle":...,"coreScheduling":
 *       {"ok":false,"reason":"..."}}. Each is tried in a forked child, so the
 *       caller keeps its own attributes.
 *
 *   dsec-native prefetch PID...
 *       Ask the kernel to read back (swap in, page in) every mapping of each
 *       process: process_madvise(MADV_WILLNEED) over the ranges of
 *       /proc/PID/maps. Prints {"advisedBytes":N,"errors":[...]}; exits 0
 *       even when some ranges failed (a process may exit or unmap meanwhile).
 *
 *   dsec-native file-read --root DIR --path P --max N
 *   dsec-native file-write --root DIR --path P [--mode OCTAL] [--uid U --gid G]
 *       One file inside a sandbox whose root is DIR (/proc/<init pid>/root):
 *       every lookup by openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) on
 *       a dirfd of DIR, so nothing planted inside leads out of it. file-read
 *       copies a regular file of at most N bytes to stdout; file-write
 *       creates the parents (mkdir -p, owned by U:G), never follows a
 *       symlink as the last component, and replaces the regular file there
 *       (new ones owned by U:G) with stdin, then prints {"size":N}. Exit 3:
 *       no such file; 4: bigger than N ("size S" on stderr); 5: not a
 *       regular file, a symlink refused, a read-only file system; 1: other
 *       failures; stderr says which.
 *
 * Built by scripts/build-native.mjs (gcc -O2 -Wall -Wextra) into
 * dist/native/dsec-native. It runs on the host only, never in a sandbox.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host/files.h"

/* Constants newer than some C library headers (values from the kernel's uapi). */
#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE 67
#endif
#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#endif
#ifndef PR_SCHED_CORE_CREATE
#define PR_SCHED_CORE_CREATE 1
#endif
#ifndef PR_SCHED_CORE_SCOPE_THREAD_GROUP
#define PR_SCHED_CORE_SCOPE_THREAD_GROUP 1
#endif
#ifndef SCHED_IDLE
#define SCHED_IDLE 5
#endif
#ifndef MADV_WILLNEED
#define MADV_WILLNEED 3
#endif
/* x86_64 numbers; other architectures' headers define these. */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

/* Exit status when a requested attribute could not be set (as env(1) and runc use 125). */
#define EXIT_ATTRIBUTE 125
/* At most this many errors are listed by prefetch; the rest are only counted. */
#define MAX_LISTED_ERRORS 32

/* ------------------------------------------------------------ attributes */

/* Each setter returns 0 or an errno value, and changes only the calling process. */

static int set_memory_merge(void) {
  return prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0) == 0 ? 0 : errno;
}

static int set_sched_idle(void) {
  struct sched_param param = {.sched_priority = 0};
  return sched_setscheduler(0, SCHED_IDLE, &param) == 0 ? 0 : errno;
}

static int set_core_sched(void) {
  /* pid 0 = this process; scope thread group, which is just us before exec. */
  return prctl(PR_SCHED_CORE, PR_SCHED_CORE_CREATE, 0, PR_SCHED_CORE_SCOPE_THREAD_GROUP, 0) == 0 ? 0 : errno;
}

struct attribute {
  const char *flag;     /* spawn's option */
  const char *name;     /* probe's JSON key and the error's prefix */
  int (*set)(void);
};

static const struct attribute ATTRIBUTES[] = {
    {"--merge", "memoryMerge", set_memory_merge},
    {"--sched-idle", "schedIdle", set_sched_idle},
    {"--core-sched", "coreScheduling", set_core_sched},
};
#define ATTRIBUTE_COUNT (sizeof ATTRIBUTES / sizeof ATTRIBUTES[0])

/* ----------------------------------------------------------------- spawn */

static int spawn(int argc, char **argv) {
  int wanted[ATTRIBUTE_COUNT] = {0};
  int i = 0;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    size_t a = 0;
    while (a < ATTRIBUTE_COUNT && strcmp(argv[i], ATTRIBUTES[a].flag) != 0) a++;
    if (a == ATTRIBUTE_COUNT) {
      fprintf(stderr, "dsec-native: spawn: unknown option %s\n", argv[i]);
      return 2;
    }
    wanted[a] = 1;
  }
  if (i >= argc - 1) {
    fprintf(stderr, "dsec-native: spawn: usage: spawn [--merge] [--sched-idle] [--core-sched] -- CMD ARGS...\n");
    return 2;
  }
  for (size_t a = 0; a < ATTRIBUTE_COUNT; a++) {
    if (!wanted[a]) continue;
    int error = ATTRIBUTES[a].set();
    if (error != 0) {
      fprintf(stderr, "dsec-native: %s: %s\n", ATTRIBUTES[a].name, strerror(error));
      return EXIT_ATTRIBUTE;
    }
  }
  char **command = argv + i + 1;
  execvp(command[0], command);
  fprintf(stderr, "dsec-native: exec %s: %s\n", command[0], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}

/* ----------------------------------------------------------------- probe */

/* Why an attribute is unavailable, in words a node operator can act on. */
static const char *explain(const char *name, int error) {
  if (strcmp(name, "coreScheduling") == 0) {
    if (error == ENODEV) return "no SMT siblings on this machine (core scheduling only matters with SMT)";
    if (error == EINVAL) return "kernel without CONFIG_SCHED_CORE";
  }
  if (strcmp(name, "memoryMerge") == 0 && error == EINVAL) return "kernel without PR_SET_MEMORY_MERGE (needs Linux 6.4+ with CONFIG_KSM)";
  if (error == EPERM) return "not permitted (the agent needs root or CAP_SYS_RESOURCE / CAP_SYS_NICE)";
  return NULL;
}

/* Try one attribute in a child: its exit status carries the errno (0 = it worked). */
static int try_in_child(const struct attribute *attribute) {
  pid_t pid = fork();
  if (pid < 0) return errno;
  if (pid == 0) _exit(attribute->set() & 0xff);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return errno;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : ECHILD;
}

/* A JSON string: the reasons are ours or strerror's, but escape anyway. */
static void print_json_string(const char *text) {
  putchar('"');
  for (const char *c = text; *c; c++) {
    if (*c == '"' || *c == '\\') printf("\\%c", *c);
    else if ((unsigned char)*c < 0x20) printf("\\u%04x", (unsigned char)*c);
    else putchar(*c);
  }
  putchar('"');
}

static int probe(void) {
  putchar('{');
  for (size_t a = 0; a < ATTRIBUTE_COUNT; a++) {
    int error = try_in_child(&ATTRIBUTES[a]);
    printf("%s\"%s\":", a ? "," : "", ATTRIBUTES[a].name);
    if (error == 0) {
      printf("{\"ok\":true}");
      continue;
    }
    char reason[256];
    const char *why = explain(ATTRIBUTES[a].name, error);
    if (why) snprintf(reason, sizeof reason, "%s (%s)", why, strerror(error));
    else snprintf(reason, sizeof reason, "%s", strerror(error));
    printf("{\"ok\":false,\"reason\":");
    print_json_string(reason);
    putchar('}');
  }
  printf("}\n");
  return 0;
}

/* -------------------------------------------------------------- prefetch */

struct prefetch_report {
  unsigned long long advised;
  unsigned listed;
  unsigned unlisted;
  char errors[MAX_LISTED_ERRORS][160];
};

static void add_error(struct prefetch_report *report, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void add_error(struct prefetch_report *report, const char *format, ...) {
  if (report->listed == MAX_LISTED_ERRORS) {
    report->unlisted++;
    return;
  }
  va_list args;
  va_start(args, format);
  vsnprintf(report->errors[report->listed++], sizeof report->errors[0], format, args);
  va_end(args);
}

/*
 * Advise ranges[0..count). process_madvise stops at the first range it
 * cannot advise and returns the bytes done before it (-1 if that was the
 * first): skip the failing range, note it, and go on with the next. It also
 * stops, without an error, after MAX_RW_COUNT (~2 GiB) bytes per call, so a
 * short count inside a range means "carry on from here".
 */
static void advise_batch(int pidfd, pid_t pid, struct iovec *ranges, size_t count, struct prefetch_report *report) {
  size_t next = 0;
  while (next < count) {
    ssize_t done = syscall(SYS_process_madvise, pidfd, ranges + next, count - next, MADV_WILLNEED, 0);
    if (done <= 0) {
      add_error(report, "pid %d range %p+%zu: %s", (int)pid, ranges[next].iov_base, ranges[next].iov_len,
                done < 0 ? strerror(errno) : "nothing advised");
      if (done < 0 && (errno == ESRCH || errno == EBADF)) return; /* the process is gone: its other ranges are too */
      next++;
      continue;
    }
    report->advised += (unsigned long long)done;
    size_t bytes = (size_t)done;
    while (next < count && bytes >= ranges[next].iov_len) {
      bytes -= ranges[next].iov_len;
      next++;
    }
    if (next < count && bytes > 0) {
      ranges[next].iov_base = (char *)ranges[next].iov_base + bytes;
      ranges[next].iov_len -= bytes;
    }
  }
}

static void prefetch_one(pid_t pid, struct prefetch_report *report) {
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    add_error(report, "pid %d: pidfd_open: %s", (int)pid, strerror(errno));
    return;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *maps = fopen(path, "r");
  if (!maps) {
    add_error(report, "pid %d: %s: %s", (int)pid, path, strerror(errno));
    close(pidfd);
    return;
  }
  static struct iovec ranges[IOV_MAX];
  size_t count = 0;
  char line[4096 + 128];
  while (fgets(line, sizeof line, maps)) {
    /* A line longer than the buffer (a very long path): drop its tail. */
    if (!strchr(line, '\n')) {
      int c;
      while ((c = fgetc(maps)) != EOF && c != '\n') {}
    }
    uintptr_t start = 0, end = 0;
    if (sscanf(line, "%lx-%lx", &start, &end) != 2 || end <= start) continue;
    /* The legacy vsyscall page lies outside the address space madvise works on. */
    if (strstr(line, "[vsyscall]")) continue;
    ranges[count].iov_base = (void *)start;
    ranges[count].iov_len = end - start;
    if (++count == IOV_MAX) {
      advise_batch(pidfd, pid, ranges, count, report);
      count = 0;
    }
  }
  if (count > 0) advise_batch(pidfd, pid, ranges, count, report);
  fclose(maps);
  close(pidfd);
}

static int prefetch(int argc, char **argv) {
  static struct prefetch_report report;
  for (int i = 0; i < argc; i++) {
    char *end = NULL;
    long pid = strtol(argv[i], &end, 10);
    if (!end || *end != '\0' || pid <= 0 || pid > INT_MAX) {
      fprintf(stderr, "dsec-native: prefetch: not a pid: %s\n", argv[i]);
      return 2;
    }
    prefetch_one((pid_t)pid, &report);
  }
  printf("{\"advisedBytes\":%llu,\"errors\":[", report.advised);
  for (unsigned e = 0; e < report.listed; e++) {
    if (e) putchar(',');
    print_json_string(report.errors[e]);
  }
  if (report.unlisted) printf("%s\"... and %u more\"", report.listed ? "," : "", report.unlisted);
  printf("]}\n");
  return 0;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "spawn") == 0) return spawn(argc - 2, argv + 2);
  if (argc == 2 && strcmp(argv[1], "probe") == 0) return probe();
  if (argc >= 2 && strcmp(argv[1], "prefetch") == 0) return prefetch(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "file-read") == 0) return file_read(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "file-write") == 0) return file_write(argc - 2, argv + 2);
  fprintf(stderr,
          "usage: dsec-native spawn [--merge] [--sched-idle] [--core-sched] -- CMD ARGS...\n"
          "       dsec-native probe\n"
          "       dsec-native prefetch PID...\n"
          "       dsec-native file-read --root DIR --path P --max N\n"
          "       dsec-native file-write --root DIR --path P [--mode OCTAL] [--uid U --gid G] < CONTENT\n");
  return 2;
}
