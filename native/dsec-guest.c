/*
 * dsec-guest: the guest agent of dsec's microVM, VM and FnCall sandboxes.
 *
 *   dsec-guest --serial PATH|auto [--init-mounts]
 *   dsec-guest --listen SOCKET
 *
 * It speaks the QEMU guest agent protocol (JSON objects one per line: see
 * /work/notes/ISSUE6.md and core/guest/client.ts, its host side), so a host
 * can treat it as qemu-ga, plus dsec extensions the host finds in guest-info:
 * dsec-exec (blocking exec with cwd, user, timeout and output caps),
 * dsec-reset, dsec-stat, dsec-mkdirs, dsec-chmod.
 *
 * --serial reads a character device: a virtio port (auto: the one named
 * org.qemu.guest_agent.0). When the host side goes away (a VM saved and
 * resumed reconnects it) the agent keeps waiting on the port.
 * --listen serves a unix socket, one connection at a time.
 *
 * It makes itself not dumpable, so no other process of the guest can ptrace
 * it or read its /proc files. dsec-reset also removes the SysV IPC objects
 * when the agent is PID 1 (see guest/ipc.h).
 *
 * As PID 1 it reaps every orphan. It writes nothing but answers to the
 * transport; diagnostics go to stderr. Static (gcc -static), so it runs in
 * any guest; that is why users are looked up by reading /etc/passwd itself.
 *
 * Built by scripts/build-native.mjs into dist/native/dsec-guest.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "guest/exec.h"
#include "guest/files.h"
#include "guest/json.h"
#include "guest/process.h"
#include "guest/transport.h"

#define VERSION "1.0.0"

typedef int (*command_fn)(const struct json *args, struct buffer *out, char *error, size_t error_size);

static int cmd_ping(const struct json *args, struct buffer *out, char *error, size_t size);
static int cmd_info(const struct json *args, struct buffer *out, char *error, size_t size);

/* NULL handlers are answered in handle_request itself (sync, dsec-exec). */
static const struct command {
  const char *name;
  command_fn run;
} COMMANDS[] = {
    {"guest-sync-delimited", NULL},
    {"guest-sync", NULL},
    {"guest-ping", cmd_ping},
    {"guest-info", cmd_info},
    {"guest-exec", cmd_guest_exec},
    {"guest-exec-status", cmd_guest_exec_status},
    {"guest-file-open", cmd_file_open},
    {"guest-file-read", cmd_file_read},
    {"guest-file-write", cmd_file_write},
    {"guest-file-seek", cmd_file_seek},
    {"guest-file-flush", cmd_file_flush},
    {"guest-file-close", cmd_file_close},
    {"dsec-exec", NULL},
    {"dsec-reset", cmd_reset},
    {"dsec-stat", cmd_stat},
    {"dsec-mkdirs", cmd_mkdirs},
    {"dsec-chmod", cmd_chmod},
};
#define COMMAND_COUNT (sizeof COMMANDS / sizeof COMMANDS[0])

static struct transport transport;
/* The dsec-exec being waited for (requests are answered in order, so no other is read meanwhile). */
static struct child *pending;
static struct json *pending_id;

static int cmd_ping(const struct json *args, struct buffer *out, char *error, size_t size) {
  (void)args; (void)error; (void)size;
  buffer_append_str(out, "{}");
  return 0;
}

static int cmd_info(const struct json *args, struct buffer *out, char *error, size_t size) {
  (void)args; (void)error; (void)size;
  buffer_append_str(out, "{\"version\":\"dsec-guest " VERSION "\",\"supported_commands\":[");
  for (size_t i = 0; i < COMMAND_COUNT; i++)
    buffer_printf(out, "%s{\"name\":\"%s\",\"enabled\":true,\"success-response\":true}", i ? "," : "", COMMANDS[i].name);
  buffer_append_str(out, "]}");
  return 0;
}

/* {"return": value, "id": id} or {"error": {...}, "id": id}, one line. */
static void send_answer(const char *prefix, const struct buffer *value, const char *error_class, const char *error,
                        const struct json *id) {
  struct buffer line = {0};
  if (prefix != NULL) buffer_append_str(&line, prefix);
  if (error == NULL && value != NULL && !value->failed) {
    buffer_append_str(&line, "{\"return\":");
    buffer_append(&line, value->data, value->length);
  } else {
    if (error == NULL) { error_class = "GenericError"; error = "out of memory writing the answer"; }
    buffer_append_str(&line, "{\"error\":{\"class\":");
    json_write_string(&line, error_class, strlen(error_class));
    buffer_append_str(&line, ",\"desc\":");
    json_write_string(&line, error, strlen(error));
    buffer_append_str(&line, "}");
  }
  if (id != NULL) {
    buffer_append_str(&line, ",\"id\":");
    json_write_value(&line, id);
  }
  buffer_append_str(&line, "}\n");
  if (line.failed) {
    static const char NO_MEMORY[] = "{\"error\":{\"class\":\"GenericError\",\"desc\":\"out of memory\"}}\n";
    transport_send(&transport, NO_MEMORY, sizeof NO_MEMORY - 1);
  } else {
    transport_send(&transport, line.data, line.length);
  }
  buffer_free(&line);
}

