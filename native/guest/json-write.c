/* The output half of json.h: the growable buffer and the JSON writers. */
#define _GNU_SOURCE
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buffer_append(struct buffer *buffer, const void *data, size_t length) {
  if (buffer->failed || length == 0) return;
  if (buffer->length + length + 1 > buffer->capacity) {
    size_t capacity = buffer->capacity ? buffer->capacity : 256;
    while (capacity < buffer->length + length + 1) capacity *= 2;
    char *grown = realloc(buffer->data, capacity);
    if (grown == NULL) { buffer->failed = 1; return; }
    buffer->data = grown;
    buffer->capacity = capacity;
  }
  memcpy(buffer->data + buffer->length, data, length);
  buffer->length += length;
  buffer->data[buffer->length] = 0;
}

void buffer_append_str(struct buffer *buffer, const char *text) { buffer_append(buffer, text, strlen(text)); }

void buffer_printf(struct buffer *buffer, const char *format, ...) {
  char small[512];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(small, sizeof small, format, args);
  va_end(args);
  if (n < 0) return;
  if ((size_t)n < sizeof small) { buffer_append(buffer, small, (size_t)n); return; }
  char *large = malloc((size_t)n + 1);
  if (large == NULL) { buffer->failed = 1; return; }
  va_start(args, format);
  vsnprintf(large, (size_t)n + 1, format, args);
  va_end(args);
  buffer_append(buffer, large, (size_t)n);
  free(large);
}

void buffer_free(struct buffer *buffer) {
  free(buffer->data);
  buffer->data = NULL;
  buffer->length = buffer->capacity = 0;
  buffer->failed = 0;
}

void buffer_consume(struct buffer *buffer, size_t count) {
  if (count >= buffer->length) { buffer->length = 0; return; }
  memmove(buffer->data, buffer->data + count, buffer->length - count);
  buffer->length -= count;
}

/* Length of the valid UTF-8 sequence at s (0 when it is not one). */
static size_t utf8_sequence(const unsigned char *s, size_t left) {
  unsigned char c = s[0];
  size_t n;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
  else return 0;
  if (left < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void json_write_string(struct buffer *out, const char *text, size_t length) {
  const unsigned char *s = (const unsigned char *)text;
  buffer_append(out, "\"", 1);
  size_t run = 0; /* bytes copied as they are, flushed in one append */
  for (size_t i = 0; i < length;) {
    unsigned char c = s[i];
    const char *escape = NULL;
    char hex[8];
    size_t n = 1;
    if (c == '"') escape = "\\\"";
    else if (c == '\\') escape = "\\\\";
    else if (c == '\n') escape = "\\n";
    else if (c == '\r') escape = "\\r";
    else if (c == '\t') escape = "\\t";
    else if (c < 0x20 || c == 0x7F) { snprintf(hex, sizeof hex, "\\u%04x", c); escape = hex; }
    else if (c >= 0x80) {
      n = utf8_sequence(s + i, length - i);
      if (n == 0) { escape = "\\ufffd"; n = 1; }
    }
    if (escape != NULL) {
      buffer_append(out, text + i - run, run);
      run = 0;
      buffer_append_str(out, escape);
    } else {
      run += n;
    }
    i += n;
  }
  buffer_append(out, text + length - run, run);
  buffer_append(out, "\"", 1);
}

void json_write_key(struct buffer *out, const char *key, int first) {
  if (!first) buffer_append(out, ",", 1);
  json_write_string(out, key, strlen(key));
  buffer_append(out, ":", 1);
}

void json_write_value(struct buffer *out, const struct json *value) {
  switch (value->type) {
    case JSON_NULL: buffer_append_str(out, "null"); break;
    case JSON_BOOL: buffer_append_str(out, value->boolean ? "true" : "false"); break;
    case JSON_NUMBER:
      if (!isfinite(value->number)) buffer_append_str(out, "null");
      else if (value->number == floor(value->number) && fabs(value->number) < 1e15) buffer_printf(out, "%.0f", value->number);
      else buffer_printf(out, "%.17g", value->number);
      break;
    case JSON_STRING: json_write_string(out, value->string, value->length); break;
    case JSON_ARRAY:
    case JSON_OBJECT:
      buffer_append_str(out, value->type == JSON_ARRAY ? "[" : "{");
      for (size_t i = 0; i < value->count; i++) {
        if (value->type == JSON_OBJECT) json_write_key(out, value->keys[i], i == 0);
        else if (i > 0) buffer_append(out, ",", 1);
        json_write_value(out, value->items[i]);
      }
      buffer_append_str(out, value->type == JSON_ARRAY ? "]" : "}");
      break;
  }
}
