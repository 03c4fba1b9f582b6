/*
 * Exec commands: QGA's guest-exec and guest-exec-status, and the dsec
 * extensions dsec-exec (blocking: its answer is written when the process
 * ends, by the main loop) and dsec-reset. Same conventions as files.h.
 */
#ifndef DSEC_GUEST_EXEC_H
#define DSEC_GUEST_EXEC_H

#include <stddef.h>
#include "json.h"
#include "process.h"

int cmd_guest_exec(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_guest_exec_status(const struct json *args, struct buffer *out, char *error, size_t error_size);
int cmd_reset(const struct json *args, struct buffer *out, char *error, size_t error_size);

/* The arguments every exec shares (path, arg, env, input-data) into a spawn
   request; the lists and the decoded input are malloc'd: spawn_free releases
   them (also after a failure). */
int spawn_arguments(const struct json *args, struct spawn_request *request, char *error, size_t error_size);
void spawn_free(struct spawn_request *request);
/* timeout-ms (0: none) and max-output (default 1 MiB, at most 32 MiB). */
int limit_arguments(const struct json *args, int64_t *timeout_ms, int64_t *max_output, char *error, size_t error_size);

/* Start dsec-exec's process. Returns 0 with *started set (its answer comes
   when it ends), 0 with *started NULL and the answer in `out` (the command
   could not be executed: exit code 127 or 126), or -1 with `error` filled. */
int dsec_exec_start(const struct json *args, struct child **started, struct buffer *out, char *error, size_t error_size);
/* Write dsec-exec's "return" value for a finished process. */
void dsec_exec_result(const struct child *child, struct buffer *out);

#endif
