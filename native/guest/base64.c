/* base64 for the guest agent; see base64.h. */
#include "base64.h"

#include <stdlib.h>

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void base64_encode(struct buffer *out, const unsigned char *data, size_t length) {
  char chunk[4096];
  size_t n = 0;
  for (size_t i = 0; i < length; i += 3) {
    unsigned v = (unsigned)data[i] << 16;
    if (i + 1 < length) v |= (unsigned)data[i + 1] << 8;
    if (i + 2 < length) v |= data[i + 2];
    chunk[n++] = ALPHABET[(v >> 18) & 63];
    chunk[n++] = ALPHABET[(v >> 12) & 63];
    chunk[n++] = i + 1 < length ? ALPHABET[(v >> 6) & 63] : '=';
    chunk[n++] = i + 2 < length ? ALPHABET[v & 63] : '=';
    if (n + 4 > sizeof chunk) { buffer_append(out, chunk, n); n = 0; }
  }
  buffer_append(out, chunk, n);
}

static int sextet(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

int base64_decode(const char *text, size_t length, unsigned char **out, size_t *out_length) {
  unsigned char *bytes = malloc(length / 4 * 3 + 3);
  if (bytes == NULL) return 0;
  size_t n = 0;
  unsigned v = 0;
  int have = 0;   /* sextets in v */
  int padding = 0;
  for (size_t i = 0; i < length; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') { padding++; continue; }
    int s = sextet(c);
    if (s < 0 || padding > 0) { free(bytes); return 0; } /* data after padding is not base64 */
    v = (v << 6) | (unsigned)s;
    if (++have == 4) {
      bytes[n++] = (unsigned char)(v >> 16);
      bytes[n++] = (unsigned char)(v >> 8);
      bytes[n++] = (unsigned char)v;
      v = 0;
      have = 0;
    }
  }
  /* A final group of 2 or 3 sextets is 1 or 2 bytes; padding, if present, must complete it. */
  if (have == 1 || (padding > 0 && have + padding != 4) || padding > 2) { free(bytes); return 0; }
  if (have == 2) bytes[n++] = (unsigned char)(v >> 4);
  if (have == 3) { bytes[n++] = (unsigned char)(v >> 10); bytes[n++] = (unsigned char)(v >> 2); }
  *out = bytes;
  *out_length = n;
  return 1;
}
