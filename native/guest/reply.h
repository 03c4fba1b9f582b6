/*
 * Writing to the host: answers ({"return": ...} or {"error": ...}, with the
 * request's id) and, in async mode, events ({"event": NAME, "data": ...},
 * never an id). All go through the transport's outgoing queue. Also the
 * connection's mode: sync (QGA, answers in request order) until the host
 * says dsec-hello, async (answers in any order, events) from then on.
 */
#ifndef DSEC_GUEST_REPLY_H
#define DSEC_GUEST_REPLY_H

#include <stddef.h>
#include "json.h"
#include "transport.h"

#define DSEC_GUEST_VERSION "2.0.0"
#define DSEC_GUEST_PROTOCOL 2

/* The current connection said dsec-hello. */
extern int async_mode;
/* +1 per dsec-hello: what an async process or run was started under. Its
   answers and events go out only while that hello's connection is current. */
extern unsigned async_generation;

void reply_init(struct transport *transport);
/* One answer line: the value, or the error when `error` is set. `prefix` (0xFF for guest-sync-delimited) goes first. */
void reply_send(const char *prefix, const struct buffer *value, const char *error_class, const char *error, const struct json *id);
void reply_value(const struct json *id, const struct buffer *value);
void reply_error(const struct json *id, const char *error_class, const char *desc);
/* Answer {} */
void reply_empty(const struct json *id);
/* {"event":name,"data":data}: dropped unless the connection is in async mode. */
void reply_event(const char *name, const struct buffer *data);
/* Whether answers and events for `generation` go out now. */
int reply_current(unsigned generation);
/* Drop what is queued and unsent (a host (re)connecting: it was for an earlier one). */
void reply_drop_queue(void);
/* The queue is over its high-water mark: stop reading output and requests. */
int reply_backpressure(void);

/* Remove `key`'s value from a parsed object and return it (the caller owns it), or NULL. */
struct json *json_take(struct json *object, const char *key);
/* ,"key":"<base64 of data>" */
void write_b64_member(struct buffer *out, const char *key, const void *data, size_t length);

#endif
