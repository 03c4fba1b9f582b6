/* The agent's transport; see transport.h. */
#define _GNU_SOURCE
#include "transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>
#include "process.h"

/* How long to leave a serial port whose host side is away before looking again
   (as qemu-ga: such a port reports hang-up continuously). */
#define SERIAL_QUIET_MS 100
/* OUT's pipe size for --fds: room for a few large answers while the host reads. */
#define FDS_PIPE_SIZE (1024 * 1024)

/* /dev/<port> for the virtio port named org.qemu.guest_agent.0 (made with mknod
   when devtmpfs did not create it). Returns 0 with `device` filled, or -1. */
static int find_virtio_port(char *device, size_t size) {
  DIR *ports = opendir("/sys/class/virtio-ports");
  if (ports == NULL) return -1;
  struct dirent *entry;
  int found = -1;
  while (found != 0 && (entry = readdir(ports)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    char path[512], name[128] = {0}, numbers[32] = {0};
    snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", entry->d_name);
    FILE *file = fopen(path, "re");
    if (file == NULL) continue;
    char *got = fgets(name, sizeof name, file);
    fclose(file);
    if (got == NULL || strncmp(name, QGA_PORT_NAME, strlen(QGA_PORT_NAME)) != 0) continue;
    snprintf(device, size, "/dev/%s", entry->d_name);
    found = 0;
    struct stat st;
    if (stat(device, &st) == 0) continue;
    snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/dev", entry->d_name);
    file = fopen(path, "re");
    unsigned major_number, minor_number;
    if (file != NULL && fgets(numbers, sizeof numbers, file) != NULL && sscanf(numbers, "%u:%u", &major_number, &minor_number) == 2)
      mknod(device, S_IFCHR | 0600, makedev(major_number, minor_number));
    if (file != NULL) fclose(file);
  }
  closedir(ports);
  return found;
}

static int open_serial(struct transport *t) {
  char device[300];
  const char *path = t->path;
  if (strcmp(path, "auto") == 0) {
    if (find_virtio_port(device, sizeof device) != 0) return -1;
    path = device;
  }
  t->fd = t->out_fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (t->fd < 0) return -1;
  if (isatty(t->fd)) {
    struct termios mode;
    if (tcgetattr(t->fd, &mode) == 0) {
      cfmakeraw(&mode);
      tcsetattr(t->fd, TCSANOW, &mode);
    }
  }
  return 0;
}

static void transport_init(struct transport *t, enum transport_kind kind, const char *path) {
  memset(t, 0, sizeof *t);
  t->kind = kind;
  t->path = path;
  t->fd = t->out_fd = t->listen_fd = -1;
  t->in_index = t->out_index = -1;
}

int transport_open(struct transport *t, int serial, const char *path) {
  transport_init(t, serial ? TRANSPORT_SERIAL : TRANSPORT_SOCKET, path);
  if (serial) {
    /* The port may not exist yet (its module loading): the main loop retries. */
    if (open_serial(t) != 0) fprintf(stderr, "dsec-guest: %s is not there yet (%s); retrying\n", path, strerror(errno));
    return 0;
  }
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof address.sun_path) {
    fprintf(stderr, "dsec-guest: socket path too long: %s\n", path);
    return -1;
  }
  strcpy(address.sun_path, path);
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path); /* a stale socket of an earlier run */
  t->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (t->listen_fd < 0 || bind(t->listen_fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(t->listen_fd, 8) != 0) {
    fprintf(stderr, "dsec-guest: cannot listen on %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

int transport_open_fds(struct transport *t, int in_fd, int out_fd) {
  transport_init(t, TRANSPORT_FDS, "--fds");
  struct stat st;
  if (in_fd < 0 || out_fd < 0 || fstat(in_fd, &st) != 0 || fstat(out_fd, &st) != 0) {
    fprintf(stderr, "dsec-guest: --fds %d,%d: %s\n", in_fd, out_fd, strerror(errno ? errno : EBADF));
    return -1;
  }
  /* At once: a child must never inherit the host's stream (every fd the agent
     opens later is close-on-exec too). Non-blocking both ways: a host that
     stops reading fills OUT, and the queue takes over. */
  for (int i = 0; i < 2; i++) {
    int fd = i == 0 ? in_fd : out_fd;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  fcntl(out_fd, F_SETPIPE_SZ, FDS_PIPE_SIZE); /* not a pipe, or over the system's maximum: the default will do */
  t->fd = in_fd;
  t->out_fd = out_fd;
  return 0;
}

/* The peer went away: forget its half-sent line, and for a socket what was queued for it. */
static void drop_peer(struct transport *t) {
  t->in.length = 0;
  t->scanned = 0;
  t->discarding = 0;
  if (t->kind == TRANSPORT_SOCKET && t->fd >= 0) {
    close(t->fd);
    t->fd = t->out_fd = -1;
    queue_clear(&t->queue);
  } else if (t->kind == TRANSPORT_SERIAL) {
    t->quiet_until = now_ms() + SERIAL_QUIET_MS;
  }
}

void transport_add_pollfds(struct transport *t, struct pollset *set, int *timeout_ms, int reading) {
  t->in_index = t->out_index = -1;
  if (t->kind == TRANSPORT_SERIAL) {
    int64_t left = t->quiet_until - now_ms();
    if (left <= 0 && t->fd < 0 && open_serial(t) != 0) {
      t->quiet_until = now_ms() + 1000; /* not there: look again in a second */
      left = 1000;
    }
    if (left > 0) {
      timeout_lower(timeout_ms, left);
      return;
    }
  }
  if (t->kind == TRANSPORT_SOCKET && t->fd < 0) {
    t->in_index = pollset_add(set, t->listen_fd, POLLIN);
    return;
  }
  if (reading && !t->in_eof) t->in_index = pollset_add(set, t->fd, POLLIN);
  if (!queue_empty(&t->queue) && !t->out_broken) t->out_index = pollset_add(set, t->out_fd, POLLOUT);
}

static void read_requests(struct transport *t, short revents) {
  char chunk[65536];
  for (int rounds = 0; rounds < 64; rounds++) {
    ssize_t n = read(t->fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (t->kind == TRANSPORT_SERIAL && (revents & POLLHUP)) drop_peer(t);
      return;
    }
    if (n < 0 && t->kind == TRANSPORT_SERIAL) { /* the port went away (unplugged, driver reloaded): reopen it */
      close(t->fd);
      t->fd = t->out_fd = -1;
      drop_peer(t);
      return;
    }
    if (n <= 0 && t->kind == TRANSPORT_FDS) {
      /* IN is held read-write in production, so this is a plain pipe whose
         writers are gone: nothing more will come. As PID 1 the agent must not
         exit; it stops reading and keeps serving its processes. */
      fprintf(stderr, "dsec-guest: --fds IN %s: no longer reading requests\n", n == 0 ? "reached end-of-file" : strerror(errno));
      t->in_eof = 1;
      return;
    }
    if (n <= 0) { drop_peer(t); return; }
    if (t->discarding) { /* keep only what follows the over-long line's end */
      char *newline = memchr(chunk, '\n', (size_t)n);
      if (newline == NULL) continue;
      t->discarding = 0;
      buffer_append(&t->in, newline + 1, (size_t)(chunk + n - newline - 1));
    } else {
      buffer_append(&t->in, chunk, (size_t)n);
    }
    if (t->in.failed || (t->in.length > MAX_REQUEST_LINE && memchr(t->in.data + t->scanned, '\n', t->in.length - t->scanned) == NULL)) {
      buffer_free(&t->in);
      t->scanned = 0;
      t->discarding = 1;
      t->too_long = 1;
    }
    if ((size_t)n < sizeof chunk) return;
  }
}

static void flush(struct transport *t) {
  if (t->out_fd < 0 || t->out_broken || queue_flush(&t->queue, t->out_fd) == 0) return;
  if (t->kind == TRANSPORT_SOCKET) {
    drop_peer(t); /* EPIPE, a reset */
  } else if (t->kind == TRANSPORT_FDS) {
    fprintf(stderr, "dsec-guest: --fds OUT: %s: answers are dropped from now on\n", strerror(errno));
    t->out_broken = 1;
    queue_clear(&t->queue);
  } else {
    queue_clear(&t->queue); /* the port failed: the next host syncs anyway */
  }
}

void transport_ready(struct transport *t, const struct pollset *set) {
  short in = pollset_revents(set, t->in_index), out = pollset_revents(set, t->out_index);
  if (in && t->kind == TRANSPORT_SOCKET && t->fd < 0) {
    t->fd = t->out_fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (t->fd >= 0) t->connection++;
    return;
  }
  if (in && t->fd >= 0) read_requests(t, in);
  if (out) flush(t);
}

int transport_next_line(struct transport *t, char **line, size_t *length, size_t *consume) {
  if (t->in.length <= t->scanned) return 0;
  char *newline = memchr(t->in.data + t->scanned, '\n', t->in.length - t->scanned);
  if (newline == NULL) {
    t->scanned = t->in.length;
    return 0;
  }
  char *start = t->in.data;
  size_t end = (size_t)(newline - start);
  *consume = end + 1;
  for (size_t i = end; i-- > 0;)
    if ((unsigned char)start[i] == 0xFF) { start += i + 1; end -= i + 1; break; }
  if (end > 0 && start[end - 1] == '\r') end--;
  *line = start;
  *length = end;
  return 1;
}

void transport_consume(struct transport *t, size_t count) {
  buffer_consume(&t->in, count);
  t->scanned = 0;
}

void transport_send(struct transport *t, const char *data, size_t length, int event) {
  if (t->out_fd < 0 || t->out_broken) return; /* no host (a socket between connections): nobody to tell */
  queue_push(&t->queue, data, length, event);
  flush(t);
}
