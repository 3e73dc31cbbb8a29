/*
 * match_scan_parallel: the lines of a regular file matched on several
 * threads, reported in line order (include/relay/match_scan.h).
 *
 * The file is cut into byte ranges; a range's lines are those that start in
 * it (src/line_reader.c reads them, or hands them over from a mapping of the
 * file where src/map_probe.c finds that faster). Worker threads, the calling
 * thread among them, take the next range, read and match its lines with a
 * buffer and a relay_match_state of their own (the compiled matcher is shared
 * read-only) and write what the sink must hear into the chunk's record
 * buffer. The calling thread also replays the records chunk by chunk, in
 * order, so the sink's callbacks (which may run Lua) only ever run
 * on the caller's thread and see exactly what a one-line-at-a-time scan would
 * report. At most a window of chunks is in flight, which bounds the memory
 * that records of a huge file can take.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "relay/json_scan.h"
#include "relay/line_reader.h"
#include "relay/map_ahead.h"
#include "relay/map_guard.h"
#include "relay/map_probe.h"
#include "relay/match_scan.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEFAULT_CHUNK (1u << 20)
#define MAX_THREADS 64
#define CHUNKS_PER_THREAD 4
#define IDS_FIRST 64
/* A record's second word for a malformed line (else it is the number of ids). */
#define RECORD_MALFORMED UINT32_MAX

/* Why a scan ended early, other than a callback asking it to. */
enum failure { FAILED_NOT, FAILED_MEMORY, FAILED_SHRANK, FAILED_READ };

/* One chunk: the byte range its lines start in, and once matched, its
 * records: per reported line the words {line within the chunk, n} and then n
 * rule ids, or for a malformed line {line, RECORD_MALFORMED, bytes} and the
 * NUL-terminated reason padded to whole words. */
typedef struct chunk {
    off_t start;
    size_t len;
    uint32_t *words;
    size_t nwords, cap;
    long long lines, matched;
    int done;
    enum failure failure; /* why matching the chunk stopped short, if it did */
    int read_errno;       /* with FAILED_READ: the read's */
} chunk;

typedef struct pool {
    int fd;
    off_t first, size; /* the file's bytes the scan covers */
    const char *map;   /* NULL, or the file's bytes [0, size) mapped */
    const relay_matcher *m;
    const relay_match_scan_opts *opts;
    int want_ids; /* the sink takes the ids of matches */
    chunk *chunks;
    size_t nchunks;
    size_t next;     /* the next chunk a worker takes */
    size_t consumed; /* chunks replayed so far: the window's start */
    size_t window;
    int quit;
    int read_errno; /* the failed read's, for the message */
    pthread_mutex_t lock;
    pthread_cond_t taken; /* a chunk was replayed (or the scan stops) */
    pthread_cond_t ready; /* a chunk was matched */
} pool;

/* One worker's scratch. */
typedef struct worker {
    pool *p;
    relay_match_state *st;
    relay_line_reader reader;
    uint32_t *ids;
    size_t ids_cap;
    chunk *at; /* the chunk being matched */
    pthread_t thread;
} worker;


static int
push_words(chunk *c, const uint32_t *w, size_t n)
{
    uint32_t *grown;
    size_t cap;

    if (c->nwords + n > c->cap) {
        cap = c->cap ? c->cap * 2 : 256;
        while (cap < c->nwords + n) {
            cap *= 2;
        }
        if ((grown = realloc(c->words, cap * sizeof(*grown))) == NULL) {
            c->failure = FAILED_MEMORY;
            return -1;
        }
        c->words = grown;
        c->cap = cap;
    }
    memcpy(c->words + c->nwords, w, n * sizeof(*w));
    c->nwords += n;
    return 0;
}


