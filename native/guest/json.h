/*
 * JSON for the guest agent protocol: a parser into a small value tree and a
 * growable output buffer with writers. Everything a host sends is untrusted,
 * so the parser bounds nesting, rejects what is not JSON and never crashes
 * on garbage; strings keep their length (a \u0000 inside is kept, and the
 * accessors that want a C string refuse it).
 */
#ifndef DSEC_GUEST_JSON_H
#define DSEC_GUEST_JSON_H

#include <stddef.h>
#include <stdint.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
  enum json_type type;
  int boolean;
  double number;
  char *string; /* JSON_STRING: NUL-terminated copy, may hold NULs within `length` */
  size_t length;
  /* JSON_ARRAY and JSON_OBJECT: `count` items; objects also have keys. */
  struct json **items;
  char **keys;
  size_t count;
};

/* Parse one JSON value filling the whole of text[0..length) (whitespace around
   is fine). Returns NULL and fills `error` (at least 128 bytes) when it is not. */
struct json *json_parse(const char *text, size_t length, char *error, size_t error_size);
void json_free(struct json *value);

/* Lookups: NULL when absent or of another type. */
const struct json *json_get(const struct json *object, const char *key);
/* A string member without NULs inside, or NULL. */
const char *json_get_string(const struct json *object, const char *key);
/* An integer member: returns 1 and sets *out when present and integral within [min,max]. */
int json_get_int(const struct json *object, const char *key, int64_t min, int64_t max, int64_t *out);

/* An array of strings without NULs as a malloc'd NULL-terminated list (the
   strings stay owned by the tree). Returns 1 when absent (*out = NULL), 1 when
   valid, 0 when present but not an array of such strings (or too long). */
int json_get_strings(const struct json *object, const char *key, size_t max, const char ***out);

/* An output buffer. On allocation failure it sets `failed` and stops growing. */
struct buffer {
  char *data;
  size_t length;
  size_t capacity;
  int failed;
};

void buffer_append(struct buffer *buffer, const void *data, size_t length);
void buffer_append_str(struct buffer *buffer, const char *text);
void buffer_printf(struct buffer *buffer, const char *format, ...) __attribute__((format(printf, 2, 3)));
void buffer_free(struct buffer *buffer);
/* Drop the first `count` bytes. */
void buffer_consume(struct buffer *buffer, size_t count);

/* A JSON string literal: escapes quotes, backslashes and control bytes, and
   writes invalid UTF-8 as U+FFFD, so the output is always valid JSON. */
void json_write_string(struct buffer *out, const char *text, size_t length);
/* "key": (with a comma first unless `first`). */
void json_write_key(struct buffer *out, const char *key, int first);
/* Any parsed value written back (used to echo a request's "id"). */
void json_write_value(struct buffer *out, const struct json *value);

/* A JSON bool argument: `fallback` when absent; -1 when present and not a bool. */
int bool_argument(const struct json *args, const char *key, int fallback, int *out);

#endif
