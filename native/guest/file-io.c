/*
 * dsec-read-file and dsec-write-file: a whole file in one request, in sync
 * and async mode, with error classes the host maps to its file errors
 * (NotFound, TooLarge, Invalid). Sandbox code may plant anything at a path
 * the host names, so neither ever blocks or follows the trap: opened
 * non-blocking and without a controlling terminal, fstat must say regular
 * file before any byte moves (a FIFO or a device is Invalid), and a write
 * refuses a symlink as the last component (O_NOFOLLOW).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base64.h"
#include "commands.h"
#include "process.h"
#include "reply.h"

#define MAX_FILE_READ MAX_OUTPUT_LIMIT

static void file_error(const struct json *id, const char *error_class, const char *path, const char *what) {
  char desc[1024];
  snprintf(desc, sizeof desc, "%.800s: %s", path, what);
  reply_error(id, error_class, desc);
}

/* An open/create failure's class: NotFound for a missing path, Invalid for the rest. */
static void errno_error(const struct json *id, const char *path, int code) {
  const char *what = code == ELOOP ? "is a symbolic link (not followed)" : code == ENXIO ? "is not a regular file (no reader)" : strerror(code);
  file_error(id, code == ENOENT || code == ENOTDIR ? "NotFound" : "Invalid", path, what);
}

static const char *path_of(const struct json *args, const struct json *id) {
  const char *path = json_get_string(args, "path");
  if (path == NULL || path[0] != '/') reply_error(id, "Invalid", "'path' must be an absolute path");
  return path != NULL && path[0] == '/' ? path : NULL;
}

#define MAX_READ_PART (4u * 1024 * 1024)

/* {size (the whole file's), data (at most `length` bytes from `offset`)}; closes fd. */
static void read_part(const struct json *args, struct json **id, int fd, const char *path, const struct stat *st) {
  int64_t offset = 0, length = 0;
  if ((json_get(args, "offset") != NULL && !json_get_int(args, "offset", 0, INT64_MAX / 2, &offset)) ||
      !json_get_int(args, "length", 0, MAX_READ_PART, &length)) {
    close(fd);
    reply_error(*id, "Invalid", "'offset' must be an integer >= 0 and 'length' one from 0 to 4194304");
    return;
  }
  unsigned char *data = malloc(length > 0 ? (size_t)length : 1);
  size_t got = 0;
  int failed = data == NULL ? ENOMEM : 0;
  while (!failed && got < (size_t)length) {
    ssize_t n = pread(fd, data + got, (size_t)length - got, (off_t)(offset + (int64_t)got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) failed = errno;
    else if (n == 0) break;
    else got += (size_t)n;
  }
  close(fd);
  if (failed) {
    free(data);
    file_error(*id, "Invalid", path, strerror(failed));
    return;
  }
  struct buffer value = {0};
  buffer_printf(&value, "{\"size\":%lld,\"offset\":%lld", (long long)st->st_size, (long long)offset);
  write_b64_member(&value, "data", data, got);
  buffer_append_str(&value, "}");
  free(data);
  reply_value(*id, &value);
  buffer_free(&value);
}

void cmd_read_file(const struct json *args, struct json **id) {
  const char *path = path_of(args, *id);
  if (path == NULL) return;
  int64_t max = MAX_FILE_READ;
  if (json_get(args, "max-bytes") != NULL && !json_get_int(args, "max-bytes", 0, MAX_FILE_READ, &max)) {
    reply_error(*id, "Invalid", "'max-bytes' must be an integer from 0 to 33554432");
    return;
  }
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) { errno_error(*id, path, errno); return; }
  struct stat st;
  char what[128];
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    file_error(*id, "Invalid", path, S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
    return;
  }
  if (st.st_size > max) {
    close(fd);
    snprintf(what, sizeof what, "is %lld bytes, more than the %lld asked for", (long long)st.st_size, (long long)max);
    file_error(*id, "TooLarge", path, what);
    return;
  }
  /* A part (`offset`, `length`): the host reads big files in pieces, so what the agent holds
     at once (charged to the sandbox's memory) stays a piece, never the whole file. */
  if (json_get(args, "length") != NULL) {
    read_part(args, id, fd, path, &st);
    return;
  }
  /* Up to one byte past the limit: a file growing meanwhile is still caught. */
  size_t capacity = (size_t)st.st_size + 1, length = 0;
  unsigned char *data = malloc(capacity);
  int failed = data == NULL ? ENOMEM : 0;
  while (!failed && length <= (size_t)max) {
    if (length == capacity) {
      size_t grown = capacity * 2 > (size_t)max + 1 ? (size_t)max + 1 : capacity * 2;
      unsigned char *bigger = grown > capacity ? realloc(data, grown) : NULL;
      if (bigger == NULL) break; /* at max + 1 bytes: too large */
      data = bigger;
      capacity = grown;
    }
    ssize_t n = read(fd, data + length, capacity - length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) failed = errno;
    else if (n == 0) break;
    else length += (size_t)n;
  }
  close(fd);
  if (failed) {
    free(data);
    file_error(*id, "Invalid", path, strerror(failed));
    return;
  }
  if (length > (size_t)max) {
    free(data);
    snprintf(what, sizeof what, "is more than the %lld bytes asked for (it grew)", (long long)max);
    file_error(*id, "TooLarge", path, what);
    return;
  }
  struct buffer value = {0};
  buffer_printf(&value, "{\"size\":%zu", length);
  write_b64_member(&value, "data", data, length);
  buffer_append_str(&value, "}");
  free(data);
  reply_value(*id, &value);
  buffer_free(&value);
}

