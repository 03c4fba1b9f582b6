/* User lookup for exec; see users.h. */
#define _GNU_SOURCE
#include "users.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Split a colon-separated line into at most `max` fields (in place). */
static int split_fields(char *line, char **fields, int max) {
  int n = 0;
  fields[n++] = line;
  for (char *c = line; *c && n < max; c++)
    if (*c == ':') { *c = 0; fields[n++] = c + 1; }
  return n;
}

static int parse_id(const char *text, unsigned long *out) {
  if (*text == 0) return 0;
  char *end;
  errno = 0;
  unsigned long v = strtoul(text, &end, 10);
  if (errno != 0 || *end != 0 || v > 0x7FFFFFFEul || text[0] == '-' || text[0] == '+') return 0;
  *out = v;
  return 1;
}

/* Find the passwd entry with this name (or, when name is NULL, this uid). */
static int find_passwd(const char *name, uid_t uid, struct user *out) {
  FILE *file = fopen("/etc/passwd", "re");
  if (file == NULL) return 0;
  char *line = NULL;
  size_t capacity = 0;
  int found = 0;
  while (!found && getline(&line, &capacity, file) >= 0) {
    line[strcspn(line, "\n")] = 0;
    char *f[7];
    if (split_fields(line, f, 7) < 7) continue;
    unsigned long u, g;
    if (!parse_id(f[2], &u) || !parse_id(f[3], &g)) continue;
    if (name != NULL ? strcmp(f[0], name) != 0 : u != uid) continue;
    out->uid = (uid_t)u;
    out->gid = (gid_t)g;
    snprintf(out->home, sizeof out->home, "%s", f[5][0] ? f[5] : "/");
    snprintf(out->name, sizeof out->name, "%s", f[0]);
    found = 1;
  }
  free(line);
  fclose(file);
  return found;
}

/* The groups of /etc/group that list the user as a member. */
static void add_supplementary_groups(struct user *user) {
  user->groups[0] = user->gid;
  user->group_count = 1;
  if (user->name[0] == 0) return;
  FILE *file = fopen("/etc/group", "re");
  if (file == NULL) return;
  char *line = NULL;
  size_t capacity = 0;
  while (user->group_count < MAX_GROUPS && getline(&line, &capacity, file) >= 0) {
    line[strcspn(line, "\n")] = 0;
    char *f[4];
    unsigned long g;
    if (split_fields(line, f, 4) < 4 || !parse_id(f[2], &g) || (gid_t)g == user->gid) continue;
    for (char *member = strtok(f[3], ","); member != NULL; member = strtok(NULL, ","))
      if (strcmp(member, user->name) == 0) { user->groups[user->group_count++] = (gid_t)g; break; }
  }
  free(line);
  fclose(file);
}

int user_resolve(const char *spec, struct user *out, char *error, size_t error_size) {
  memset(out, 0, sizeof *out);
  unsigned long uid, gid;
  char copy[128];
  if (strlen(spec) >= sizeof copy || spec[0] == 0) {
    snprintf(error, error_size, "user '%.64s' is not valid", spec);
    return -1;
  }
  snprintf(copy, sizeof copy, "%s", spec);
  char *colon = strchr(copy, ':');
  if (colon != NULL) *colon = 0;
  if (parse_id(copy, &uid)) {
    /* Numeric: the passwd entry gives the home and default group when there is one. */
    if (!find_passwd(NULL, (uid_t)uid, out)) {
      out->uid = (uid_t)uid;
      out->gid = (gid_t)uid;
      snprintf(out->home, sizeof out->home, "/");
    }
  } else if (colon != NULL) {
    snprintf(error, error_size, "user '%s' is not UID:GID", spec);
    return -1;
  } else if (!find_passwd(copy, 0, out)) {
    if (strcmp(copy, "root") != 0) {
      snprintf(error, error_size, "no user '%s' in /etc/passwd", spec);
      return -1;
    }
    snprintf(out->home, sizeof out->home, "/root"); /* root exists even without a passwd file */
    snprintf(out->name, sizeof out->name, "root");
  }
  if (colon != NULL) {
    if (!parse_id(colon + 1, &gid)) {
      snprintf(error, error_size, "user '%s' has a group that is not a number", spec);
      return -1;
    }
    out->gid = (gid_t)gid;
  }
  if (colon == NULL) add_supplementary_groups(out);
  else { out->groups[0] = out->gid; out->group_count = 1; } /* UID:GID means exactly that group */
  return 0;
}
