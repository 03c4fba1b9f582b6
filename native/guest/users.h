/*
 * Users for exec, looked up by reading the guest's /etc/passwd and
 * /etc/group directly: getpwnam needs NSS modules a static glibc cannot load.
 */
#ifndef DSEC_GUEST_USERS_H
#define DSEC_GUEST_USERS_H

#include <sys/types.h>

#define MAX_GROUPS 64

struct user {
  uid_t uid;
  gid_t gid;
  gid_t groups[MAX_GROUPS]; /* supplementary groups from /etc/group, and gid */
  int group_count;
  char home[256];
  char name[64];
};

/* "root", "UID", "UID:GID" or a name from /etc/passwd. Returns 0, or -1 with
   `error` filled. */
int user_resolve(const char *spec, struct user *out, char *error, size_t error_size);

#endif
