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
 *
 * The daemon's loop must never wait for whoever reads stderr. Once
 * relay_log_start_async runs, records go to a bounded in-memory buffer and
 * one writer thread does the (blocking) writes; a record that does not fit
 * is dropped whole, counted, and the writer says so in a record of its own.
 * Why a thread rather than non-blocking writes on the loop: O_NONBLOCK is a
 * flag of the open file description, which stderr shares with whoever
 * started the daemon (a shell's terminal, a supervisor's pipe), and setting
 * it would make their writes fail with EAGAIN; MSG_DONTWAIT only exists for
 * sockets; and a regular file on a slow disk blocks whatever the flags say.
 * A thread that only ever blocks itself covers every kind of stderr without
 * changing anything others share. It touches neither the loop nor Lua, and
 * children forked by proc.c never log between fork and exec.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "relay/log.h"

/* Handler output may fill the buffer only this far (3/4), so that Relay's
 * own records still fit while a handler floods. */
#define OUTPUT_SHARE(cap) ((cap) / 4 * 3)
#define NOTICE_EVERY_S 1.0 /* at most one "log records dropped" per second */
#define EAGAIN_WAIT_MS 100

static relay_log_level log_min_level = RELAY_LOG_INFO;
static int log_as_json;

/* The asynchronous sink: a ring of cap bytes, [head, head + len) queued.
 * The writer writes from head without the lock; producers only fill the
 * free part, so the bytes being written are never touched. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t queued;  /* bytes were queued */
    pthread_cond_t drained; /* the ring emptied */
    char *buf;
    size_t cap, head, len;
    unsigned long long dropped, dropped_bytes; /* since the start */
    unsigned long long unreported, unreported_bytes;
    double last_notice;
    int notice_busy; /* one thread formats a notice (outside the lock) */
    int running;
} sink = {.lock = PTHREAD_MUTEX_INITIALIZER};

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


static double
monotonic_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


static struct timespec
monotonic_at(double when)
{
    struct timespec ts;

    ts.tv_sec = (time_t)when;
    ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
    return ts;
}


static unsigned long long
count_lines(const struct iovec *iov, int iovcnt)
{
    unsigned long long n = 0;

    for (int i = 0; i < iovcnt; i++) {
        const char *p = iov[i].iov_base;
        for (size_t j = 0; j < iov[i].iov_len; j++) {
            n += p[j] == '\n';
        }
    }
    return n;
}


/* Writes iov to stderr, blocking: EINTR is retried and EAGAIN waited out
 * (whoever shares stderr may have made it non-blocking). Returns the
 * records lost when stderr fails for good (nowhere left to report it). */
static unsigned long long
write_iov(struct iovec *iov, int iovcnt)
{
    while (iovcnt > 0) {
        ssize_t n = writev(STDERR_FILENO, iov, iovcnt);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
            poll(&p, 1, EAGAIN_WAIT_MS);
            continue;
        }
        if (n < 0) {
            return count_lines(iov, iovcnt);
        }
        for (; iovcnt > 0 && (size_t)n >= iov->iov_len; iov++, iovcnt--) {
            n -= (ssize_t)iov->iov_len;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}


static void
write_plain(const char *buf, size_t len)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};

    write_iov(&iov, 1);
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


/* Renders one record, newline included, into a buffer the caller frees
 * (NULL when out of memory). */
