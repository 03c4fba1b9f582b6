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
#define SEND_TIMEOUT_MS 10000

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
  t->fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
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

int transport_open(struct transport *t, int serial, const char *path) {
  memset(t, 0, sizeof *t);
  t->serial = serial;
  t->path = path;
  t->fd = t->listen_fd = -1;
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

/* The peer went away: forget its half-sent line. */
static void drop_peer(struct transport *t) {
  t->in.length = 0;
  t->scanned = 0;
  t->discarding = 0;
  if (!t->serial && t->fd >= 0) {
    close(t->fd);
    t->fd = -1;
  } else if (t->serial) {
    t->quiet_until = now_ms() + SERIAL_QUIET_MS;
  }
}

int transport_pollfd(struct transport *t, struct pollfd *fd, int *timeout_ms) {
  if (t->serial) {
    int64_t left = t->quiet_until - now_ms();
    if (left <= 0 && t->fd < 0 && open_serial(t) != 0) {
      t->quiet_until = now_ms() + 1000; /* not there: look again in a second */
      left = 1000;
    }
    if (left > 0) {
      if (*timeout_ms < 0 || left < *timeout_ms) *timeout_ms = (int)left;
      return 0;
    }
  }
  int which = t->fd >= 0 ? t->fd : t->listen_fd;
  *fd = (struct pollfd){which, POLLIN, 0};
  return 1;
}

void transport_ready(struct transport *t, short revents) {
  if (!t->serial && t->fd < 0) {
    t->fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    return;
  }
  char chunk[65536];
  for (int rounds = 0; rounds < 64; rounds++) {
    ssize_t n = read(t->fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (t->serial && (revents & POLLHUP)) drop_peer(t);
      return;
    }
    if (n < 0 && t->serial) { /* the port went away (unplugged, driver reloaded): reopen it */
      close(t->fd);
      t->fd = -1;
      drop_peer(t);
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

int transport_send(struct transport *t, const char *data, size_t length) {
  if (t->fd < 0) return -1;
  int64_t deadline = now_ms() + SEND_TIMEOUT_MS;
  size_t done = 0;
  while (done < length) {
    ssize_t n = write(t->fd, data + done, length - done);
    if (n > 0) { done += (size_t)n; continue; }
    if (n < 0 && errno == EINTR) continue;
    int64_t left = deadline - now_ms();
    if (n < 0 && errno == EAGAIN && left > 0) {
      struct pollfd fd = {t->fd, POLLOUT, 0};
      poll(&fd, 1, (int)left);
      continue;
    }
    if (!t->serial) drop_peer(t); /* EPIPE, a reset, or a peer that stopped reading */
    return -1;
  }
  return 0;
}
