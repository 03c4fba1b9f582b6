/* Pseudo-terminals; see pty.h. */
#define _GNU_SOURCE
#include "pty.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

int pty_open(int *master, int *slave, unsigned short rows, unsigned short cols, char *error, size_t size) {
  *master = *slave = -1;
  int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) {
    snprintf(error, size, "failed to open a pseudo-terminal (/dev/ptmx): %s", strerror(errno));
    if (m >= 0) close(m);
    return -1;
  }
  /* Through the master, not by name: sandbox code cannot swap the path under us. */
  int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (s < 0 && (errno == EINVAL || errno == ENOTTY)) { /* a kernel before 4.13 */
    char name[128];
    if (ptsname_r(m, name, sizeof name) == 0) s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  }
  if (s < 0) {
    snprintf(error, size, "failed to open the pseudo-terminal's slave: %s", strerror(errno));
    close(m);
    return -1;
  }
  pty_resize(m, rows, cols);
  fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
  *master = m;
  *slave = s;
  return 0;
}

int pty_resize(int master, unsigned short rows, unsigned short cols) {
  struct winsize size = {.ws_row = rows, .ws_col = cols};
  return ioctl(master, TIOCSWINSZ, &size);
}

int pty_child_setup(int slave) {
  if (setsid() < 0) return -1;
  if (ioctl(slave, TIOCSCTTY, 0) != 0) return -1;
  if (dup2(slave, 0) < 0 || dup2(slave, 1) < 0 || dup2(slave, 2) < 0) return -1;
  return 0;
}

unsigned char pty_eof_char(int master) {
  struct termios mode;
  /* On Linux the master reports the terminal's (the slave's) settings. */
  if (tcgetattr(master, &mode) == 0 && mode.c_cc[VEOF] != 0 && mode.c_cc[VEOF] != _POSIX_VDISABLE) return mode.c_cc[VEOF];
  return 0x04;
}
