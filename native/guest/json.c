/* The JSON parser of the guest agent (the writers are in json-write.c); see json.h. */
#define _GNU_SOURCE
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting than the protocol ever uses is refused instead of recursing on. */
#define MAX_DEPTH 32

struct parser {
  const char *text;
  size_t length;
  size_t at;
  char *error;
  size_t error_size;
};

static struct json *parse_value(struct parser *p, int depth);

static void fail(struct parser *p, const char *what) {
  if (p->error[0] == 0) snprintf(p->error, p->error_size, "invalid JSON at byte %zu: %s", p->at, what);
}

static void skip_space(struct parser *p) {
  while (p->at < p->length) {
    char c = p->text[p->at];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->at++;
  }
}

static struct json *new_value(struct parser *p, enum json_type type) {
  struct json *value = calloc(1, sizeof *value);
  if (value == NULL) fail(p, "out of memory");
  else value->type = type;
  return value;
}

void json_free(struct json *value) {
  if (value == NULL) return;
  for (size_t i = 0; i < value->count; i++) {
    json_free(value->items[i]);
    if (value->keys != NULL) free(value->keys[i]);
  }
  free(value->items);
  free(value->keys);
  free(value->string);
  free(value);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(struct parser *p, unsigned *out) {
  if (p->length - p->at < 4) return 0;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int d = hex_digit(p->text[p->at + i]);
    if (d < 0) return 0;
    v = v * 16 + (unsigned)d;
  }
  p->at += 4;
  *out = v;
  return 1;
}

static size_t put_utf8(char *out, unsigned cp) {
  if (cp < 0x80) { out[0] = (char)cp; return 1; }
  if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* At the opening quote. The decoded string is never longer than its source. */
static char *parse_string_raw(struct parser *p, size_t *out_length) {
  p->at++; /* the quote */
  size_t start = p->at;
  size_t end = start;
  while (end < p->length && p->text[end] != '"') end += (p->text[end] == '\\') ? 2 : 1;
  if (end >= p->length) { fail(p, "unterminated string"); return NULL; }
  char *out = malloc(end - start + 1);
  if (out == NULL) { fail(p, "out of memory"); return NULL; }
  size_t n = 0;
  while (p->at < end) {
    unsigned char c = (unsigned char)p->text[p->at];
    if (c < 0x20) { fail(p, "control character in string"); free(out); return NULL; }
    if (c != '\\') { out[n++] = (char)c; p->at++; continue; }
    char e = p->text[p->at + 1];
    p->at += 2;
    switch (e) {
      case '"': out[n++] = '"'; break;
      case '\\': out[n++] = '\\'; break;
      case '/': out[n++] = '/'; break;
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'n': out[n++] = '\n'; break;
      case 'r': out[n++] = '\r'; break;
      case 't': out[n++] = '\t'; break;
      case 'u': {
        unsigned cp;
        if (!read_hex4(p, &cp)) { fail(p, "bad \\u escape"); free(out); return NULL; }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          unsigned low;
          if (p->at + 2 > end || p->text[p->at] != '\\' || p->text[p->at + 1] != 'u') {
            fail(p, "lone high surrogate"); free(out); return NULL;
          }
          p->at += 2;
          if (!read_hex4(p, &low) || low < 0xDC00 || low > 0xDFFF) { fail(p, "bad low surrogate"); free(out); return NULL; }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          fail(p, "lone low surrogate"); free(out); return NULL;
        }
        /* A \uXXXX (6 source bytes) encodes to at most 3 bytes, a pair (12) to 4: never longer than the source. */
        n += put_utf8(out + n, cp);
        break;
      }
      default: fail(p, "bad escape"); free(out); return NULL;
    }
    if (p->at > end) { fail(p, "bad escape at end of string"); free(out); return NULL; }
  }
  p->at = end + 1;
  out[n] = 0;
  *out_length = n;
  return out;
}

static struct json *parse_number(struct parser *p) {
  size_t start = p->at;
  if (p->at < p->length && p->text[p->at] == '-') p->at++;
  if (p->at >= p->length) { fail(p, "bad number"); return NULL; }
  if (p->text[p->at] == '0') p->at++;
  else if (p->text[p->at] >= '1' && p->text[p->at] <= '9') while (p->at < p->length && p->text[p->at] >= '0' && p->text[p->at] <= '9') p->at++;
  else { fail(p, "bad number"); return NULL; }
  if (p->at < p->length && p->text[p->at] == '.') {
    p->at++;
    size_t digits = p->at;
    while (p->at < p->length && p->text[p->at] >= '0' && p->text[p->at] <= '9') p->at++;
    if (p->at == digits) { fail(p, "bad fraction"); return NULL; }
  }
  if (p->at < p->length && (p->text[p->at] == 'e' || p->text[p->at] == 'E')) {
    p->at++;
    if (p->at < p->length && (p->text[p->at] == '+' || p->text[p->at] == '-')) p->at++;
    size_t digits = p->at;
    while (p->at < p->length && p->text[p->at] >= '0' && p->text[p->at] <= '9') p->at++;
    if (p->at == digits) { fail(p, "bad exponent"); return NULL; }
  }
  char copy[64];
  size_t length = p->at - start;
  if (length >= sizeof copy) { fail(p, "number too long"); return NULL; }
  memcpy(copy, p->text + start, length);
  copy[length] = 0;
  struct json *value = new_value(p, JSON_NUMBER);
  if (value != NULL) value->number = strtod(copy, NULL);
  return value;
}

