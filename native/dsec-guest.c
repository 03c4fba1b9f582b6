/*
 * dsec-guest: the guest agent of dsec's sandboxes (container sandboxes run it
 * as PID 1; microVMs, VMs and FnCall workers too).
 *
 *   dsec-guest --serial PATH|auto [--init-mounts]
 *   dsec-guest --listen SOCKET
 *   dsec-guest --fds IN,OUT
 *
 * It speaks the QEMU guest agent protocol (JSON objects one per line: see
 * docs/guest-agent.md and core/guest/client.ts, its host side), so a host
 * can treat it as qemu-ga, plus dsec extensions the host finds in guest-info:
 * dsec-exec (blocking exec with cwd, user, timeout and output caps),
 * dsec-reset, dsec-stat, dsec-mkdirs, dsec-chmod, dsec-read-file,
 * dsec-write-file. After dsec-hello a connection is in async mode (protocol
 * 2, core/guest/mux.ts): requests carry ids and are answered in any order,
 * processes run in the foreground or background with streamed output,
 * stdin and terminals, and sessions keep a shell between runs.
 *
 * --serial reads a character device: a virtio port (auto: the one named
 * org.qemu.guest_agent.0). When the host side goes away (a VM saved and
 * resumed reconnects it) the agent keeps waiting on the port.
 * --listen serves a unix socket, one connection at a time.
 * --fds takes two inherited descriptors (a container's FIFO pair).
 *
 * It makes itself not dumpable, so no other process of the guest can ptrace
 * it or read its /proc files. dsec-reset also removes the SysV IPC objects
 * when the agent is PID 1 (see guest/ipc.h).
 *
 * As PID 1 it reaps every orphan and handles no signal but SIGCHLD, so none
 * from inside its pid namespace can stop it. It writes nothing but answers
 * and events to the transport; diagnostics go to stderr. Static (gcc
 * -static), so it runs in any guest; that is why users are looked up by
 * reading /etc/passwd itself. The main loop never blocks on anything a
 * sandbox process controls: every fd is non-blocking, answers are queued.
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
#include "guest/async.h"
#include "guest/commands.h"
#include "guest/exec.h"
#include "guest/files.h"
#include "guest/json.h"
#include "guest/pollset.h"
#include "guest/process.h"
#include "guest/reply.h"
#include "guest/session.h"
#include "guest/transport.h"

typedef int (*command_fn)(const struct json *args, struct buffer *out, char *error, size_t error_size);

static int cmd_ping(const struct json *args, struct buffer *out, char *error, size_t size);
static int cmd_info(const struct json *args, struct buffer *out, char *error, size_t size);

/* `run` answers at once with its value; `answer` writes its own answer (now
   or later); neither: handled in handle_request (the syncs, dsec-exec in sync
   mode). `async_only`: refused before dsec-hello. */
static const struct command {
  const char *name;
  command_fn run;
  answer_fn answer;
  int async_only;
} COMMANDS[] = {
    {"guest-sync-delimited", NULL, NULL, 0},
    {"guest-sync", NULL, NULL, 0},
    {"guest-ping", cmd_ping, NULL, 0},
    {"guest-info", cmd_info, NULL, 0},
    {"guest-exec", cmd_guest_exec, NULL, 0},
    {"guest-exec-status", cmd_guest_exec_status, NULL, 0},
    {"guest-file-open", cmd_file_open, NULL, 0},
    {"guest-file-read", cmd_file_read, NULL, 0},
    {"guest-file-write", cmd_file_write, NULL, 0},
    {"guest-file-seek", cmd_file_seek, NULL, 0},
    {"guest-file-flush", cmd_file_flush, NULL, 0},
    {"guest-file-close", cmd_file_close, NULL, 0},
    {"dsec-exec", NULL, cmd_async_exec, 0},
    {"dsec-reset", cmd_reset, NULL, 0},
    {"dsec-stat", cmd_stat, NULL, 0},
    {"dsec-mkdirs", cmd_mkdirs, NULL, 0},
    {"dsec-chmod", cmd_chmod, NULL, 0},
    {"dsec-read-file", NULL, cmd_read_file, 0},
    {"dsec-write-file", NULL, cmd_write_file, 0},
    {"dsec-hello", NULL, cmd_hello, 0},
    {"dsec-input", NULL, cmd_input, 1},
    {"dsec-signal", NULL, cmd_signal, 1},
    {"dsec-resize", NULL, cmd_resize, 1},
    {"dsec-wait", NULL, cmd_wait, 1},
    {"dsec-output", NULL, cmd_output, 1},
    {"dsec-procs", NULL, cmd_procs, 1},
    {"dsec-forget", NULL, cmd_forget, 1},
    {"dsec-session-open", NULL, cmd_session_open, 1},
    {"dsec-session-run", NULL, cmd_session_run, 1},
    {"dsec-session-interrupt", NULL, cmd_session_interrupt, 1},
    {"dsec-session-close", NULL, cmd_session_close, 1},
    {"dsec-sessions", NULL, cmd_sessions, 1},
};
#define COMMAND_COUNT (sizeof COMMANDS / sizeof COMMANDS[0])

