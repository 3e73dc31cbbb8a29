/*
 * Relay's log sink: one line per record on stderr, text or JSON. The Lua log module renders structured fields and calls
 * relay_log_write; C code logs through the printf-style helpers. The daemon makes the sink asynchronous
 * (relay_log_start_async): its loop then never waits for the reader of stderr.
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

/* relay_log_write for a line of handler output: once the sink is
 * asynchronous, output may fill only part of the buffer, so that Relay's
 * own records still fit while a handler floods. */
void relay_log_write_output(relay_log_level level, const char *msg, size_t msg_len, const char *fields,
                            size_t fields_len);

/* Writes prefix and line as they are, then a newline: no timestamp, no
 * escaping; Relay writes handler lines with relay_log_write_output instead. */
void relay_log_raw_line(const char *prefix, size_t prefix_len, const char *line, size_t len);

/* How long the exit waits for the buffered records to be written. */
#define RELAY_LOG_EXIT_FLUSH_S 2.0

/* From now on records are queued in a buffer of buffer_bytes and written by
 * a thread of the sink's own, so that no caller ever waits for the reader
 * of stderr; a record that does not fit is dropped whole and counted, and
 * a "log records dropped" record says so (at most once a second). At exit
 * the buffer is flushed for up to RELAY_LOG_EXIT_FLUSH_S. Returns 0, or -1
 * when the buffer or the thread cannot be had (records are then written
 * directly, as before). */
int relay_log_start_async(size_t buffer_bytes);

/* Waits up to timeout_s for the buffered records to be written (a no-op
 * when the sink is synchronous). For an exit that skips atexit (_exit). */
void relay_log_flush(double timeout_s);

/* Records (and their bytes) dropped since the start. */
void relay_log_dropped(unsigned long long *records, unsigned long long *bytes);

/* Appends s as a JSON string literal (with quotes) to out; invalid UTF-8
 * becomes U+FFFD. Returns bytes written, or the size needed if out_cap is
 * too small (then out is untouched past out_cap). */
size_t relay_json_quote(const char *s, size_t len, char *out, size_t out_cap);

void relay_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void relay_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void relay_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void relay_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
