/*
 * Relay's log sink: one line per record on stderr, text or JSON. The Lua log module renders structured fields and calls
 * relay_log_write; C code logs through the printf-style helpers.
 */
#ifndef RELAY_LOG_H
#define RELAY_LOG_H

#include <stddef.h>

typedef enum {
    RELAY_LOG_DEBUG = 0,
    RELAY_LOG_INFO,
    RELAY_LOG_WARN,
    RELAY_LOG_ERROR,
} relay_log_level;

void relay_log_configure(relay_log_level min_level, int json);
int relay_log_enabled(relay_log_level level);
int relay_log_json(void);

/* Writes one record, at any level (callers filter with relay_log_enabled).
 * fields is pre-rendered for the current format: " key=value ..." for text,
 * ",\"key\":value..." for JSON (or NULL). A text record stays one line:
 * control bytes (but TAB) and DEL in msg and fields are written as \xNN. */
void relay_log_write(relay_log_level level, const char *msg, size_t msg_len, const char *fields, size_t fields_len);

/* Writes prefix and line as they are, then a newline: no timestamp, no
 * escaping; Relay writes handler lines with relay_log_write instead. */
void relay_log_raw_line(const char *prefix, size_t prefix_len, const char *line, size_t len);

/* Appends s as a JSON string literal (with quotes) to out; invalid UTF-8
 * becomes U+FFFD. Returns bytes written, or the size needed if out_cap is
 * too small (then out is untouched past out_cap). */
size_t relay_json_quote(const char *s, size_t len, char *out, size_t out_cap);

void relay_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void relay_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void relay_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void relay_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
