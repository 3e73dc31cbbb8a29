/*
 * The log sink. Each record is assembled in memory and written with one
 * write(2), so lines from Relay and from handlers never interleave mid-line.
 *
 * A text record is exactly one line, whoever wrote it (Relay's Lua, C
 * code, a handler's output): control bytes other than TAB, and DEL, are
 * written as \xNN (lowercase hex), so a CR, a newline or a terminal escape
 * in a message, a field or a handler line can neither end the record early
 * nor forge another one. Backslash is not escaped here: the text format is
 * for reading, and JSON keeps the exact bytes. Where a reader must find the
 * end of a value (quoted field values), the Lua side escapes \ and ".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "relay/log.h"

static relay_log_level log_min_level = RELAY_LOG_INFO;
static int log_as_json;

static const char *const LEVEL_TEXT[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
static const char *const LEVEL_JSON[] = {"debug", "info", "warn", "error"};


void
relay_log_configure(relay_log_level min_level, int json)
{
    log_min_level = min_level;
    log_as_json = json;
}


int
relay_log_enabled(relay_log_level level)
{
    return level >= log_min_level;
}


int
relay_log_json(void)
{
    return log_as_json;
}


static size_t
format_timestamp(char *out, size_t cap)
{
    struct timespec now;
    struct tm utc;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &utc);
    return (size_t)snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                            utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, now.tv_nsec / 1000000);
}


static void
write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return; /* nowhere left to report a failing stderr */
        }
        buf += n;
        len -= (size_t)n;
    }
}


/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid. */
static size_t
utf8_sequence_length(const unsigned char *s, size_t len)
{
    unsigned char c = s[0];
    size_t need;
    unsigned cp;

    if (c < 0x80) {
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len < need) {
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((need == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
        || (need == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
        return 0;
    }
    return need;
}


size_t
relay_json_quote(const char *s, size_t len, char *out, size_t out_cap)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    char esc[8];

#define EMIT(bytes, count)                     \
    do {                                       \
        if (n + (count) <= out_cap) {          \
            memcpy(out + n, (bytes), (count)); \
        }                                      \
        n += (count);                          \
    } while (0)

    EMIT("\"", 1);
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            EMIT(esc, 2);
            i++;
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            EMIT(esc, 6);
            i++;
        } else {
            size_t seq = utf8_sequence_length(p + i, len - i);
            if (seq == 0) {
                EMIT("\xef\xbf\xbd", 3);
                i++;
            } else {
                EMIT(p + i, seq);
                i += seq;
            }
        }
    }
    EMIT("\"", 1);
#undef EMIT
    return n;
}


/* Copies s to out with control bytes (but TAB) and DEL as \xNN; out must
 * hold 4 * len bytes. Returns the bytes written. */
static size_t
text_escape(const char *s, size_t len, char *out)
{
    static const char HEX[] = "0123456789abcdef";
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = HEX[c >> 4];
            out[n++] = HEX[c & 0x0f];
        } else {
            out[n++] = (char)c;
        }
    }
    return n;
}


void
relay_log_write(relay_log_level level, const char *msg, size_t msg_len, const char *fields, size_t fields_len)
{
    char stamp[40];
    size_t stamp_len = format_timestamp(stamp, sizeof(stamp));
    /* JSON quoting grows msg at most 6x; text escaping grows msg and fields at most 4x. */
    size_t cap = stamp_len + msg_len * 6 + fields_len * 4 + 64;
    char *line = malloc(cap);
    size_t n;

    if (line == NULL) {
        return;
    }
    if (log_as_json) {
        n = (size_t)snprintf(line, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", stamp, LEVEL_JSON[level]);
        n += relay_json_quote(msg, msg_len, line + n, cap - n);
        if (fields_len > 0) {
            memcpy(line + n, fields, fields_len);
            n += fields_len;
        }
        line[n++] = '}';
    } else {
        n = (size_t)snprintf(line, cap, "%s %s ", stamp, LEVEL_TEXT[level]);
        n += text_escape(msg, msg_len, line + n);
        n += text_escape(fields, fields_len, line + n);
    }
    line[n++] = '\n';
    write_all(line, n);
    free(line);
}


void
relay_log_raw_line(const char *prefix, size_t prefix_len, const char *line, size_t len)
{
    char *buf = malloc(prefix_len + len + 1);

    if (buf == NULL) {
        return;
    }
    memcpy(buf, prefix, prefix_len);
    memcpy(buf + prefix_len, line, len);
    buf[prefix_len + len] = '\n';
    write_all(buf, prefix_len + len + 1);
    free(buf);
}


static void
log_formatted(relay_log_level level, const char *fmt, va_list ap)
{
    char msg[4096];
    int n;

    if (!relay_log_enabled(level)) {
        return;
    }
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n < 0) {
        return;
    }
    relay_log_write(level, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1, NULL, 0);
}


#define DEFINE_LOG_FN(name, level)     \
    void name(const char *fmt, ...)    \
    {                                  \
        va_list ap;                    \
        va_start(ap, fmt);             \
        log_formatted(level, fmt, ap); \
        va_end(ap);                    \
    }

DEFINE_LOG_FN(relay_log_error, RELAY_LOG_ERROR)
DEFINE_LOG_FN(relay_log_warn, RELAY_LOG_WARN)
DEFINE_LOG_FN(relay_log_info, RELAY_LOG_INFO)
DEFINE_LOG_FN(relay_log_debug, RELAY_LOG_DEBUG)