static void
record_malformed(chunk *c, uint32_t line, const char *reason)
{
    size_t bytes = strlen(reason) + 1, nwords = (bytes + 3) / 4;
    uint32_t head[3] = {line, RECORD_MALFORMED, (uint32_t)bytes};
    uint32_t text[64]; /* reasons are short: see the 256-byte buffer below */

    memset(text, 0, sizeof(text));
    memcpy(text, reason, bytes);
    if (push_words(c, head, 3) == 0) {
        push_words(c, text, nwords);
    }
}


/* Record a matched line: its number within the chunk and, when the sink
 * takes them, the ids. */
static void
record_match(worker *w, chunk *c, uint32_t line, int n)
{
    uint32_t head[2] = {line, w->p->want_ids ? (uint32_t)n : 0};

    c->matched++;
    if (push_words(c, head, 2) == 0 && head[1] > 0) {
        push_words(c, w->ids, (size_t)n);
    }
}


/* Match one line of chunk c (its newline excluded) and record the outcome. */
static void
match_line(worker *w, chunk *c, const char *text, size_t len)
{
    const relay_match_scan_opts *opts = w->p->opts;
    uint32_t line = (uint32_t)c->lines++, *grown;
    char reason[256];
    int n;

    n = relay_matcher_match_with(w->p->m, w->st, text, len, opts->max_bytes, opts->now_ms, w->ids, w->ids_cap, reason,
                                 sizeof(reason));
    if (n > 0 && (size_t)n > w->ids_cap) {
        if ((grown = realloc(w->ids, (size_t)n * sizeof(*grown))) == NULL) {
            c->failure = FAILED_MEMORY;
            return;
        }
        w->ids = grown;
        w->ids_cap = (size_t)n;
        n = relay_matcher_match_with(w->p->m, w->st, text, len, opts->max_bytes, opts->now_ms, w->ids, w->ids_cap,
                                     reason, sizeof(reason));
    }
    if (n < 0) {
        record_malformed(c, line, reason);
        return;
    }
    if (n > 0) {
        record_match(w, c, line, n);
    }
}


/* A line of the worker's chunk matched before its end is known (line_reader's
 * ahead callback): only a valid line is settled here; any other goes to
 * on_line, which finds its end and reports it in the usual words. */
static int
on_line_ahead(void *ctx, const char *text, size_t avail, int eol_at_end, size_t *len)
{
    worker *w = ctx;
    chunk *c = w->at;
    const relay_match_scan_opts *opts = w->p->opts;
    int n = relay_matcher_match_line(w->p->m, w->st, text, avail, eol_at_end, opts->max_bytes, opts->now_ms, w->ids,
                                     w->ids_cap, len);

    if (n < 0) {
        return -1;
    }
    if (n > 0) {
        record_match(w, c, (uint32_t)c->lines, n);
    }
    c->lines++;
    return c->failure != FAILED_NOT;
}


/* One line of the worker's chunk (line_reader's callback); a line too long
 * to be held is malformed by its length alone, in the matcher's words. */
static int
on_line(void *ctx, const char *text, size_t len)
{
    worker *w = ctx;
    chunk *c = w->at;
    char reason[128];

    if (text != NULL) {
        match_line(w, c, text, len);
    } else {
        relay_json_too_large(len, w->p->opts->max_bytes, reason, sizeof(reason));
        record_malformed(c, (uint32_t)c->lines++, reason);
    }
    return c->failure != FAILED_NOT;
}


/* Every line that starts in the chunk's range. */
static void
match_chunk(worker *w, chunk *c)
{
    pool *p = w->p;
    relay_line_range range = {p->fd, p->first, c->start, c->start + (off_t)c->len, p->size, p->opts->max_bytes, p->map};
    relay_line_calls calls = {on_line, on_line_ahead, w};
    int rc;

    w->at = c;
    rc = relay_line_reader_run(&w->reader, &range, &calls);
    if (rc == RELAY_LINES_NOMEM) {
        c->failure = FAILED_MEMORY;
    } else if (rc == RELAY_LINES_SHRANK) {
        c->failure = FAILED_SHRANK;
    } else if (rc == RELAY_LINES_ERROR) {
        c->failure = FAILED_READ;
        c->read_errno = errno ? errno : EIO;
    }
}


