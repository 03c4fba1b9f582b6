/*
 * Users for exec, looked up by reading the guest's /etc/passwd and
 * /etc/group directly: getpwnam needs NSS modules a static glibc cannot load.
 */
#ifndef DSEC_GUEST_USERS_H
#define DSEC_GUEST_USERS_H

#include <stddef.h>
#include <sys/types.h>
#include "json.h"

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

/* A request's user fields: either `user` (a spec as above, *spec set) or the
   numeric `uid`, `gid` (required with uid), `groups` (at most 64) and `home`,
   which bypass /etc/passwd (*has_ids set, `ids` filled: exactly those groups,
   or just gid; HOME / when no home is given, /root for uid 0). Neither: both
   unset. Returns 0, or -1 with `error` filled. */
int user_arguments(const struct json *args, const char **spec, struct user *ids, int *has_ids, char *error, size_t error_size);

#endif