static int push_item(struct parser *p, struct json *container, struct json *item, char *key) {
  size_t count = container->count;
  if (count == 0 || (count >= 4 && (count & (count - 1)) == 0)) { /* capacity 4, then doubled when full */
    size_t capacity = count == 0 ? 4 : count * 2;
    struct json **items = realloc(container->items, capacity * sizeof *items);
    if (items == NULL) { fail(p, "out of memory"); return 0; }
    container->items = items;
    if (container->type == JSON_OBJECT) {
      char **keys = realloc(container->keys, capacity * sizeof *keys);
      if (keys == NULL) { fail(p, "out of memory"); return 0; }
      container->keys = keys;
    }
  }
  container->items[container->count] = item;
  if (container->type == JSON_OBJECT) container->keys[container->count] = key;
  container->count++;
  return 1;
}

static struct json *parse_container(struct parser *p, int depth, int is_object) {
  char close = is_object ? '}' : ']';
  struct json *value = new_value(p, is_object ? JSON_OBJECT : JSON_ARRAY);
  if (value == NULL) return NULL;
  p->at++;
  skip_space(p);
  if (p->at < p->length && p->text[p->at] == close) { p->at++; return value; }
  for (;;) {
    char *key = NULL;
    if (is_object) {
      skip_space(p);
      if (p->at >= p->length || p->text[p->at] != '"') { fail(p, "expected a key"); goto bad; }
      size_t key_length;
      key = parse_string_raw(p, &key_length);
      if (key == NULL) goto bad;
      skip_space(p);
      if (p->at >= p->length || p->text[p->at] != ':') { fail(p, "expected ':'"); free(key); goto bad; }
      p->at++;
    }
    struct json *item = parse_value(p, depth + 1);
    if (item == NULL) { free(key); goto bad; }
    if (!push_item(p, value, item, key)) { json_free(item); free(key); goto bad; }
    skip_space(p);
    if (p->at < p->length && p->text[p->at] == ',') { p->at++; continue; }
    if (p->at < p->length && p->text[p->at] == close) { p->at++; return value; }
    fail(p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
    goto bad;
  }
bad:
  json_free(value);
  return NULL;
}

static int literal(struct parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->length - p->at < n || memcmp(p->text + p->at, word, n) != 0) return 0;
  p->at += n;
  return 1;
}

static struct json *parse_value(struct parser *p, int depth) {
  if (depth > MAX_DEPTH) { fail(p, "nested too deeply"); return NULL; }
  skip_space(p);
  if (p->at >= p->length) { fail(p, "unexpected end"); return NULL; }
  char c = p->text[p->at];
  if (c == '{' || c == '[') return parse_container(p, depth, c == '{');
  if (c == '"') {
    size_t length;
    char *text = parse_string_raw(p, &length);
    if (text == NULL) return NULL;
    struct json *value = new_value(p, JSON_STRING);
    if (value == NULL) { free(text); return NULL; }
    value->string = text;
    value->length = length;
    return value;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p);
  struct json *value = NULL;
  if (literal(p, "true")) { value = new_value(p, JSON_BOOL); if (value) value->boolean = 1; }
  else if (literal(p, "false")) value = new_value(p, JSON_BOOL);
  else if (literal(p, "null")) value = new_value(p, JSON_NULL);
  else fail(p, "unexpected character");
  return value;
}

struct json *json_parse(const char *text, size_t length, char *error, size_t error_size) {
  struct parser p = {text, length, 0, error, error_size};
  error[0] = 0;
  struct json *value = parse_value(&p, 0);
  if (value == NULL) return NULL;
  skip_space(&p);
  if (p.at != p.length) {
    fail(&p, "trailing characters");
    json_free(value);
    return NULL;
  }
  return value;
}

const struct json *json_get(const struct json *object, const char *key) {
  if (object == NULL || object->type != JSON_OBJECT) return NULL;
  /* The last duplicate wins, as in most parsers. */
  for (size_t i = object->count; i-- > 0;)
    if (strcmp(object->keys[i], key) == 0) return object->items[i];
  return NULL;
}

const char *json_get_string(const struct json *object, const char *key) {
  const struct json *value = json_get(object, key);
  if (value == NULL || value->type != JSON_STRING || strlen(value->string) != value->length) return NULL;
  return value->string;
}

int json_get_int(const struct json *object, const char *key, int64_t min, int64_t max, int64_t *out) {
  const struct json *value = json_get(object, key);
  if (value == NULL || value->type != JSON_NUMBER) return 0;
  double n = value->number;
  if (!isfinite(n) || n != floor(n) || n < (double)min || n > (double)max) return 0;
  *out = (int64_t)n;
  return 1;
}

int json_get_strings(const struct json *object, const char *key, size_t max, const char ***out) {
  *out = NULL;
  const struct json *value = json_get(object, key);
  if (value == NULL || value->type == JSON_NULL) return 1;
  if (value->type != JSON_ARRAY || value->count > max) return 0;
  const char **list = calloc(value->count + 1, sizeof *list);
  if (list == NULL) return 0;
  for (size_t i = 0; i < value->count; i++) {
    const struct json *item = value->items[i];
    if (item->type != JSON_STRING || strlen(item->string) != item->length) { free(list); return 0; }
    list[i] = item->string;
  }
  *out = list;
  return 1;
}

int bool_argument(const struct json *args, const char *key, int fallback, int *out) {
  const struct json *value = json_get(args, key);
  *out = fallback;
  if (value == NULL || value->type == JSON_NULL) return 0;
  if (value->type != JSON_BOOL) return -1;
  *out = value->boolean;
  return 0;
}