/* The next chunk to match, waiting while the window is full (or, with
 * `wait` 0, not); nchunks when there is none to take or the scan stops. */
static size_t
take_chunk(pool *p, int wait)
{
    size_t i;

    pthread_mutex_lock(&p->lock);
    while (wait && !p->quit && p->next < p->nchunks && p->next >= p->consumed + p->window) {
        pthread_cond_wait(&p->taken, &p->lock);
    }
    i = p->quit || p->next >= p->consumed + p->window ? p->nchunks : p->next;
    if (i < p->nchunks) {
        p->next++;
    }
    pthread_mutex_unlock(&p->lock);
    return i;
}


static void
mark_done(pool *p, size_t i)
{
    pthread_mutex_lock(&p->lock);
    p->chunks[i].done = 1;
    pthread_cond_broadcast(&p->ready);
    pthread_mutex_unlock(&p->lock);
}


static int
is_done(pool *p, size_t i)
{
    int done;

    pthread_mutex_lock(&p->lock);
    done = p->chunks[i].done;
    pthread_mutex_unlock(&p->lock);
    return done;
}


static void *
work(void *arg)
{
    worker *w = arg;
    pool *p = w->p;
    size_t i;

    while ((i = take_chunk(p, 1)) < p->nchunks) {
        match_chunk(w, &p->chunks[i]);
        mark_done(p, i);
    }
    return NULL;
}


/* Replay one matched chunk to the sink; lines before it: *counts. Returns
 * nonzero when a callback stopped the scan (counts then end at its line). */
static int
replay(const chunk *c, const relay_match_scan_sink *sink, relay_match_scan_counts *counts)
{
    long long base = counts->total, matched = 0;
    size_t i = 0;
    int stop = 0;

    while (i < c->nwords && !stop) {
        long long line = base + c->words[i] + 1;
        uint32_t n = c->words[i + 1];

        if (n == RECORD_MALFORMED) {
            stop = sink->on_malformed != NULL && sink->on_malformed(sink->ctx, line, (const char *)&c->words[i + 3]);
            i += 3 + (c->words[i + 2] + 3) / 4;
        } else {
            matched++;
            stop = sink->on_match != NULL && sink->on_match(sink->ctx, line, &c->words[i + 2], n);
            i += 2 + n;
        }
        if (stop) {
            counts->total = line;
            counts->matched += matched;
            return 1;
        }
    }
    counts->total += c->lines;
    counts->matched += c->matched;
    return 0;
}


/* The scan's bytes cut into ranges of `size` bytes (the last one shorter). */
static chunk *
cut_ranges(off_t first, off_t end, size_t size, size_t *n)
{
    size_t count = (size_t)((end - first + (off_t)size - 1) / (off_t)size), i;
    chunk *chunks = calloc(count ? count : 1, sizeof(*chunks));

    for (i = 0; chunks != NULL && i < count; i++) {
        chunks[i].start = first + (off_t)(i * size);
        chunks[i].len = (size_t)(end - chunks[i].start) < size ? (size_t)(end - chunks[i].start) : size;
    }
    *n = count;
    return chunks;
}


/* The CPUs this process may run on. */
static size_t
cpu_count(void)
{
    cpu_set_t set;
    long online;

    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
        return (size_t)CPU_COUNT(&set);
    }
    online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (size_t)online : 1;
}


static int
worker_init(worker *w, pool *p)
{
    memset(w, 0, sizeof(*w));
    w->p = p;
    w->ids_cap = IDS_FIRST;
    w->st = relay_match_state_new();
    w->ids = malloc(w->ids_cap * sizeof(*w->ids));
    return w->st != NULL && w->ids != NULL ? 0 : -1;
}


static void
worker_free(worker *w)
{
    relay_match_state_free(w->st);
    relay_line_reader_free(&w->reader);
    free(w->ids);
}