static char *
format_record(relay_log_level level, const char *msg, size_t msg_len, const char *fields, size_t fields_len,
              size_t *out_len)
{
    char stamp[40];
    size_t stamp_len = format_timestamp(stamp, sizeof(stamp));
    /* JSON quoting grows msg at most 6x; text escaping grows msg and fields at most 4x. */
    size_t cap = stamp_len + msg_len * 6 + fields_len * 4 + 64;
    char *line = malloc(cap);
    size_t n;

    if (line == NULL) {
        return NULL;
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
    *out_len = n;
    return line;
}


/* Copies a record into the ring, or counts it dropped when it does not fit
 * under limit. Called with the lock held. */
static void
ring_put(const char *rec, size_t n, size_t limit)
{
    size_t tail, first;

    if (sink.len + n > limit) {
        sink.dropped++;
        sink.dropped_bytes += n;
        sink.unreported++;
        sink.unreported_bytes += n;
        return;
    }
    tail = (sink.head + sink.len) % sink.cap;
    first = n < sink.cap - tail ? n : sink.cap - tail;
    memcpy(sink.buf + tail, rec, first);
    memcpy(sink.buf, rec + first, n - first);
    sink.len += n;
    pthread_cond_signal(&sink.queued);
}


/* One whole record to stderr: queued when the sink runs, else written. */
static void
emit(const char *rec, size_t n, int handler_output)
{
    if (!sink.running) {
        write_plain(rec, n);
        return;
    }
    pthread_mutex_lock(&sink.lock);
    ring_put(rec, n, handler_output ? OUTPUT_SHARE(sink.cap) : sink.cap);
    pthread_mutex_unlock(&sink.lock);
}


static void
write_record(relay_log_level level, const char *msg, size_t msg_len, const char *fields, size_t fields_len,
             int handler_output)
{
    size_t n;
    char *line = format_record(level, msg, msg_len, fields, fields_len, &n);

    if (line != NULL) {
        emit(line, n, handler_output);
        free(line);
    }
}


void
relay_log_write(relay_log_level level, const char *msg, size_t msg_len, const char *fields, size_t fields_len)
{
    write_record(level, msg, msg_len, fields, fields_len, 0);
}


void
relay_log_write_output(relay_log_level level, const char *msg, size_t msg_len, const char *fields, size_t fields_len)
{
    write_record(level, msg, msg_len, fields, fields_len, 1);
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
    emit(buf, prefix_len + len + 1, 1);
    free(buf);
}


/* Queues the "log records dropped" record when drops are unreported and the
 * last one is NOTICE_EVERY_S old (or at once with force); when the ring
 * has no room for it either, the drops stay unreported for the next try.
 * Called and returns with the lock held; formats without it. */
static void
queue_drop_notice(int force)
{
    unsigned long long records = sink.unreported, bytes = sink.unreported_bytes, total = sink.dropped;
    char fields[160];
    const char *fmt =
        log_as_json ? ",\"dropped\":%llu,\"bytes\":%llu,\"total\":%llu" : " dropped=%llu bytes=%llu total=%llu";
    static const char MSG[] = "log records dropped: the log reader is slower than the records come";
    size_t n;
    char *line;

    if (records == 0 || sink.notice_busy || (!force && monotonic_now() - sink.last_notice < NOTICE_EVERY_S)) {
        return;
    }
    sink.notice_busy = 1;
    pthread_mutex_unlock(&sink.lock);
    snprintf(fields, sizeof(fields), fmt, records, bytes, total);
    line = format_record(RELAY_LOG_WARN, MSG, sizeof(MSG) - 1, fields, strlen(fields), &n);
    pthread_mutex_lock(&sink.lock);
    if (line != NULL && sink.len + n <= sink.cap) {
        ring_put(line, n, sink.cap);
        sink.unreported -= records;
        sink.unreported_bytes -= bytes;
        sink.last_notice = monotonic_now();
    }
    sink.notice_busy = 0;
    free(line);
}


/* Writes everything queued, without the lock (held on entry and exit). */
static void
write_queued(void)
{
    size_t n = sink.len, first = n < sink.cap - sink.head ? n : sink.cap - sink.head;
    struct iovec iov[2] = {{sink.buf + sink.head, first}, {sink.buf, n - first}};
    unsigned long long lost;

    pthread_mutex_unlock(&sink.lock);
    lost = write_iov(iov, n > first ? 2 : 1);
    pthread_mutex_lock(&sink.lock);
    sink.head = (sink.head + n) % sink.cap;
    sink.len -= n;
    sink.dropped += lost;
    if (sink.len == 0) {
        pthread_cond_broadcast(&sink.drained);
    }
}


/* Waits until bytes are queued, or until an unreported drop is due. */
static void
wait_for_work(void)
{
    while (sink.len == 0) {
        struct timespec due;
        if (sink.unreported == 0) {
            pthread_cond_wait(&sink.queued, &sink.lock);
            continue;
        }
        due = monotonic_at(sink.last_notice + NOTICE_EVERY_S);
        if (pthread_cond_timedwait(&sink.queued, &sink.lock, &due) == ETIMEDOUT) {
            return;
        }
    }
}


static void *
writer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&sink.lock);
    for (;;) {
        wait_for_work();
        queue_drop_notice(0);
        if (sink.len > 0) {
            write_queued();
        }
    }
    return NULL;
}


static void
flush_at_exit(void)
{
    relay_log_flush(RELAY_LOG_EXIT_FLUSH_S);
}


int
relay_log_start_async(size_t buffer_bytes)
{
    pthread_condattr_t attr;
    pthread_t writer;
    sigset_t all, old;
    int rc;

    if (sink.running) {
        return 0;
    }
    sink.buf = malloc(buffer_bytes);
    if (sink.buf == NULL || buffer_bytes == 0) {
        free(sink.buf);
        return -1;
    }
    sink.cap = buffer_bytes;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&sink.queued, &attr);
    pthread_cond_init(&sink.drained, &attr);
    pthread_condattr_destroy(&attr);
    /* Signals stay with the loop's thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&writer, NULL, writer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        return -1;
    }
    pthread_detach(writer);
    sink.running = 1;
    atexit(flush_at_exit);
    return 0;
}


void
relay_log_flush(double timeout_s)
{
    double deadline = monotonic_now() + timeout_s;

    if (!sink.running) {
        return;
    }
    pthread_mutex_lock(&sink.lock);
    for (;;) {
        struct timespec until = monotonic_at(deadline);
        queue_drop_notice(1); /* when the ring has room for it: maybe only once it drained */
        if ((sink.len == 0 && sink.unreported == 0) || monotonic_now() >= deadline) {
            break;
        }
        pthread_cond_timedwait(&sink.drained, &sink.lock, &until);
    }
    pthread_mutex_unlock(&sink.lock);
}


void
relay_log_dropped(unsigned long long *records, unsigned long long *bytes)
{
    pthread_mutex_lock(&sink.lock);
    *records = sink.dropped;
    *bytes = sink.dropped_bytes;
    pthread_mutex_unlock(&sink.lock);
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
