/* Exec commands of the guest agent; see exec.h. */
#define _GNU_SOURCE
#include "exec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base64.h"
#include "files.h"
#include "ipc.h"

#define MAX_ARGS 4096
#define MAX_ENV_ENTRIES 250
#define DEFAULT_OUTPUT (1u * 1024 * 1024)

/* The arguments both exec commands share, into a spawn request. The lists and
   the decoded input are malloc'd; spawn_free releases them. */
int spawn_arguments(const struct json *args, struct spawn_request *request, char *error, size_t size) {
  memset(request, 0, sizeof *request);
  request->path = json_get_string(args, "path");
  if (request->path == NULL || request->path[0] == 0) { snprintf(error, size, "'path' must be a non-empty string"); return -1; }
  if (!json_get_strings(args, "arg", MAX_ARGS, (const char ***)&request->args)) {
    snprintf(error, size, "'arg' must be an array of at most %d strings", MAX_ARGS);
    return -1;
  }
  if (!json_get_strings(args, "env", MAX_ENV_ENTRIES, (const char ***)&request->env)) {
    snprintf(error, size, "'env' must be an array of at most %d KEY=VALUE strings", MAX_ENV_ENTRIES);
    return -1;
  }
  const struct json *input = json_get(args, "input-data");
  if (input != NULL && input->type != JSON_NULL) {
    unsigned char *bytes = NULL;
    size_t length = 0;
    if (input->type != JSON_STRING || !base64_decode(input->string, input->length, &bytes, &length)) {
      snprintf(error, size, "'input-data' must be base64");
      return -1;
    }
    request->input = bytes;
    request->input_length = length;
  }
  return 0;
}

void spawn_free(struct spawn_request *request) {
  free((void *)request->args);
  free((void *)request->env);
  free((void *)request->input);
}

int cmd_guest_exec(const struct json *args, struct buffer *out, char *error, size_t size) {
  struct spawn_request request;
  if (spawn_arguments(args, &request, error, size) != 0) { spawn_free(&request); return -1; }
  const struct json *capture = json_get(args, "capture-output");
  request.capture = capture != NULL && capture->type == JSON_BOOL && capture->boolean;
  request.max_output = GUEST_EXEC_OUTPUT;
  request.async = 1;
  int exec_errno;
  pid_t failed;
  struct child *child = process_spawn(&request, &exec_errno, &failed, error, size);
  spawn_free(&request);
  if (child == NULL) return -1;
  buffer_printf(out, "{\"pid\":%d}", (int)child->pid);
  return 0;
}

static void write_output(struct buffer *out, const char *key, const struct buffer *data) {
  json_write_key(out, key, 0);
  buffer_append(out, "\"", 1);
  base64_encode(out, (const unsigned char *)data->data, data->length);
  buffer_append(out, "\"", 1);
}

int cmd_guest_exec_status(const struct json *args, struct buffer *out, char *error, size_t size) {
  int64_t pid;
  struct child *child = NULL;
  if (json_get_int(args, "pid", 1, 0x7FFFFFFF, &pid)) child = process_find((pid_t)pid);
  if (child == NULL || !child->async) {
    snprintf(error, size, "Invalid parameter 'pid'");
    return -1;
  }
  if (!process_done(child)) {
    buffer_append_str(out, "{\"exited\":false}");
    return 0;
  }
  buffer_append_str(out, "{\"exited\":true");
  if (WIFEXITED(child->status)) buffer_printf(out, ",\"exitcode\":%d", WEXITSTATUS(child->status));
  else if (WIFSIGNALED(child->status)) buffer_printf(out, ",\"signal\":%d", WTERMSIG(child->status));
  if (child->out.length > 0 || child->out_truncated) write_output(out, "out-data", &child->out);
  if (child->err.length > 0 || child->err_truncated) write_output(out, "err-data", &child->err);
  if (child->out_truncated) buffer_append_str(out, ",\"out-truncated\":true");
  if (child->err_truncated) buffer_append_str(out, ",\"err-truncated\":true");
  buffer_append_str(out, "}");
  process_release(child); /* reported once, as qemu-ga does */
  return 0;
}

/* A command that could not be executed answers as a shell would: 127 when it
   is not there, 126 when it is not executable, the reason on stderr. */
