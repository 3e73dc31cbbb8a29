/* line_reader: the lines of a file's byte range, through pread or a mapping (include/relay/line_reader.h). */
#include "relay/line_reader.h"
#include "relay/map_guard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Past the range's end only the last line is wanted: read a little at a
 * time (at least as much again as the line already has). */
#define MIN_TAIL ((size_t)4 << 10)

/* A run over one range: the buffer holds the file's bytes [at, at + have). */
typedef struct pass {
    relay_line_reader *r;
    const relay_line_range *g;
    off_t at;
    size_t have;
} pass;


static int
grow(relay_line_reader *r, size_t cap)
{
    char *buf = realloc(r->buf, cap);

    if (buf == NULL) {
        return -1;
    }
    r->buf = buf;
    r->cap = cap;
    return 0;
}


/* Drop the buffer's first `from` bytes, then read up to `want` more after
 * what is left. Returns the bytes read, 0 at `size`, or a RELAY_LINES_ failure. */
static long
refill(pass *s, size_t from, size_t want)
{
    relay_line_reader *r = s->r;
    off_t off;
    ssize_t n;

    memmove(r->buf, r->buf + from, s->have - from);
    s->have -= from;
    s->at += (off_t)from;
    off = s->at + (off_t)s->have;
    if (want > r->cap - s->have) {
        want = r->cap - s->have;
    }
    if ((off_t)want > s->g->size - off) {
        want = (size_t)(s->g->size - off);
    }
    if (want == 0) {
        return 0;
    }
    do {
        n = pread(s->g->fd, r->buf + s->have, want, off);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        return RELAY_LINES_ERROR;
    }
    if (n == 0) {
        return RELAY_LINES_SHRANK;
    }
    s->have += (size_t)n;
    return (long)n;
}


/* The range does not begin the scan: its first line starts after the first
 * newline at or after start - 1. Sets *i to that line in the buffer;
 * returns 1 when no line starts in the range, else 0 or a failure. */
static int
skip_to_first_line(pass *s, size_t *i)
{
    const relay_line_range *g = s->g;
    const char *nl;
    long n;

    s->at = g->start - 1;
    for (;;) {
        n = refill(s, s->have, (size_t)(g->end - 1 - (s->at + (off_t)s->have)));
        if (n <= 0) {
            return n == 0 ? 1 : (int)n;
        }
        if ((nl = memchr(s->r->buf, '\n', s->have)) != NULL) {
            *i = (size_t)(nl - s->r->buf) + 1;
            return s->at + (off_t)*i >= g->end ? 1 : 0;
        }
        if (s->at + (off_t)s->have >= g->end - 1) {
            return 1;
        }
    }
}


/* The line at buf[*i] fills the buffer and is longer than `keep`: read to
 * its end without keeping it, hand over its length, leave *i after it. */
static int
skip_long_line(pass *s, size_t *i, relay_line_fn fn, void *ctx)
{
    size_t total = s->have - *i;
    const char *nl = NULL;
    long n;

    while ((n = refill(s, s->have, s->r->cap)) > 0) {
        if ((nl = memchr(s->r->buf, '\n', s->have)) != NULL) {
            total += (size_t)(nl - s->r->buf);
            *i = (size_t)(nl - s->r->buf) + 1;
            break;
        }
        total += s->have;
    }
    if (n < 0) {
        return (int)n;
    }
    if (nl == NULL) {
        *i = s->have; /* it ended the file */
    }
    return fn(ctx, NULL, total) ? RELAY_LINES_STOPPED : 0;
}


/* More of the line at buf[*i], which has no newline in the buffer yet and
 * does not end the file: grow the buffer for it, or skip it when too long. */
static int
read_on(pass *s, size_t *i, relay_line_fn fn, void *ctx)
{
    relay_line_reader *r = s->r;
    const relay_line_range *g = s->g;
    size_t tail = s->have - *i, want;
    off_t next;
    long n;

    if (tail == r->cap) {
        if (r->cap > g->keep) {
            return skip_long_line(s, i, fn, ctx);
        }
        if (grow(r, g->keep / 2 >= r->cap ? r->cap * 2 : g->keep + 1) < 0) {
            return RELAY_LINES_NOMEM;
        }
    }
    next = s->at + (off_t)s->have;
    want = tail > MIN_TAIL ? tail : MIN_TAIL;
    if (g->end > next && (size_t)(g->end - next) > want) {
        want = (size_t)(g->end - next);
    }
    n = refill(s, *i, want);
    *i = 0;
    return n < 0 ? (int)n : 0;
}


/* How far past the line being handed over the mapping is kept prefetched.
 * The hardware's stream prefetchers do not cross a 4 KiB page, so each page
 * of a mapped file began with a miss to memory. Each cache line is prefetched
 * once: cl2-exact 107-109 -> 102-105 ms of CPU (5 and 6 KiB about the same,
 * 2 KiB and 8 KiB less). */
#define PREFETCH_AHEAD 4096


/* Prefetch the cache lines from `done` up to `to`; returns where it stopped. */
static const char *
prefetch_to(const char *done, const char *to)
{
    for (; done < to; done += 64) {
        __builtin_prefetch(done);
    }
    return done;
}


/* Whether the file is now shorter than when the scan began. */
static int
file_shrank(const relay_line_range *g)
{
    struct stat st;

    return fstat(g->fd, &st) == 0 && st.st_size < g->size;
}


