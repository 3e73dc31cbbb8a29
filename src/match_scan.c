/*
 * match_scan: lines of JSON events through a matcher (include/relay/match_scan.h).
 * One buffer holds the longest acceptable line, so every event is matched in
 * place; only a longer line is read past without keeping it. A pipe or socket
 * is read as its bytes arrive, so that lines are matched while the writer
 * goes on.
 */
#define _GNU_SOURCE /* F_GETPIPE_SZ, F_SETPIPE_SZ */
#include "relay/json_scan.h"
#include "relay/match_scan.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_CHUNK (4u << 20)
#define MAX_BUFFER (1u << 30)
#define IDS_FIRST 64
/* A pipe's size is raised to this (where the limits allow) so that the writer
 * can run this far ahead of the matching instead of waiting on each read. */
#define PIPE_WANT (1 << 20)
/* scan_regular: not a regular file, stream it instead */
#define NOT_SPLIT (-2)

typedef struct scan {
    relay_matcher *m;
    const relay_match_scan_opts *opts;
    const relay_match_scan_sink *sink;
    relay_match_scan_counts *counts;
    FILE *in;
    char *buf;
    size_t cap;
    uint32_t *ids;
    size_t ids_cap;
    int stopped;
    int oom;
    int live;       /* a pipe, socket or terminal: read what has arrived */
    int read_errno; /* a failed read's errno, for a live input */
} scan;


static void
malformed(scan *s, const char *reason)
{
    const relay_match_scan_sink *sink = s->sink;

    if (sink->on_malformed != NULL && sink->on_malformed(sink->ctx, s->counts->total, reason) != 0) {
        s->stopped = 1;
    }
}


static int
match(scan *s, const char *text, size_t len, char *reason, size_t reasonlen)
{
    return relay_matcher_match(s->m, text, len, s->opts->max_bytes, s->opts->now_ms, s->ids, s->ids_cap, reason,
                               reasonlen);
}


/* Match one line, its newline excluded. */
static void
scan_line(scan *s, const char *text, size_t len)
{
    const relay_match_scan_sink *sink = s->sink;
    char reason[256];
    uint32_t *grown;
    int n;

    s->counts->total++;
    n = match(s, text, len, reason, sizeof(reason));
    if (n > 0 && (size_t)n > s->ids_cap) {
        if ((grown = realloc(s->ids, (size_t)n * sizeof(*grown))) == NULL) {
            s->oom = 1;
            return;
        }
        s->ids = grown;
        s->ids_cap = (size_t)n;
        n = match(s, text, len, reason, sizeof(reason));
    }
    if (n < 0) {
        malformed(s, reason);
        return;
    }
    if (n == 0) {
        return;
    }
    s->counts->matched++;
    if (sink->on_match != NULL && sink->on_match(sink->ctx, s->counts->total, s->ids, (size_t)n) != 0) {
        s->stopped = 1;
    }
}


#ifdef __GLIBC__
/* Not among glibc's public names: a FILE whose get area is the ungetc backup,
 * the rest of its buffer set aside in the save area (as gnulib's freadahead
 * reads it). */
#ifndef _IO_IN_BACKUP
#define _IO_IN_BACKUP 0x0100
#endif


/* Bytes the stream holds that a read(2) of its descriptor would skip. */
static size_t
held_by(const FILE *in)
{
    size_t held = (size_t)(in->_IO_read_end - in->_IO_read_ptr);

    if (in->_flags & _IO_IN_BACKUP) {
        held += (size_t)(in->_IO_save_end - in->_IO_save_base);
    }
    return held;
}


/* Before a live input is read: when nothing is there yet, tell the sink that
 * the scan is about to wait. Returns nonzero when the sink stops the scan. */
static int
waits(scan *s)
{
    struct pollfd ready = {fileno(s->in), POLLIN, 0};

    /* A poll that fails (a signal) counts as nothing there: the sink hears of
     * a wait that may not come rather than miss one. */
    if (s->sink->on_wait == NULL || poll(&ready, 1, 0) > 0) {
        return 0;
    }
    if (s->sink->on_wait(s->sink->ctx) != 0) {
        s->stopped = 1;
    }
    return s->stopped;
}
#endif


/* Up to `room` bytes into `into`; 0 at the end of the input, on an error, or
 * when the sink stopped the scan while it waited.
 * A live input gives what has arrived, waiting only while nothing has: a
 * full buffer's worth would hold its first lines back until the writer had
 * written megabytes more (or closed), and would keep the writer waiting on a
 * full pipe while those are matched. */
static size_t
read_some(scan *s, char *into, size_t room)
{
#ifdef __GLIBC__
    /* What the stream already holds is read through it first; glibc's FILE
     * fields are public, and no call says how much a stream holds. */
    size_t held = s->live ? held_by(s->in) : 0;
    ssize_t n;

    if (s->read_errno != 0) {
        return 0;
    }
    if (s->live && held == 0) {
        if (waits(s)) {
            return 0;
        }
        do {
            n = read(fileno(s->in), into, room);
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
            s->read_errno = errno;
            return 0;
        }
        return (size_t)n;
    }
    if (s->live && held < room) {
        room = held;
    }
#endif
    return fread(into, 1, room, s->in);
}


/* Whether an input of this mode (per fstat) is read as its bytes arrive: a
 * pipe, FIFO, socket or terminal. */
static int
is_live(mode_t mode)
{
    return S_ISFIFO(mode) || S_ISSOCK(mode) || S_ISCHR(mode);
}