static void write_not_executed(struct buffer *out, int exec_errno, const char *message) {
  struct buffer err = {0};
  buffer_printf(&err, "dsec-guest: %s\n", message);
  buffer_printf(out, "{\"exitcode\":%d,\"out-data\":\"\"", exec_errno == ENOENT || exec_errno == ENOTDIR ? 127 : 126);
  write_output(out, "err-data", &err);
  buffer_append_str(out, ",\"out-truncated\":false,\"err-truncated\":false,\"timed-out\":false,\"duration-ms\":0}");
  buffer_free(&err);
}

int limit_arguments(const struct json *args, int64_t *timeout, int64_t *max_output, char *error, size_t size) {
  *timeout = 0;
  *max_output = DEFAULT_OUTPUT;
  if (json_get(args, "timeout-ms") != NULL && !json_get_int(args, "timeout-ms", 0, 0x7FFFFFFF, timeout)) {
    snprintf(error, size, "'timeout-ms' must be an integer from 0 (none) to 2147483647");
    return -1;
  }
  if (json_get(args, "max-output") != NULL && !json_get_int(args, "max-output", 0, MAX_OUTPUT_LIMIT, max_output)) {
    snprintf(error, size, "'max-output' must be an integer from 0 to %u", MAX_OUTPUT_LIMIT);
    return -1;
  }
  return 0;
}

int dsec_exec_start(const struct json *args, struct child **started, struct buffer *out, char *error, size_t size) {
  struct spawn_request request;
  struct child *child = NULL;
  int result = -1;
  int64_t timeout, max_output;
  if (spawn_arguments(args, &request, error, size) != 0) goto done;
  request.cwd = json_get_string(args, "cwd");
  request.user = json_get_string(args, "user");
  if ((json_get(args, "cwd") != NULL && request.cwd == NULL) || (json_get(args, "user") != NULL && request.user == NULL)) {
    snprintf(error, size, "'cwd' and 'user' must be strings");
    goto done;
  }
  if (limit_arguments(args, &timeout, &max_output, error, size) != 0) goto done;
  request.capture = 1;
  request.timeout_ms = timeout;
  request.max_output = (size_t)max_output;
  int exec_errno;
  pid_t failed;
  child = process_spawn(&request, &exec_errno, &failed, error, size);
  if (child != NULL || exec_errno != 0) result = 0;
  if (child == NULL && exec_errno != 0) write_not_executed(out, exec_errno, error);
done:
  spawn_free(&request);
  *started = child;
  return result;
}

void dsec_exec_result(const struct child *child, struct buffer *out) {
  buffer_append_str(out, "{");
  if (WIFEXITED(child->status)) buffer_printf(out, "\"exitcode\":%d", WEXITSTATUS(child->status));
  else buffer_printf(out, "\"exitcode\":null,\"signal\":%d", WIFSIGNALED(child->status) ? WTERMSIG(child->status) : 0);
  write_output(out, "out-data", &child->out);
  write_output(out, "err-data", &child->err);
  buffer_printf(out, ",\"out-truncated\":%s,\"err-truncated\":%s,\"timed-out\":%s,\"duration-ms\":%lld}",
                child->out_truncated ? "true" : "false", child->err_truncated ? "true" : "false",
                child->timed_out ? "true" : "false", (long long)child->duration_ms);
}

int cmd_reset(const struct json *args, struct buffer *out, char *error, size_t size) {
  const char **paths;
  if (!json_get_strings(args, "paths", 256, &paths)) {
    snprintf(error, size, "'paths' must be an array of directory paths");
    return -1;
  }
  for (const char **p = paths; p != NULL && *p != NULL; p++)
    if ((*p)[0] != '/' || strcmp(*p, "/") == 0) {
      snprintf(error, size, "reset paths must be absolute directories other than /: '%.200s'", *p);
      free(paths);
      return -1;
    }
  int killed = process_kill_all();
  int result = 0;
  for (const char **p = paths; p != NULL && *p != NULL; p++)
    if (empty_directory(*p, error, size) != 0) result = -1;
  free(paths);
  /* SysV IPC objects belong to the IPC namespace, not to a process: only an agent
     that owns the guest (PID 1, as it kills everyone) removes them; one started on
     a host (a test) must not touch the host's. After the kill, none is attached. */
  int ipc_removed = 0;
  if (result == 0 && getpid() == 1) ipc_removed = ipc_remove_all(error, size);
  if (ipc_removed < 0) result = -1;
  if (result == 0) buffer_printf(out, "{\"killed\":%d,\"ipcRemoved\":%d}", killed, ipc_removed);
  return result;
}