/* Whether the file shrank, once a mapped line reaches `tail`: the file's last
 * page. A file cut short within that page raises no SIGBUS; the bytes past
 * its new end just read as zeros. */
static int
shrank_under(const relay_line_range *g, const char *at, const char *tail)
{
    return at >= tail && file_shrank(g);
}


/* The range's lines straight from the mapping: nothing is read or held.
 * Only lines that end before the file's last page are tried ahead, so each
 * line a callback settles was first checked against a shrunk file. */
static int
run_mapped(const relay_line_range *g, const relay_line_calls *calls)
{
    const char *p = g->map + g->start, *end = g->map + g->size, *stop = g->map + g->end, *nl, *ahead = p;
    const char *tail = g->map + ((g->size - 1) & ~(off_t)(sysconf(_SC_PAGESIZE) - 1));
    size_t len;
    int rc;

    if (g->start > g->first) {
        /* As the read path: a newline at end - 1 or later starts no line here. */
        nl = memchr(p - 1, '\n', (size_t)(stop - p));
        if (shrank_under(g, nl ? nl : stop, tail)) {
            return RELAY_LINES_SHRANK;
        }
        if (nl == NULL) {
            return 0;
        }
        p = nl + 1;
    }
    while (p < stop && p < end) {
        ahead = prefetch_to(ahead > p ? ahead : p, end - p > PREFETCH_AHEAD ? p + PREFETCH_AHEAD : end);
        if (calls->ahead != NULL && p < tail && (rc = calls->ahead(calls->ctx, p, (size_t)(tail - p), 0, &len)) >= 0) {
            if (rc > 0) {
                return RELAY_LINES_STOPPED;
            }
            p += len + 1;
            continue;
        }
        nl = memchr(p, '\n', (size_t)(end - p));
        len = (size_t)((nl ? nl : end) - p);
        if (shrank_under(g, p + len, tail)) {
            return RELAY_LINES_SHRANK;
        }
        if (calls->line(calls->ctx, len <= g->keep ? p : NULL, len)) {
            return RELAY_LINES_STOPPED;
        }
        p += len + 1;
    }
    return 0;
}


typedef struct mapped_call {
    const relay_line_range *g;
    const relay_line_calls *calls;
} mapped_call;


static int
call_run_mapped(void *arg)
{
    mapped_call *c = arg;

    return run_mapped(c->g, c->calls);
}


/* run_mapped with its reads guarded: a page that raised SIGBUS is a file cut
 * short, or (the same size still) a page that could not be read in. */
static int
run_mapped_guarded(const relay_line_range *g, const relay_line_calls *calls)
{
    mapped_call c = {g, calls};
    int faulted, rc = relay_map_guard_run(g->map, (size_t)g->size, call_run_mapped, &c, &faulted);

    if (!faulted) {
        return rc;
    }
    if (file_shrank(g)) {
        return RELAY_LINES_SHRANK;
    }
    errno = EIO;
    return RELAY_LINES_ERROR;
}


/* The line at buf[*i], tried ahead (see relay_line_ahead_fn): 1 when
 * settled (*i after it, *rc the run's result so far), else 0. */
static int
try_ahead(const pass *s, const relay_line_calls *calls, size_t *i, int *rc)
{
    size_t len;
    int got;

    if (calls->ahead == NULL
        || (got = calls->ahead(calls->ctx, s->r->buf + *i, s->have - *i, s->at + (off_t)s->have == s->g->size, &len))
               < 0) {
        return 0;
    }
    *i += len + 1;
    *rc = got > 0 ? RELAY_LINES_STOPPED : 0;
    return 1;
}


int
relay_line_reader_run(relay_line_reader *r, const relay_line_range *g, const relay_line_calls *calls)
{
    pass s = {r, g, g->start, 0};
    size_t i = 0;
    char *line, *nl;
    int rc = 0;

    if (g->map != NULL) {
        return run_mapped_guarded(g, calls);
    }
    if (r->cap < RELAY_LINE_READER_PIECE && grow(r, RELAY_LINE_READER_PIECE) < 0) {
        return RELAY_LINES_NOMEM;
    }
    if (g->start > g->first && (rc = skip_to_first_line(&s, &i)) != 0) {
        return rc > 0 ? 0 : rc;
    }
    while (rc == 0 && s.at + (off_t)i < g->end && s.at + (off_t)i < g->size) {
        line = r->buf + i;
        if (i < s.have && try_ahead(&s, calls, &i, &rc)) {
            continue;
        }
        if ((nl = memchr(line, '\n', s.have - i)) != NULL) {
            rc = calls->line(calls->ctx, line, (size_t)(nl - line)) ? RELAY_LINES_STOPPED : 0;
            i = (size_t)(nl - r->buf) + 1;
        } else if (s.at + (off_t)s.have == g->size && s.have > i) {
            rc = calls->line(calls->ctx, line, s.have - i) ? RELAY_LINES_STOPPED : 0; /* the last line, unterminated */
            i = s.have;
        } else {
            rc = read_on(&s, &i, calls->line, calls->ctx);
        }
    }
    return rc;
}


void
relay_line_reader_free(relay_line_reader *r)
{
    free(r->buf);
    r->buf = NULL;
    r->cap = 0;
}
