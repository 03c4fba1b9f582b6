/* Standard base64 (RFC 4648, with padding), as QGA carries bytes. */
#ifndef DSEC_GUEST_BASE64_H
#define DSEC_GUEST_BASE64_H

#include <stddef.h>
#include "json.h"

/* Append the base64 of data to out. */
void base64_encode(struct buffer *out, const unsigned char *data, size_t length);
/* Decode text into a new malloc'd buffer (*out, *out_length). Whitespace is
   skipped; anything else outside the alphabet, or bad padding, returns 0. */
int base64_decode(const char *text, size_t length, unsigned char **out, size_t *out_length);

#endif
