/*
 * File commands: QGA's guest-file-open/read/write/seek/flush/close on a small
 * handle table, and the dsec extensions dsec-stat, dsec-mkdirs, dsec-chmod,
 * plus emptying a directory for dsec-reset.
 *
 * Each command writes the value of "return" to `out` and returns 0, or fills
 * `error` and returns -1.
 */
#ifndef DSEC_GUEST_FILES_H
#define DSEC_GUEST_FILES_H

#include <stddef.h>
#include "json.h"

/* The largest guest-file-read count (larger asks are refused, as qemu-ga does). */
#define MAX_READ_COUNT (16u * 1024 * 1024)

int cmd_file_open(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_file_read(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_file_write(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_file_seek(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_file_flush(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_file_close(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_stat(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_mkdirs(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_chmod(const struct json *args, struct buffer *out, char *error, size_t error_size);

/* Remove everything inside `path` (not path itself), never following symlinks. */
int empty_directory(const char *path, char *error, size_t error_size);

#endif