static void handle_request(const char *text, size_t length) {
  char error[1024] = {0};
  struct json *request = json_parse(text, length, error, sizeof error);
  if (request == NULL) { send_answer(NULL, NULL, "GenericError", error, NULL); return; }
  const struct json *id = json_get(request, "id");
  const char *name = json_get_string(request, "execute");
  const struct json *args = json_get(request, "arguments");
  const struct command *command = NULL;
  for (size_t i = 0; name != NULL && i < COMMAND_COUNT && command == NULL; i++)
    if (strcmp(COMMANDS[i].name, name) == 0) command = &COMMANDS[i];
  struct buffer value = {0};
  if (request->type != JSON_OBJECT || name == NULL) {
    send_answer(NULL, NULL, "GenericError", "a request is an object with an \"execute\" string", id);
  } else if (command == NULL) {
    snprintf(error, sizeof error, "The command %.200s has not been found", name);
    send_answer(NULL, NULL, "CommandNotFound", error, id);
  } else if (args != NULL && args->type != JSON_OBJECT) {
    send_answer(NULL, NULL, "GenericError", "\"arguments\" must be an object", id);
  } else if (strcmp(name, "guest-sync") == 0 || strcmp(name, "guest-sync-delimited") == 0) {
    const struct json *sync_id = json_get(args, "id");
    if (sync_id == NULL) {
      send_answer(NULL, NULL, "GenericError", "Parameter 'id' is missing", id);
    } else {
      json_write_value(&value, sync_id);
      send_answer(strcmp(name, "guest-sync") == 0 ? NULL : "\xff", &value, NULL, NULL, id);
    }
  } else if (strcmp(name, "dsec-exec") == 0) {
    if (dsec_exec_start(args, &pending, &value, error, sizeof error) != 0) send_answer(NULL, NULL, "GenericError", error, id);
    else if (pending == NULL) send_answer(NULL, &value, NULL, NULL, id);
    else if (id != NULL) {
      /* Kept for the answer: detach it from the request tree. */
      for (size_t i = 0; i < request->count; i++)
        if (request->items[i] == id) {
          pending_id = request->items[i];
          request->items[i] = NULL;
        }
    }
  } else if (command->run(args, &value, error, sizeof error) == 0) {
    send_answer(NULL, &value, NULL, NULL, id);
  } else {
    send_answer(NULL, NULL, "GenericError", error[0] ? error : "failed", id);
  }
  buffer_free(&value);
  /* json_free skips the detached id (a NULL item). */
  json_free(request);
}

static void finish_pending(void) {
  struct buffer value = {0};
  dsec_exec_result(pending, &value);
  send_answer(NULL, &value, NULL, NULL, pending_id);
  buffer_free(&value);
  process_release(pending);
  json_free(pending_id);
  pending = NULL;
  pending_id = NULL;
}

static void handle_lines(void) {
  char *line;
  size_t length, consume;
  if (transport.too_long) {
    transport.too_long = 0;
    send_answer(NULL, NULL, "GenericError", "the request line is longer than the agent accepts (32 MiB)", NULL);
  }
  while (pending == NULL && transport_next_line(&transport, &line, &length, &consume)) {
    size_t start = 0;
    while (start < length && (line[start] == ' ' || line[start] == '\t')) start++;
    if (start < length) handle_request(line + start, length - start);
    transport_consume(&transport, consume);
  }
}

/* The pseudo-filesystems a guest whose init is this agent needs (EBUSY: already there). */
static void init_mounts(void) {
  mkdir("/proc", 0555);
  mkdir("/sys", 0555);
  mkdir("/dev", 0755);
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  mkdir("/dev/pts", 0755);
  mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666");
}

static int usage(void) {
  fprintf(stderr, "usage: dsec-guest --serial PATH|auto [--init-mounts] | --listen SOCKET | --version\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *serial = NULL, *listen_path = NULL;
  int mounts = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--serial") == 0 && i + 1 < argc) serial = argv[++i];
    else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) listen_path = argv[++i];
    else if (strcmp(argv[i], "--init-mounts") == 0) mounts = 1;
    else if (strcmp(argv[i], "--version") == 0) { printf("dsec-guest %s\n", VERSION); return 0; }
    else return usage();
  }
  if ((serial == NULL) == (listen_path == NULL)) return usage();
  /* Not dumpable: another process of the guest, even root, cannot ptrace the agent,
     read its /proc/PID/environ, mem or fds, or take its connection (pidfd_getfd) to
     fake answers, without CAP_SYS_PTRACE (or, for environ and maps on recent kernels,
     CAP_PERFMON or CAP_SYS_ADMIN), which sandboxes do not get. What the agent execs
     is dumpable again: execve resets the flag for a program run as itself. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) { perror("dsec-guest: prctl(PR_SET_DUMPABLE)"); return 1; }
  if (mounts) init_mounts();
  int sigchld_fd = process_init();
  if (sigchld_fd < 0) { perror("dsec-guest: pipe"); return 1; }
  while (transport_open(&transport, serial != NULL, serial != NULL ? serial : listen_path) != 0) {
    if (getpid() != 1) return 1;
    sleep(1); /* PID 1 must not exit: the kernel would panic */
  }
  for (;;) {
    struct pollfd fds[2 + MAX_CHILDREN * 3];
    int count = 1, transport_at = -1, timeout = -1;
    fds[0] = (struct pollfd){sigchld_fd, POLLIN, 0};
    if (pending == NULL && transport_pollfd(&transport, &fds[count], &timeout)) transport_at = count++;
    process_add_pollfds(fds, &count, (int)(sizeof fds / sizeof fds[0]));
    timeout = process_poll_timeout(timeout);
    if (poll(fds, (nfds_t)count, timeout) < 0 && errno != EINTR) {
      perror("dsec-guest: poll");
      sleep(1);
      continue;
    }
    if (fds[0].revents) process_reap();
    process_service(fds, count);
    if (pending != NULL && process_done(pending)) finish_pending();
    if (transport_at >= 0 && fds[transport_at].revents) transport_ready(&transport, fds[transport_at].revents);
    handle_lines();
  }
}
