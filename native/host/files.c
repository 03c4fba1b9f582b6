/*
 * dsec-native file-read / file-write (see native/dsec-native.c for the
 * command lines): one file inside a sandbox, reached through its root.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "files.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

/*
 * file-read / file-write: one file inside a sandbox, reached through a
 * directory fd on the sandbox's root (/proc/<init pid>/root, so the
 * sandbox's own mounts are seen). Every lookup goes through openat2 with
 * RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS: an absolute symlink or a ".."
 * planted inside resolves against the sandbox's root, never the host's, and
 * /proc magic links are refused. The path is never resolved on the host.
 */
#define EXIT_FILE_FAILED 1
#define EXIT_FILE_NOT_FOUND 3
#define EXIT_FILE_TOO_LARGE 4
#define EXIT_FILE_INVALID 5
#define FILE_RESOLVE (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)

struct file_args {
  const char *root;
  const char *path;
  long long max;
  long mode;
  long long uid;
  long long gid;
};

static int open_in(int dirfd, const char *path, int flags, mode_t mode, unsigned long long resolve) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (unsigned long long)(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = resolve;
  return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* Say why a lookup failed, as the exit status the caller maps to an error code. */
static int file_failure(const char *path, int error) {
  switch (error) {
  case ENOENT:
  case ENOTDIR:
    fprintf(stderr, "no such file: %s\n", path);
    return EXIT_FILE_NOT_FOUND;
  case ELOOP:
    fprintf(stderr, "%s: a symbolic link where none may be followed (or too many of them)\n", path);
    return EXIT_FILE_INVALID;
  case EXDEV:
    fprintf(stderr, "%s: the path leaves the sandbox's root\n", path);
    return EXIT_FILE_INVALID;
  case EISDIR:
    fprintf(stderr, "%s: is a directory\n", path);
    return EXIT_FILE_INVALID;
  case ENXIO:
  case ETXTBSY:
    fprintf(stderr, "%s: is not a regular file\n", path);
    return EXIT_FILE_INVALID;
  case EROFS:
    fprintf(stderr, "%s: the file system is read-only\n", path);
    return EXIT_FILE_INVALID;
  case ENOSYS:
    fprintf(stderr, "openat2 is not available (Linux 5.6 or newer is needed)\n");
    return EXIT_FILE_FAILED;
  default:
    fprintf(stderr, "%s: %s\n", path, strerror(error));
    return EXIT_FILE_FAILED;
  }
}

static int parse_number(const char *text, int base, long long low, long long high, long long *out) {
  char *end = NULL;
  errno = 0;
  long long value = strtoll(text, &end, base);
  if (errno || !end || *end != '\0' || end == text || value < low || value > high) return -1;
  *out = value;
  return 0;
}

static int file_parse(const char *command, int argc, char **argv, struct file_args *args) {
  args->root = NULL;
  args->path = NULL;
  args->max = -1;
  args->mode = 0644;
  args->uid = -1;
  args->gid = -1;
  for (int i = 0; i + 1 < argc; i += 2) {
    const char *flag = argv[i], *value = argv[i + 1];
    long long number = 0;
    if (strcmp(flag, "--root") == 0) args->root = value;
    else if (strcmp(flag, "--path") == 0) args->path = value;
    else if (strcmp(flag, "--max") == 0 && parse_number(value, 10, 0, LLONG_MAX, &number) == 0) args->max = number;
    else if (strcmp(flag, "--mode") == 0 && parse_number(value, 8, 0, 07777, &number) == 0) args->mode = (long)number;
    else if (strcmp(flag, "--uid") == 0 && parse_number(value, 10, 0, UINT32_MAX - 1, &number) == 0) args->uid = number;
    else if (strcmp(flag, "--gid") == 0 && parse_number(value, 10, 0, UINT32_MAX - 1, &number) == 0) args->gid = number;
    else {
      fprintf(stderr, "dsec-native: %s: bad flag or value: %s %s\n", command, flag, value);
      return -1;
    }
  }
  if (argc % 2 != 0 || !args->root || !args->path || (strcmp(command, "file-read") == 0 && args->max < 0)) {
    fprintf(stderr, "dsec-native: %s: usage: see dsec-native without arguments\n", command);
    return -1;
  }
  return 0;
}

/* The sandbox-relative path without its leading slashes; NULL for "/" itself. */
static const char *relative_path(const char *path) {
  while (*path == '/') path++;
  return *path ? path : NULL;
}

static int write_all(int fd, const char *data, size_t length) {
  while (length > 0) {
    ssize_t written = write(fd, data, length);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return -1;
    data += written;
    length -= (size_t)written;
  }
  return 0;
}

int file_read(int argc, char **argv) {
  struct file_args args;
  if (file_parse("file-read", argc, argv, &args) != 0) return 2;
  const char *relative = relative_path(args.path);
  if (!relative) return file_failure(args.path, EISDIR);
  int root = open(args.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    fprintf(stderr, "cannot open the sandbox's root %s: %s\n", args.root, strerror(errno));
    return EXIT_FILE_FAILED;
  }
  /* A FIFO opened without O_NONBLOCK would wait for a writer forever. */
  int fd = open_in(root, relative, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, FILE_RESOLVE);
  if (fd < 0) return file_failure(args.path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) return file_failure(args.path, errno);
  if (S_ISDIR(st.st_mode)) return file_failure(args.path, EISDIR);
  if (!S_ISREG(st.st_mode)) return file_failure(args.path, ENXIO);
  if (st.st_size > args.max) {
    fprintf(stderr, "size %lld\n", (long long)st.st_size);
    return EXIT_FILE_TOO_LARGE;
  }
  static char buffer[1 << 16];
  long long total = 0;
  for (;;) {
    ssize_t got = read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return file_failure(args.path, errno);
    if (got == 0) break;
    total += got;
    /* It grew while being read. */
    if (total > args.max) {
      fprintf(stderr, "size %lld\n", total);
      return EXIT_FILE_TOO_LARGE;
    }
    if (write_all(STDOUT_FILENO, buffer, (size_t)got) != 0) {
      fprintf(stderr, "writing the content out failed: %s\n", strerror(errno));
      return EXIT_FILE_FAILED;
    }
  }
  return 0;
}

/* Open (mkdir -p) every parent of `relative`, each looked up from the root; returns the last one's fd. */
static int open_parents(int root, const char *path, char *relative, const struct file_args *args) {
  int parent = dup(root);
  if (parent < 0) return file_failure(path, errno) * -1;
  for (char *slash = strchr(relative, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    const char *name = strrchr(relative, '/') ? strrchr(relative, '/') + 1 : relative;
    int next = -1;
    if (*name != '\0') {
      next = open_in(root, relative, O_PATH | O_DIRECTORY, 0, FILE_RESOLVE);
      if (next < 0 && errno == ENOENT) {
        if (mkdirat(parent, name, 0755) == 0) {
          if (args->uid >= 0) (void)fchownat(parent, name, (uid_t)args->uid, (gid_t)(args->gid >= 0 ? args->gid : args->uid), AT_SYMLINK_NOFOLLOW);
        } else if (errno != EEXIST) {
          int error = errno;
          *slash = '/';
          close(parent);
          return -file_failure(path, error);
        }
        next = open_in(root, relative, O_PATH | O_DIRECTORY, 0, FILE_RESOLVE);
      }
    }
    int error = errno;
    *slash = '/';
    if (*name == '\0') continue; /* "a//b" */
    close(parent);
    if (next < 0) return -file_failure(path, error);
    parent = next;
  }
  return parent;
}

int file_write(int argc, char **argv) {
  struct file_args args;
  if (file_parse("file-write", argc, argv, &args) != 0) return 2;
  const char *start = relative_path(args.path);
  if (!start) return file_failure(args.path, EISDIR);
  char relative[PATH_MAX];
  if (strlen(start) >= sizeof relative) return file_failure(args.path, ENAMETOOLONG);
  strcpy(relative, start);
  while (strlen(relative) > 1 && relative[strlen(relative) - 1] == '/') relative[strlen(relative) - 1] = '\0';
  const char *last = strrchr(relative, '/') ? strrchr(relative, '/') + 1 : relative;
  if (strcmp(last, ".") == 0 || strcmp(last, "..") == 0) return file_failure(args.path, EISDIR);
  int root = open(args.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    fprintf(stderr, "cannot open the sandbox's root %s: %s\n", args.root, strerror(errno));
    return EXIT_FILE_FAILED;
  }
  int parent = open_parents(root, args.path, relative, &args);
  if (parent < 0) return -parent;
  /* The last component is never followed: a symlink there is refused, not written through. */
  const unsigned long long single = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  int created = 1;
  int fd = open_in(parent, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY, (mode_t)args.mode, single);
  if (fd < 0 && errno == EEXIST) {
    created = 0;
    fd = open_in(parent, last, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, single);
  }
  if (fd < 0) return file_failure(args.path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) return file_failure(args.path, errno);
  if (!S_ISREG(st.st_mode)) return file_failure(args.path, ENXIO);
  if (!created && ftruncate(fd, 0) != 0) return file_failure(args.path, errno);
  static char buffer[1 << 16];
  long long total = 0;
  for (;;) {
    ssize_t got = read(STDIN_FILENO, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      fprintf(stderr, "reading the content in failed: %s\n", strerror(errno));
      return EXIT_FILE_FAILED;
    }
    if (got == 0) break;
    if (write_all(fd, buffer, (size_t)got) != 0) return file_failure(args.path, errno);
    total += got;
  }
  if (fchmod(fd, (mode_t)args.mode) != 0) return file_failure(args.path, errno);
  if (created && args.uid >= 0 && fchown(fd, (uid_t)args.uid, (gid_t)(args.gid >= 0 ? args.gid : args.uid)) != 0) return file_failure(args.path, errno);
  if (close(fd) != 0) return file_failure(args.path, errno);
  printf("{\"size\":%lld}\n", total);
  return 0;
}
