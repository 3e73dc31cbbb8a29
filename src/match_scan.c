/*
 * match_scan: lines of JSON events through a matcher (include/relay/match_scan.h).
 * One buffer holds the longest acceptable line, so every event is matched in
 * place; only a longer line is read past without keeping it.
 */
#include "relay/json_scan.h"
#include "relay/match_scan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_CHUNK (4u << 20)
#define MAX_BUFFER (1u << 30)
#define IDS_FIRST 64
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


/* A line that does not fit the buffer: `have` bytes of it are in buf. Read past
 * its end without keeping it, report it, and keep what follows; returns how
 * many bytes of what follows are now at the start of buf. */
static size_t
skip_long_line(scan *s, size_t have)
{
    size_t total = have, n;
    char *nl, reason[128];

    for (;;) {
        n = fread(s->buf, 1, s->cap, s->in);
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
    s->counts->total++;
    relay_json_too_large(total, s->opts->max_bytes, reason, sizeof(reason));
    malformed(s, reason);
    return n;
}


/* Split the input into lines and match each; 0, or -1 on a read error. */
static int
run(scan *s)
{
    size_t start = 0, end = 0, n;
    char *nl;

    while (!s->stopped && !s->oom) {
        if ((nl = memchr(s->buf + start, '\n', end - start)) != NULL) {
            scan_line(s, s->buf + start, (size_t)(nl - (s->buf + start)));
            start = (size_t)(nl - s->buf) + 1;
            continue;
        }
        memmove(s->buf, s->buf + start, end - start);
        end -= start;
        start = 0;
        if (end == s->cap) {
            end = skip_long_line(s, end);
            continue;
        }
        n = fread(s->buf + end, 1, s->cap - end, s->in);
        if (n == 0) {
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


/* A regular file is split between threads (relay_match_scan_file). Returns
 * NOT_SPLIT when `in` is not one: the caller streams it instead; else what
 * that scan returned. The rest of the file from the stream's position is
 * scanned, and the stream is left at its end. */
static int
scan_regular(relay_matcher *m, FILE *in, const relay_match_scan_opts *opts, const relay_match_scan_sink *sink,
             relay_match_scan_counts *counts, char *err, size_t errlen)
{
    struct stat sb;
    off_t at;
    int fd = fileno(in), rc;

    /* An empty size is also what /proc files report: stream those instead. */
    if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0 || (at = ftello(in)) < 0
        || at > sb.st_size) {
        return NOT_SPLIT;
    }
    rc = relay_match_scan_file(m, fd, at, sb.st_size, opts, sink, counts, err, errlen);
    fseeko(in, 0, SEEK_END);
    return rc;
}


int
relay_match_scan(relay_matcher *m, FILE *in, const relay_match_scan_opts *opts, const relay_match_scan_sink *sink,
                 relay_match_scan_counts *counts, char *err, size_t errlen)
{
    scan s;
    int rc = scan_regular(m, in, opts, sink, counts, err, errlen);

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