/* Raise a pipe's size to PIPE_WANT where the limits allow; best effort, as a
 * smaller pipe only costs speed. */
static void
widen_pipe(int fd)
{
    if (fcntl(fd, F_GETPIPE_SZ) < PIPE_WANT) {
        (void)fcntl(fd, F_SETPIPE_SZ, PIPE_WANT);
    }
}


/* A line that does not fit the buffer: `have` bytes of it are in buf. Read past
 * its end without keeping it, report it, and keep what follows; returns how
 * many bytes of what follows are now at the start of buf. */
static size_t
skip_long_line(scan *s, size_t have)
{
    size_t total = have, n;
    char *nl, reason[128];

    for (;;) {
        n = read_some(s, s->buf, s->cap);
        if (n == 0) {
            break;
        }
        if ((nl = memchr(s->buf, '\n', n)) != NULL) {
            total += (size_t)(nl - s->buf);
            n -= (size_t)(nl - s->buf) + 1;
            memmove(s->buf, nl + 1, n);
            break;
        }
        total += n;
    }
    if (s->stopped) {
        return 0;
    }
    s->counts->total++;
    relay_json_too_large(total, s->opts->max_bytes, reason, sizeof(reason));
    malformed(s, reason);
    return n;
}


/* Split the input into lines and match each; 0, or -1 on a read error. */
static int
run(scan *s)
{
    size_t start = 0, end = 0, searched = 0, n; /* searched: no newline in buf[start, searched) */
    char *nl;

    while (!s->stopped && !s->oom) {
        if ((nl = memchr(s->buf + searched, '\n', end - searched)) != NULL) {
            scan_line(s, s->buf + start, (size_t)(nl - (s->buf + start)));
            start = searched = (size_t)(nl - s->buf) + 1;
            continue;
        }
        /* A line that arrives in small reads is not searched again from its start. */
        memmove(s->buf, s->buf + start, end - start);
        end -= start;
        start = 0;
        searched = end;
        if (end == s->cap) {
            end = skip_long_line(s, end);
            searched = 0;
            continue;
        }
        n = read_some(s, s->buf + end, s->cap - end);
        if (s->stopped) {
            break;
        }
        if (n == 0) {
            if (s->read_errno != 0) {
                errno = s->read_errno;
                return -1;
            }
            if (ferror(s->in)) {
                return -1;
            }
            if (end > 0) {
                scan_line(s, s->buf, end);
            }
            break;
        }
        end += n;
    }
    return 0;
}


/* Room for the longest acceptable line plus its newline. */
static size_t
buffer_size(const relay_match_scan_opts *opts)
{
    size_t chunk = opts->read_chunk != 0 ? opts->read_chunk : DEFAULT_CHUNK;
    size_t cap = opts->max_bytes < MAX_BUFFER ? opts->max_bytes + 1 : MAX_BUFFER;

    return cap < chunk ? chunk : cap;
}


/* A regular file (sb: fstat of in) is split between threads (relay_match_scan_file). Returns
 * NOT_SPLIT when `in` is not one: the caller streams it instead; else what
 * that scan returned. The rest of the file from the stream's position is
 * scanned, and the stream is left at its end. */
static int
scan_regular(relay_matcher *m, FILE *in, const struct stat *sb, const relay_match_scan_opts *opts,
             const relay_match_scan_sink *sink, relay_match_scan_counts *counts, char *err, size_t errlen)
{
    off_t at;
    int rc;

    /* An empty size is also what /proc files report: stream those instead. */
    if (!S_ISREG(sb->st_mode) || sb->st_size == 0 || (at = ftello(in)) < 0 || at > sb->st_size) {
        return NOT_SPLIT;
    }
    rc = relay_match_scan_file(m, fileno(in), at, sb->st_size, opts, sink, counts, err, errlen);
    fseeko(in, 0, SEEK_END);
    return rc;
}


int
relay_match_scan(relay_matcher *m, FILE *in, const relay_match_scan_opts *opts, const relay_match_scan_sink *sink,
                 relay_match_scan_counts *counts, char *err, size_t errlen)
{
    scan s;
    struct stat sb;
    int fd = fileno(in), known = fd >= 0 && fstat(fd, &sb) == 0;
    int rc = known ? scan_regular(m, in, &sb, opts, sink, counts, err, errlen) : NOT_SPLIT;

    if (rc != NOT_SPLIT) {
        return rc;
    }
    rc = 0;
    memset(&s, 0, sizeof(s));
    memset(counts, 0, sizeof(*counts));
    s.m = m;
    s.opts = opts;
    s.sink = sink;
    s.counts = counts;
    s.in = in;
    s.cap = buffer_size(opts);
    s.ids_cap = IDS_FIRST;
    s.live = known && is_live(sb.st_mode);
    if (known && S_ISFIFO(sb.st_mode)) {
        widen_pipe(fd);
    }
    s.buf = malloc(s.cap);
    s.ids = malloc(s.ids_cap * sizeof(*s.ids));
    if (s.buf == NULL || s.ids == NULL) {
        s.oom = 1;
    } else if (run(&s) != 0) {
        snprintf(err, errlen, "read error: %s", strerror(errno));
        rc = -1;
    }
    if (s.oom) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    } else if (rc == 0 && s.stopped) {
        rc = RELAY_MATCH_SCAN_STOPPED;
    }
    free(s.buf);
    free(s.ids);
    return rc;
}