static struct transport transport;
/* Sync mode's dsec-exec being waited for (requests are answered in order, so no other is read meanwhile). */
static struct child *pending;
static struct json *pending_id;

static int cmd_ping(const struct json *args, struct buffer *out, char *error, size_t size) {
  (void)args; (void)error; (void)size;
  buffer_append_str(out, "{}");
  return 0;
}

static int cmd_info(const struct json *args, struct buffer *out, char *error, size_t size) {
  (void)args; (void)error; (void)size;
  buffer_append_str(out, "{\"version\":\"dsec-guest " DSEC_GUEST_VERSION "\",\"supported_commands\":[");
  for (size_t i = 0; i < COMMAND_COUNT; i++)
    buffer_printf(out, "%s{\"name\":\"%s\",\"enabled\":true,\"success-response\":true}", i ? "," : "", COMMANDS[i].name);
  buffer_append_str(out, "]}");
  return 0;
}

static void run_sync(const char *name, const struct json *args, const struct json *id) {
  const struct json *sync_id = json_get(args, "id");
  if (sync_id == NULL) { reply_error(id, "GenericError", "Parameter 'id' is missing"); return; }
  int delimited = strcmp(name, "guest-sync-delimited") == 0;
  if (delimited) {
    /* A host (re)connecting: what is still queued was for an earlier one (a
       line cut half-way is fine: the 0xFF tells the host where to start), and
       this one is in sync mode until its own dsec-hello, so nothing of the
       previous host's (late answers, events) reaches it meanwhile. */
    reply_drop_queue();
    async_mode = 0;
  }
  struct buffer value = {0};
  json_write_value(&value, sync_id);
  reply_send(delimited ? "\xff" : NULL, &value, NULL, NULL, id);
  buffer_free(&value);
}

static void handle_request(const char *text, size_t length) {
  char error[1024] = {0};
  struct json *request = json_parse(text, length, error, sizeof error);
  if (request == NULL) { reply_error(NULL, "GenericError", error); return; }
  struct json *id = json_take(request, "id"); /* ours: an answer given later keeps it */
  const char *name = json_get_string(request, "execute");
  const struct json *args = json_get(request, "arguments");
  const struct command *command = NULL;
  for (size_t i = 0; name != NULL && i < COMMAND_COUNT && command == NULL; i++)
    if (strcmp(COMMANDS[i].name, name) == 0) command = &COMMANDS[i];
  int is_sync = command != NULL && strncmp(name, "guest-sync", 10) == 0;
  struct buffer value = {0};
  if (request->type != JSON_OBJECT || name == NULL) {
    reply_error(id, "GenericError", "a request is an object with an \"execute\" string");
  } else if (command == NULL) {
    snprintf(error, sizeof error, "The command %.200s has not been found", name);
    reply_error(id, "CommandNotFound", error);
  } else if (args != NULL && args->type != JSON_OBJECT) {
    reply_error(id, "GenericError", "\"arguments\" must be an object");
  } else if (async_mode && id == NULL && !is_sync) {
    /* Answers come in any order: one without an id could not be told apart. */
    reply_error(NULL, "GenericError", "in async mode every request needs an \"id\"; not run");
  } else if (is_sync) {
    run_sync(name, args, id);
  } else if (command->async_only && !async_mode) {
    snprintf(error, sizeof error, "%s is an async-mode command: send dsec-hello first", name);
    reply_error(id, "GenericError", error);
  } else if (strcmp(name, "dsec-exec") == 0 && !async_mode) {
    if (dsec_exec_start(args, &pending, &value, error, sizeof error) != 0) reply_error(id, "GenericError", error);
    else if (pending == NULL) reply_value(id, &value);
    else { pending_id = id; id = NULL; } /* answered when it ends */
  } else if (command->answer != NULL) {
    command->answer(args, &id);
  } else if (command->run(args, &value, error, sizeof error) == 0) {
    reply_value(id, &value);
  } else {
    reply_error(id, "GenericError", error[0] ? error : "failed");
  }
  buffer_free(&value);
  json_free(id);
  json_free(request);
}

