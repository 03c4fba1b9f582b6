/* Answers, events and the connection's mode; see reply.h. */
#define _GNU_SOURCE
#include "reply.h"

#include <stdlib.h>
#include <string.h>
#include "base64.h"

int async_mode;
unsigned async_generation;
static struct transport *transport;

void reply_init(struct transport *t) { transport = t; }

void reply_send(const char *prefix, const struct buffer *value, const char *error_class, const char *error, const struct json *id) {
  struct buffer line = {0};
  if (prefix != NULL) buffer_append_str(&line, prefix);
  if (error == NULL && value != NULL && !value->failed) {
    buffer_append_str(&line, "{\"return\":");
    buffer_append(&line, value->data, value->length);
  } else {
    if (error == NULL) { error_class = "GenericError"; error = "out of memory writing the answer"; }
    buffer_append_str(&line, "{\"error\":{\"class\":");
    json_write_string(&line, error_class, strlen(error_class));
    buffer_append_str(&line, ",\"desc\":");
    json_write_string(&line, error, strlen(error));
    buffer_append_str(&line, "}");
  }
  if (id != NULL) {
    buffer_append_str(&line, ",\"id\":");
    json_write_value(&line, id);
  }
  buffer_append_str(&line, "}\n");
  if (line.failed) {
    static const char NO_MEMORY[] = "{\"error\":{\"class\":\"GenericError\",\"desc\":\"out of memory\"}}\n";
    transport_send(transport, NO_MEMORY, sizeof NO_MEMORY - 1, 0);
  } else {
    transport_send(transport, line.data, line.length, 0);
  }
  buffer_free(&line);
}

void reply_value(const struct json *id, const struct buffer *value) { reply_send(NULL, value, NULL, NULL, id); }

void reply_error(const struct json *id, const char *error_class, const char *desc) { reply_send(NULL, NULL, error_class, desc, id); }

void reply_event(const char *name, const struct buffer *data) {
  if (!async_mode || data->failed) return;
  struct buffer line = {0};
  buffer_append_str(&line, "{\"event\":");
  json_write_string(&line, name, strlen(name));
  buffer_append_str(&line, ",\"data\":");
  buffer_append(&line, data->data, data->length);
  buffer_append_str(&line, "}\n");
  if (!line.failed) transport_send(transport, line.data, line.length, 1);
  buffer_free(&line);
}

int reply_current(unsigned generation) { return async_mode && generation == async_generation; }

void reply_drop_queue(void) { queue_clear(&transport->queue); }

int reply_backpressure(void) { return queue_over_high_water(&transport->queue); }

struct json *json_take(struct json *object, const char *key) {
  if (object == NULL || object->type != JSON_OBJECT) return NULL;
  for (size_t i = object->count; i-- > 0;) /* the last duplicate, as json_get */
    if (object->items[i] != NULL && strcmp(object->keys[i], key) == 0) {
      struct json *value = object->items[i];
      /* A JSON null stands in: json_free and json_get still see a whole tree. */
      struct json *placeholder = calloc(1, sizeof *placeholder);
      if (placeholder == NULL) return NULL;
      object->items[i] = placeholder;
      return value;
    }
  return NULL;
}

void write_b64_member(struct buffer *out, const char *key, const void *data, size_t length) {
  json_write_key(out, key, 0);
  buffer_append(out, "\"", 1);
  base64_encode(out, (const unsigned char *)data, length);
  buffer_append(out, "\"", 1);
}

void reply_empty(const struct json *id) {
  struct buffer ok = {0};
  buffer_append_str(&ok, "{}");
  reply_value(id, &ok);
  buffer_free(&ok);
}
