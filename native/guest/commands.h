/*
 * Commands that write their own answers (reply.h), now or later: async
 * mode's (the answer may come after other requests' answers) and the file
 * commands that answer with an error class. Each takes the request's
 * arguments and its id, which it may keep for a later answer (setting *id to
 * NULL: it then owns it). The caller frees an id left in place.
 */
#ifndef DSEC_GUEST_COMMANDS_H
#define DSEC_GUEST_COMMANDS_H

#include "json.h"

typedef void (*answer_fn)(const struct json *args, struct json **id);

/* async-cmds.c */
void cmd_hello(const struct json *args, struct json **id);
void cmd_async_exec(const struct json *args, struct json **id);
void cmd_input(const struct json *args, struct json **id);
void cmd_signal(const struct json *args, struct json **id);
void cmd_resize(const struct json *args, struct json **id);
void cmd_wait(const struct json *args, struct json **id);
void cmd_output(const struct json *args, struct json **id);
void cmd_procs(const struct json *args, struct json **id);
void cmd_forget(const struct json *args, struct json **id);
/* session.c */
void cmd_session_open(const struct json *args, struct json **id);
void cmd_session_run(const struct json *args, struct json **id);
void cmd_session_interrupt(const struct json *args, struct json **id);
void cmd_session_close(const struct json *args, struct json **id);
void cmd_sessions(const struct json *args, struct json **id);
/* file-io.c (sync and async mode) */
void cmd_read_file(const struct json *args, struct json **id);
void cmd_write_file(const struct json *args, struct json **id);

#endif