static void finish_pending(void) {
  struct buffer value = {0};
  dsec_exec_result(pending, &value);
  reply_value(pending_id, &value);
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
    reply_error(NULL, "GenericError", "the request line is longer than the agent accepts (32 MiB)");
  }
  /* Under back-pressure the rest waits: their answers would only grow the queue. */
  while (pending == NULL && !reply_backpressure() && transport_next_line(&transport, &line, &length, &consume)) {
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
  fprintf(stderr, "usage: dsec-guest --serial PATH|auto [--init-mounts] | --listen SOCKET | --fds IN,OUT | --version\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *serial = NULL, *listen_path = NULL, *fds = NULL;
  int mounts = 0, in_fd = -1, out_fd = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--serial") == 0 && i + 1 < argc) serial = argv[++i];
    else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) listen_path = argv[++i];
    else if (strcmp(argv[i], "--fds") == 0 && i + 1 < argc) fds = argv[++i];
    else if (strcmp(argv[i], "--init-mounts") == 0) mounts = 1;
    else if (strcmp(argv[i], "--version") == 0) { printf("dsec-guest %s\n", DSEC_GUEST_VERSION); return 0; }
    else return usage();
  }
  char end;
  if ((serial != NULL) + (listen_path != NULL) + (fds != NULL) != 1) return usage();
  if (fds != NULL && (sscanf(fds, "%d,%d%c", &in_fd, &out_fd, &end) != 2 || in_fd < 0 || out_fd < 0)) return usage();
  /* Not dumpable: another process of the guest, even root, cannot ptrace the agent,
     read its /proc/PID/environ, mem or fds, or take its connection (pidfd_getfd) to
     fake answers, without CAP_SYS_PTRACE (or, for environ and maps on recent kernels,
     CAP_PERFMON or CAP_SYS_ADMIN), which sandboxes do not get. What the agent execs
     is dumpable again: execve resets the flag for a program run as itself. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) { perror("dsec-guest: prctl(PR_SET_DUMPABLE)"); return 1; }
  if (fds != NULL && transport_open_fds(&transport, in_fd, out_fd) != 0) return 1; /* first: CLOEXEC before anything forks */
  if (mounts) init_mounts();
  int sigchld_fd = process_init();
  if (sigchld_fd < 0) { perror("dsec-guest: pipe"); return 1; }
  while (fds == NULL && transport_open(&transport, serial != NULL, serial != NULL ? serial : listen_path) != 0) {
    if (getpid() != 1) return 1;
    sleep(1); /* PID 1 must not exit: the kernel would panic */
  }
  reply_init(&transport);
  struct pollset set = {0};
  unsigned connection = transport.connection;
  for (;;) {
    int timeout = -1;
    pollset_reset(&set);
    int sigchld_at = pollset_add(&set, sigchld_fd, POLLIN);
    transport_add_pollfds(&transport, &set, &timeout, pending == NULL && !reply_backpressure());
    process_add_pollfds(&set);
    process_poll_timeout(&timeout);
    async_add_pollfds(&set, &timeout);
    session_add_pollfds(&set, &timeout);
    linger_add_pollfds(&set);
    if (set.failed) timeout_lower(&timeout, 100); /* out of memory for the array: look again soon */
    if (poll(set.fds, (nfds_t)set.count, timeout) < 0 && errno != EINTR) {
      perror("dsec-guest: poll");
      sleep(1);
      continue;
    }
    if (pollset_revents(&set, sigchld_at)) process_reap();
    process_service(&set);
    async_service(&set);
    session_service(&set);
    linger_service(&set);
    if (pending != NULL && process_done(pending)) finish_pending();
    transport_ready(&transport, &set);
    if (transport.connection != connection) { /* a new socket connection: a new host, in sync mode until its hello */
      connection = transport.connection;
      async_mode = 0;
    }
    handle_lines();
  }
}
