/* File commands of the guest agent; see files.h. */
#define _GNU_SOURCE
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base64.h"

#define MAX_HANDLES 64

struct handle {
  int64_t id; /* 0: free */
  int fd;
};

static struct handle handles[MAX_HANDLES];
static int64_t next_handle = 1000;

static int fail(char *error, size_t size, const char *format, const char *path) {
  snprintf(error, size, format, path, strerror(errno));
  return -1;
}

static const char *path_argument(const struct json *args, char *error, size_t size) {
  const char *path = json_get_string(args, "path");
  if (path == NULL || path[0] == 0) snprintf(error, size, "'path' must be a non-empty string");
  return path;
}

static struct handle *find_handle(const struct json *args, char *error, size_t size) {
  int64_t id;
  if (json_get_int(args, "handle", 1, INT64_MAX / 2, &id))
    for (int i = 0; i < MAX_HANDLES; i++)
      if (handles[i].id == id) return &handles[i];
  snprintf(error, size, "no open file with that handle");
  return NULL;
}

/* fopen's mode letters, as qemu-ga takes them. */
static int open_flags(const char *mode) {
  char base[4] = {0};
  size_t n = 0;
  int plus = 0;
  for (const char *m = mode; *m; m++) {
    if (*m == '+') plus = 1;
    else if (*m == 'b') continue;
    else if (n < 1) base[n++] = *m;
    else return -1;
  }
  if (strcmp(base, "r") == 0) return plus ? O_RDWR : O_RDONLY;
  if (strcmp(base, "w") == 0) return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC;
  if (strcmp(base, "a") == 0) return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND;
  return -1;
}

int cmd_file_open(const struct json *args, struct buffer *out, char *error, size_t size) {
  const char *path = path_argument(args, error, size);
  if (path == NULL) return -1;
  const char *mode = json_get(args, "mode") != NULL ? json_get_string(args, "mode") : "r";
  int flags = mode != NULL ? open_flags(mode) : -1;
  if (flags < 0) { snprintf(error, size, "invalid file open mode"); return -1; }
  struct handle *slot = NULL;
  for (int i = 0; i < MAX_HANDLES && slot == NULL; i++)
    if (handles[i].id == 0) slot = &handles[i];
  if (slot == NULL) { snprintf(error, size, "too many open files (%d)", MAX_HANDLES); return -1; }
  /* Non-blocking open: a FIFO without a writer (or a device waiting for a carrier)
     must not hang the agent. A regular file then reads and writes as usual;
     anything else stays non-blocking, so a FIFO whose writer never writes (or
     whose reader never reads), planted by sandbox code, is an error answer
     (EAGAIN) rather than an agent stuck in read(). */
  int fd = open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666);
  if (fd < 0) return fail(error, size, "failed to open file '%s': %s", path);
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  slot->fd = fd;
  slot->id = next_handle++;
  buffer_printf(out, "%lld", (long long)slot->id);
  return 0;
}

int cmd_file_read(const struct json *args, struct buffer *out, char *error, size_t size) {
  struct handle *handle = find_handle(args, error, size);
  if (handle == NULL) return -1;
  int64_t count = 4096;
  if (json_get(args, "count") != NULL && !json_get_int(args, "count", 0, MAX_READ_COUNT, &count)) {
    snprintf(error, size, "'count' must be an integer from 0 to %u", MAX_READ_COUNT);
    return -1;
  }
  unsigned char *data = malloc((size_t)count + 1);
  if (data == NULL) { snprintf(error, size, "out of memory"); return -1; }
  size_t have = 0;
  int eof = 0;
  while (have < (size_t)count) {
    ssize_t n = read(handle->fd, data + have, (size_t)count - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { free(data); return fail(error, size, "failed to read file%s: %s", ""); }
    if (n == 0) { eof = 1; break; }
    have += (size_t)n;
  }
  buffer_printf(out, "{\"count\":%zu,\"buf-b64\":\"", have);
  base64_encode(out, data, have);
  buffer_printf(out, "\",\"eof\":%s}", eof ? "true" : "false");
  free(data);
  return 0;
}

int cmd_file_write(const struct json *args, struct buffer *out, char *error, size_t size) {
  struct handle *handle = find_handle(args, error, size);
  if (handle == NULL) return -1;
  const struct json *b64 = json_get(args, "buf-b64");
  unsigned char *data;
  size_t length;
  if (b64 == NULL || b64->type != JSON_STRING || !base64_decode(b64->string, b64->length, &data, &length)) {
    snprintf(error, size, "'buf-b64' must be base64");
    return -1;
  }
  int64_t count = (int64_t)length;
  if (json_get(args, "count") != NULL && (!json_get_int(args, "count", 0, (int64_t)length, &count))) {
    free(data);
    snprintf(error, size, "'count' must be at most the %zu bytes given", length);
    return -1;
  }
  size_t done = 0;
  while (done < (size_t)count) {
    ssize_t n = write(handle->fd, data + done, (size_t)count - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { free(data); return fail(error, size, "failed to write to file%s: %s", ""); }
    done += (size_t)n;
  }
  free(data);
  buffer_printf(out, "{\"count\":%zu,\"eof\":false}", done);
  return 0;
}

int cmd_file_seek(const struct json *args, struct buffer *out, char *error, size_t size) {
  struct handle *handle = find_handle(args, error, size);
  if (handle == NULL) return -1;
  int64_t offset, whence_number = -1;
  if (!json_get_int(args, "offset", INT64_MIN / 2, INT64_MAX / 2, &offset)) { snprintf(error, size, "'offset' must be an integer"); return -1; }
  /* QGA's whence is a number (0 1 2) or a name. */
  const char *name = json_get_string(args, "whence");
  if (name != NULL) whence_number = strcmp(name, "set") == 0 ? 0 : strcmp(name, "cur") == 0 ? 1 : strcmp(name, "end") == 0 ? 2 : -1;
  else json_get_int(args, "whence", 0, 2, &whence_number);
  int whence = whence_number == 0 ? SEEK_SET : whence_number == 1 ? SEEK_CUR : whence_number == 2 ? SEEK_END : -1;
  if (whence < 0) { snprintf(error, size, "'whence' must be set, cur or end"); return -1; }
  off_t position = lseek(handle->fd, (off_t)offset, whence);
  if (position < 0) return fail(error, size, "failed to seek file%s: %s", "");
  buffer_printf(out, "{\"position\":%lld,\"eof\":false}", (long long)position);
  return 0;
}

int cmd_file_flush(const struct json *args, struct buffer *out, char *error, size_t size) {
  struct handle *handle = find_handle(args, error, size);
  if (handle == NULL) return -1;
  if (fsync(handle->fd) != 0 && errno != EINVAL) return fail(error, size, "failed to flush file%s: %s", "");
  buffer_append_str(out, "{}");
  return 0;
}

int cmd_file_close(const struct json *args, struct buffer *out, char *error, size_t size) {
  struct handle *handle = find_handle(args, error, size);
  if (handle == NULL) return -1;
  int result = close(handle->fd);
  handle->id = 0;
  handle->fd = -1;
  if (result != 0 && errno != EINTR) return fail(error, size, "failed to close file%s: %s", "");
  buffer_append_str(out, "{}");
  return 0;
}

int cmd_stat(const struct json *args, struct buffer *out, char *error, size_t size) {
  const char *path = path_argument(args, error, size);
  if (path == NULL) return -1;
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) return fail(error, size, "failed to stat '%s': %s", path);
    buffer_append_str(out, "{\"type\":\"missing\",\"size\":0}");
    return 0;
  }
  const char *type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : "other";
  buffer_printf(out, "{\"type\":\"%s\",\"size\":%lld,\"mode\":%u}", type, (long long)st.st_size, (unsigned)(st.st_mode & 07777));
  return 0;
}

