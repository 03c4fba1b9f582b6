/* User lookup for exec; see users.h. */
#define _GNU_SOURCE
#include "users.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Open a user database read-only, refusing anything but a regular file: sandbox
   code may plant a FIFO at /etc/passwd, and opening or reading one would hang
   the agent. */
static FILE *open_database(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0) return NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return NULL; }
  FILE *file = fdopen(fd, "r");
  if (file == NULL) close(fd);
  return file;
}

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
  FILE *file = open_database("/etc/passwd");
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
  FILE *file = open_database("/etc/group");
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

int user_arguments(const struct json *args, const char **spec, struct user *ids, int *has_ids, char *error, size_t size) {
  *spec = NULL;
  *has_ids = 0;
  const struct json *user = json_get(args, "user");
  int numeric = json_get(args, "uid") != NULL || json_get(args, "gid") != NULL || json_get(args, "groups") != NULL || json_get(args, "home") != NULL;
  if (user != NULL && numeric) { snprintf(error, size, "give either 'user' or 'uid'/'gid'/'groups'/'home', not both"); return -1; }
  if (user != NULL) {
    *spec = json_get_string(args, "user");
    if (*spec == NULL) { snprintf(error, size, "'user' must be a string"); return -1; }
    return 0;
  }
  if (!numeric) return 0;
  int64_t uid, gid;
  memset(ids, 0, sizeof *ids);
  if (!json_get_int(args, "uid", 0, 0x7FFFFFFE, &uid) || !json_get_int(args, "gid", 0, 0x7FFFFFFE, &gid)) {
    snprintf(error, size, "'uid' and 'gid' must both be given, as integers from 0 to 2147483646");
    return -1;
  }
  ids->uid = (uid_t)uid;
  ids->gid = (gid_t)gid;
  const struct json *groups = json_get(args, "groups");
  if (groups != NULL && groups->type != JSON_NULL) {
    if (groups->type != JSON_ARRAY || groups->count > MAX_GROUPS) { snprintf(error, size, "'groups' must be an array of at most %d group ids", MAX_GROUPS); return -1; }
    for (size_t i = 0; i < groups->count; i++) {
      const struct json *g = groups->items[i];
      if (g->type != JSON_NUMBER || !(g->number >= 0 && g->number <= 0x7FFFFFFE) || g->number != floor(g->number)) {
        snprintf(error, size, "'groups' must be an array of at most %d group ids", MAX_GROUPS);
        return -1;
      }
      ids->groups[ids->group_count++] = (gid_t)g->number;
    }
  } else {
    ids->groups[0] = ids->gid;
    ids->group_count = 1;
  }
  const struct json *home = json_get(args, "home");
  if (home != NULL) {
    const char *text = json_get_string(args, "home");
    if (text == NULL || text[0] != '/' || strlen(text) >= sizeof ids->home) { snprintf(error, size, "'home' must be an absolute path shorter than %zu bytes", sizeof ids->home); return -1; }
    snprintf(ids->home, sizeof ids->home, "%s", text);
  } else {
    snprintf(ids->home, sizeof ids->home, "%s", uid == 0 ? "/root" : "/");
  }
  *has_ids = 1;
  return 0;
}