/* mkdir -p of path's parent: new directories mode 0755, owned by uid/gid when given (-1: unchanged). */
static int make_parents(const char *path, uid_t uid, gid_t gid) {
  char *copy = strdup(path);
  if (copy == NULL) return ENOMEM;
  char *last = strrchr(copy, '/');
  int result = 0;
  for (char *slash = copy + 1; last != NULL && slash <= last && result == 0; slash++) {
    if (*slash != '/') continue;
    *slash = 0;
    if (mkdir(copy, 0755) == 0) {
      if ((uid != (uid_t)-1 || gid != (gid_t)-1) && lchown(copy, uid, gid) != 0) result = errno;
    } else {
      struct stat st;
      if (errno != EEXIST) result = errno;
      else if (stat(copy, &st) != 0 || !S_ISDIR(st.st_mode)) result = ENOTDIR; /* a file where a directory must be */
    }
    *slash = '/';
  }
  free(copy);
  return result;
}

void cmd_write_file(const struct json *args, struct json **id) {
  const char *path = path_of(args, *id);
  if (path == NULL) return;
  const struct json *b64 = json_get(args, "data");
  int64_t mode = 0644, uid = -1, gid = -1;
  int append;
  if ((json_get(args, "mode") != NULL && !json_get_int(args, "mode", 0, 07777, &mode)) ||
      (json_get(args, "uid") != NULL && !json_get_int(args, "uid", 0, 0x7FFFFFFE, &uid)) ||
      (json_get(args, "gid") != NULL && !json_get_int(args, "gid", 0, 0x7FFFFFFE, &gid)) || bool_argument(args, "append", 0, &append) != 0) {
    reply_error(*id, "Invalid", "'mode' must be an integer from 0 to 07777, 'uid' and 'gid' ids, 'append' a boolean");
    return;
  }
  unsigned char *data;
  size_t length;
  if (b64 == NULL || b64->type != JSON_STRING || !base64_decode(b64->string, b64->length, &data, &length)) {
    reply_error(*id, "Invalid", "'data' must be base64");
    return;
  }
  int code = make_parents(path, (uid_t)uid, (gid_t)gid);
  if (code != 0) {
    free(data);
    file_error(*id, "Invalid", path, code == ENOTDIR ? "a parent is not a directory" : strerror(code));
    return;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0600);
  struct stat st;
  if (fd < 0) code = errno;
  else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) code = -1;
  size_t done = 0;
  while (code == 0 && done < length) {
    ssize_t n = write(fd, data + done, length - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) code = n < 0 ? errno : EIO;
    else done += (size_t)n;
  }
  free(data);
  /* Owner before mode: chown clears the set-user-ID and set-group-ID bits. */
  if (code == 0 && (uid >= 0 || gid >= 0) && fchown(fd, (uid_t)uid, (gid_t)gid) != 0) code = errno;
  if (code == 0 && fchmod(fd, (mode_t)mode) != 0) code = errno;
  if (fd >= 0) close(fd);
  if (code == -1) { file_error(*id, "Invalid", path, S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file"); return; }
  if (code != 0) { errno_error(*id, path, code); return; }
  struct buffer value = {0};
  buffer_printf(&value, "{\"size\":%zu}", done);
  reply_value(*id, &value);
  buffer_free(&value);
}