static int mode_argument(const struct json *args, int64_t fallback, int64_t *mode, char *error, size_t size) {
  *mode = fallback;
  if (json_get(args, "mode") == NULL || json_get_int(args, "mode", 0, 07777, mode)) return 0;
  snprintf(error, size, "'mode' must be an integer from 0 to 07777");
  return -1;
}

int cmd_mkdirs(const struct json *args, struct buffer *out, char *error, size_t size) {
  const char *path = path_argument(args, error, size);
  int64_t mode;
  if (path == NULL || mode_argument(args, 0755, &mode, error, size) != 0) return -1;
  char *copy = strdup(path);
  if (copy == NULL) { snprintf(error, size, "out of memory"); return -1; }
  /* Each prefix ending before a slash, then the whole path. */
  for (char *slash = copy + 1;; slash++) {
    if (*slash != '/' && *slash != 0) continue;
    char saved = *slash;
    *slash = 0;
    struct stat st;
    if (mkdir(copy, (mode_t)mode) != 0 && (errno != EEXIST || stat(copy, &st) != 0 || !S_ISDIR(st.st_mode))) {
      if (errno == EEXIST || errno == 0) errno = ENOTDIR;
      int result = fail(error, size, "failed to create directory '%s': %s", copy);
      free(copy);
      return result;
    }
    *slash = saved;
    if (saved == 0) break;
  }
  free(copy);
  buffer_append_str(out, "{}");
  return 0;
}

int cmd_chmod(const struct json *args, struct buffer *out, char *error, size_t size) {
  const char *path = path_argument(args, error, size);
  int64_t mode;
  if (path == NULL) return -1;
  if (json_get(args, "mode") == NULL) { snprintf(error, size, "'mode' is required"); return -1; }
  if (mode_argument(args, 0, &mode, error, size) != 0) return -1;
  if (chmod(path, (mode_t)mode) != 0) return fail(error, size, "failed to chmod '%s': %s", path);
  buffer_append_str(out, "{}");
  return 0;
}

/* Remove the entries of the directory open at dir_fd (which it closes). */
static int empty_at(int dir_fd, const char *path, int depth, char *error, size_t size) {
  DIR *dir = fdopendir(dir_fd);
  if (dir == NULL) { close(dir_fd); return fail(error, size, "failed to read directory '%s': %s", path); }
  int result = 0;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    const char *name = entry->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
    if (unlinkat(dirfd(dir), name, 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR && errno != EPERM) { result = fail(error, size, "failed to remove an entry of '%s': %s", path); continue; }
    int child = openat(dirfd(dir), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child < 0) { result = fail(error, size, "failed to open an entry of '%s': %s", path); continue; }
    if (depth > 256) { close(child); errno = ELOOP; result = fail(error, size, "'%s' is nested too deeply: %s", path); continue; }
    if (empty_at(child, path, depth + 1, error, size) != 0) result = -1;
    if (unlinkat(dirfd(dir), name, AT_REMOVEDIR) != 0 && errno != ENOENT && errno != EBUSY)
      result = fail(error, size, "failed to remove a directory in '%s': %s", path);
  }
  closedir(dir);
  return result;
}

int empty_directory(const char *path, char *error, size_t size) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0; /* nothing to empty */
    return fail(error, size, "failed to open directory '%s': %s", path);
  }
  return empty_at(fd, path, 0, error, size);
}