/* Wait for chunk i, replay it and free its records; nonzero to stop. */
static int
consume(pool *p, size_t i, const relay_match_scan_sink *sink, relay_match_scan_counts *counts, enum failure *failure)
{
    chunk *c = &p->chunks[i];
    int stop;

    pthread_mutex_lock(&p->lock);
    while (!c->done) {
        pthread_cond_wait(&p->ready, &p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    if (c->failure != FAILED_NOT) {
        *failure = c->failure;
        p->read_errno = c->read_errno;
        return 1;
    }
    stop = replay(c, sink, counts);
    free(c->words);
    c->words = NULL;
    pthread_mutex_lock(&p->lock);
    p->consumed = i + 1;
    pthread_cond_broadcast(&p->taken);
    pthread_mutex_unlock(&p->lock);
    return stop;
}


/* The caller's thread is one of the matching threads: between chunks of its
 * own it replays every chunk that is done, in order, and it only waits when
 * there is nothing to take. A caller that only waited was woken once per
 * chunk, each time taking a core from a worker (~550 context switches for a
 * 190 MB file on two cores). */
static int
lead(pool *p, worker *w, const relay_match_scan_sink *sink, relay_match_scan_counts *counts, enum failure *failure)
{
    size_t i = 0, mine;
    int stop = 0;

    while (i < p->nchunks && !stop) {
        if (!is_done(p, i) && (mine = take_chunk(p, 0)) < p->nchunks) {
            match_chunk(w, &p->chunks[mine]);
            mark_done(p, mine);
            continue;
        }
        stop = consume(p, i++, sink, counts, failure);
    }
    return stop;
}


/* workers[0] is the caller's; the others get a thread each. */
static int
run_threads(pool *p, worker *workers, size_t nthreads, const relay_match_scan_sink *sink,
            relay_match_scan_counts *counts, enum failure *failure)
{
    size_t i, started = 0;
    int stop;

    for (i = 1; i < nthreads; i++) {
        if (pthread_create(&workers[i].thread, NULL, work, &workers[i]) != 0) {
            break;
        }
        started++;
    }
    stop = lead(p, &workers[0], sink, counts, failure);
    pthread_mutex_lock(&p->lock);
    p->quit = 1;
    pthread_cond_broadcast(&p->taken);
    pthread_mutex_unlock(&p->lock);
    for (i = 1; i <= started; i++) {
        pthread_join(workers[i].thread, NULL);
    }
    return stop;
}


static size_t
thread_count(const relay_match_scan_opts *opts, size_t nchunks)
{
    size_t n = opts->threads > 0 ? (size_t)opts->threads : cpu_count();

    if (n > MAX_THREADS) {
        n = MAX_THREADS;
    }
    return n < nchunks ? n : (nchunks ? nchunks : 1);
}


/* Match p's chunks on as many workers as it takes and replay them; returns
 * nonzero when the scan ended early (a callback, or *failure). */
static int
match_all(pool *p, const relay_match_scan_sink *sink, relay_match_scan_counts *counts, enum failure *failure)
{
    worker workers[MAX_THREADS];
    size_t nthreads = thread_count(p->opts, p->nchunks), i, ready = 0;
    int stop = 0;

    p->window = nthreads * CHUNKS_PER_THREAD;
    for (i = 0; i < nthreads && *failure == FAILED_NOT; i++) {
        if (worker_init(&workers[i], p) < 0) {
            *failure = FAILED_MEMORY;
        }
        ready = i + 1;
    }
    if (*failure == FAILED_NOT) {
        stop = run_threads(p, workers, nthreads, sink, counts, failure);
    }
    for (i = 0; i < ready; i++) {
        worker_free(&workers[i]);
    }
    return stop;
}


static void
unmap_file(pool *p)
{
    if (p->map != NULL) {
        munmap((void *)(uintptr_t)p->map, (size_t)p->size);
        relay_map_guard_release();
        p->map = NULL;
    }
}


/* Whether the scan may map the file at all: not when forced to read, not an
 * empty or unmappable range, and in AUTO not a range too small to probe. */
static int
may_map(const pool *p)
{
    if (p->opts->access == RELAY_MATCH_ACCESS_READ || p->size == p->first || (uintmax_t)p->size > SIZE_MAX) {
        return 0;
    }
    return p->opts->access != RELAY_MATCH_ACCESS_AUTO || p->size - p->first >= RELAY_MAP_PROBE_MIN;
}


/* Map the file (or take over the mapping opts->ahead made of it) when
 * opts->access asks for it or the probe finds it faster for the bytes the scan
 * covers; SIGBUS is guarded while the mapping lives. Reading is the fallback:
 * a file that cannot be mapped is read. */
static void
map_file(pool *p)
{
    int maps = may_map(p);
    /* A mapping made ahead was probed when it was made, before its helper
     * touched it; probed now, the helper's faulting would sway the probe. */
    void *map = maps ? relay_map_ahead_take(p->opts->ahead, p->fd, p->size) : NULL;
    int judged = map != NULL;

    if (!judged) {
        /* Reading, or made for another file or size: its faulting would only compete. */
        relay_map_ahead_stop(p->opts->ahead);
    }
    if (!maps || (!judged && (map = mmap(NULL, (size_t)p->size, PROT_READ, MAP_SHARED, p->fd, 0)) == MAP_FAILED)) {
        return;
    }
    if (relay_map_guard_hold() < 0) {
        munmap(map, (size_t)p->size);
        return;
    }
    p->map = map;
    if (p->opts->access == RELAY_MATCH_ACCESS_AUTO && !judged
        && !relay_map_probe_guarded(p->fd, p->map, p->first & ~(off_t)(sysconf(_SC_PAGESIZE) - 1), p->size)) {
        unmap_file(p);
    }
}


static void
failure_message(const pool *p, enum failure failure, char *err, size_t errlen)
{
    if (failure == FAILED_MEMORY) {
        snprintf(err, errlen, "out of memory");
    } else if (failure == FAILED_SHRANK) {
        snprintf(err, errlen, "the file changed while it was read (it shrank)");
    } else {
        snprintf(err, errlen, "read error: %s", strerror(p->read_errno));
    }
}


int
relay_match_scan_file(relay_matcher *m, int fd, off_t first, off_t size, const relay_match_scan_opts *opts,
                      const relay_match_scan_sink *sink, relay_match_scan_counts *counts, char *err, size_t errlen)
{
    pool p;
    enum failure failure = FAILED_NOT;
    size_t i;
    int stop = 0;

    memset(counts, 0, sizeof(*counts));
    memset(&p, 0, sizeof(p));
    if (relay_matcher_compile(m, err, errlen) < 0) {
        return -1;
    }
    p.chunks = cut_ranges(first, size, opts->read_chunk ? opts->read_chunk : DEFAULT_CHUNK, &p.nchunks);
    if (p.chunks == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p.fd = fd;
    p.first = first;
    p.size = size;
    p.m = m;
    p.opts = opts;
    p.want_ids = sink->on_match != NULL;
    pthread_mutex_init(&p.lock, NULL);
    pthread_cond_init(&p.taken, NULL);
    pthread_cond_init(&p.ready, NULL);
    map_file(&p);
    stop = match_all(&p, sink, counts, &failure);
    unmap_file(&p);
    for (i = 0; i < p.nchunks; i++) {
        free(p.chunks[i].words);
    }
    free(p.chunks);
    pthread_cond_destroy(&p.ready);
    pthread_cond_destroy(&p.taken);
    pthread_mutex_destroy(&p.lock);
    if (failure != FAILED_NOT) {
        failure_message(&p, failure, err, errlen);
        return -1;
    }
    return stop ? RELAY_MATCH_SCAN_STOPPED : 0;
}
