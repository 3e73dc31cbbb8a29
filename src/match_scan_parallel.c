/*
 * match_scan_parallel: the lines of an in-memory text (a mapped file) matched
 * on several threads, reported in line order (include/relay/match_scan.h).
 *
 * The text is cut into chunks at line boundaries. Worker threads take the next
 * chunk, match its lines with a relay_match_state of their own (the compiled
 * matcher is shared read-only) and write what the sink must hear into the
 * chunk's record buffer. The calling thread replays the records chunk by
 * chunk, in order, so the sink's callbacks (which may run Lua) only ever run
 * on the caller's thread and see exactly what a one-line-at-a-time scan would
 * report. At most a window of chunks is in flight, which bounds the memory
 * that records of a huge file can take.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "relay/map_guard.h"
#include "relay/match_scan.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_CHUNK (1u << 20)
#define MAX_THREADS 64
#define CHUNKS_PER_THREAD 4
#define IDS_FIRST 64
/* A record's second word for a malformed line (else it is the number of ids). */
#define RECORD_MALFORMED UINT32_MAX

/* Why a scan ended early, other than a callback asking it to. */
enum failure { FAILED_NOT, FAILED_MEMORY, FAILED_SHRANK };

/* One chunk: its bytes, and once matched, its records: per reported line the
 * words {line within the chunk, n} and then n rule ids, or for a malformed
 * line {line, RECORD_MALFORMED, bytes} and the NUL-terminated reason padded
 * to whole words. */
typedef struct chunk {
    const char *text;
    size_t len;
    uint32_t *words;
    size_t nwords, cap;
    long long lines, matched;
    int done, oom;
    int shrank; /* its bytes vanished: the mapped file was truncated */
} chunk;

typedef struct pool {
    const relay_matcher *m;
    const relay_match_scan_opts *opts;
    int want_ids; /* the sink takes the ids of matches */
    chunk *chunks;
    size_t nchunks;
    size_t next;     /* the next chunk a worker takes */
    size_t consumed; /* chunks replayed so far: the window's start */
    size_t window;
    int quit;
    pthread_mutex_t lock;
    pthread_cond_t taken; /* a chunk was replayed (or the scan stops) */
    pthread_cond_t ready; /* a chunk was matched */
} pool;

/* One worker's scratch. */
typedef struct worker {
    pool *p;
    relay_match_state *st;
    uint32_t *ids;
    size_t ids_cap;
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
            c->oom = 1;
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


/* Match one line of chunk c (its newline excluded) and record the outcome. */
static void
match_line(worker *w, chunk *c, const char *text, size_t len)
{
    const relay_match_scan_opts *opts = w->p->opts;
    uint32_t line = (uint32_t)c->lines++, *grown, head[2];
    char reason[256];
    int n;

    n = relay_matcher_match_with(w->p->m, w->st, text, len, opts->max_bytes, opts->now_ms, w->ids, w->ids_cap, reason,
                                 sizeof(reason));
    if (n > 0 && (size_t)n > w->ids_cap) {
        if ((grown = realloc(w->ids, (size_t)n * sizeof(*grown))) == NULL) {
            c->oom = 1;
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
    if (n == 0) {
        return;
    }
    c->matched++;
    head[0] = line;
    head[1] = w->p->want_ids ? (uint32_t)n : 0;
    if (push_words(c, head, 2) == 0 && head[1] > 0) {
        push_words(c, w->ids, (size_t)n);
    }
}


/* Every line of a chunk; the last one may lack its newline (end of text). */
static void
match_chunk(worker *w, chunk *c)
{
    const char *p = c->text, *end = c->text + c->len, *nl;

    while (p < end && !c->oom) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL) {
            nl = end;
        }
        match_line(w, c, p, (size_t)(nl - p));
        p = nl + 1;
    }
}


/* match_chunk, with a truncation of the mapped file under it reported in
 * c->shrank instead of killing the process with SIGBUS. */
static void
match_chunk_guarded(worker *w, chunk *c)
{
    sigjmp_buf env;

    if (sigsetjmp(env, 1) == 0) {
        relay_map_guard_arm(&env, c->text, c->len);
        match_chunk(w, c);
    } else {
        c->shrank = 1;
    }
    relay_map_guard_disarm();
}


/* The next chunk to match, waiting while the window is full; nchunks when
 * there is none left or the scan stops. */
static size_t
take_chunk(pool *p)
{
    size_t i;

    pthread_mutex_lock(&p->lock);
    while (!p->quit && p->next < p->nchunks && p->next >= p->consumed + p->window) {
        pthread_cond_wait(&p->taken, &p->lock);
    }
    i = p->quit ? p->nchunks : p->next;
    if (i < p->nchunks) {
        p->next++;
    }
    pthread_mutex_unlock(&p->lock);
    return i;
}


static void *
work(void *arg)
{
    worker *w = arg;
    pool *p = w->p;
    size_t i;

    while ((i = take_chunk(p)) < p->nchunks) {
        match_chunk_guarded(w, &p->chunks[i]);
        pthread_mutex_lock(&p->lock);
        p->chunks[i].done = 1;
        pthread_cond_broadcast(&p->ready);
        pthread_mutex_unlock(&p->lock);
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


/* Fill chunks (room for len / size + 2) with pieces of about `size` bytes
 * of text that end after a newline (the last one at the end of the text);
 * returns how many. */
static size_t
cut_at_lines(const char *text, size_t len, size_t size, chunk *chunks)
{
    size_t n = 0, start = 0, end;
    const char *nl;

    while (start < len) {
        end = len - start > size ? start + size : len;
        if (end < len && (nl = memchr(text + end - 1, '\n', len - end + 1)) != NULL) {
            end = (size_t)(nl - text) + 1;
        } else {
            end = len;
        }
        chunks[n].text = text + start;
        chunks[n].len = end - start;
        n++;
        start = end;
    }
    return n;
}


/* Cut text into chunks (cut_at_lines). Returns the count, or -1 with
 * *failure set. */
static long
cut_chunks(const char *text, size_t len, size_t size, chunk **out, enum failure *failure)
{
    chunk *chunks = calloc(len / size + 2, sizeof(*chunks));
    sigjmp_buf env;
    size_t n;

    if (chunks == NULL) {
        *failure = FAILED_MEMORY;
        return -1;
    }
    if (sigsetjmp(env, 1) != 0) {
        relay_map_guard_disarm();
        free(chunks);
        *failure = FAILED_SHRANK;
        return -1;
    }
    relay_map_guard_arm(&env, text, len);
    n = cut_at_lines(text, len, size, chunks);
    relay_map_guard_disarm();
    *out = chunks;
    return (long)n;
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
    if (c->oom || c->shrank) {
        *failure = c->oom ? FAILED_MEMORY : FAILED_SHRANK;
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


/* The caller's thread matches and replays each chunk in turn. */
static int
run_inline(pool *p, worker *w, const relay_match_scan_sink *sink, relay_match_scan_counts *counts,
           enum failure *failure)
{
    size_t i;
    int stop = 0;

    for (i = 0; i < p->nchunks && !stop; i++) {
        match_chunk_guarded(w, &p->chunks[i]);
        p->chunks[i].done = 1;
        stop = consume(p, i, sink, counts, failure);
    }
    return stop;
}


static int
run_threads(pool *p, worker *workers, size_t nthreads, const relay_match_scan_sink *sink,
            relay_match_scan_counts *counts, enum failure *failure)
{
    size_t i, started = 0;
    int stop = 0;

    for (i = 0; i < nthreads; i++) {
        if (pthread_create(&workers[i].thread, NULL, work, &workers[i]) != 0) {
            break;
        }
        started++;
    }
    if (started == 0) {
        return run_inline(p, &workers[0], sink, counts, failure);
    }
    for (i = 0; i < p->nchunks && !stop; i++) {
        stop = consume(p, i, sink, counts, failure);
    }
    pthread_mutex_lock(&p->lock);
    p->quit = 1;
    pthread_cond_broadcast(&p->taken);
    pthread_mutex_unlock(&p->lock);
    for (i = 0; i < started; i++) {
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
        stop = nthreads > 1 ? run_threads(p, workers, nthreads, sink, counts, failure)
                            : run_inline(p, &workers[0], sink, counts, failure);
    }
    for (i = 0; i < ready; i++) {
        worker_free(&workers[i]);
    }
    return stop;
}


int
relay_match_scan_memory(relay_matcher *m, const char *text, size_t len, const relay_match_scan_opts *opts,
                        const relay_match_scan_sink *sink, relay_match_scan_counts *counts, char *err, size_t errlen)
{
    pool p;
    relay_map_guard_saved saved;
    enum failure failure = FAILED_NOT;
    size_t i;
    long nchunks;
    int stop = 0;

    memset(counts, 0, sizeof(*counts));
    memset(&p, 0, sizeof(p));
    if (relay_matcher_compile(m, err, errlen) < 0) {
        return -1;
    }
    /* Unguarded if SIGBUS cannot be taken over: a truncation then kills. */
    relay_map_guard_install(&saved);
    nchunks = cut_chunks(text, len, opts->read_chunk ? opts->read_chunk : DEFAULT_CHUNK, &p.chunks, &failure);
    if (nchunks >= 0) {
        p.m = m;
        p.opts = opts;
        p.want_ids = sink->on_match != NULL;
        p.nchunks = (size_t)nchunks;
        pthread_mutex_init(&p.lock, NULL);
        pthread_cond_init(&p.taken, NULL);
        pthread_cond_init(&p.ready, NULL);
        stop = match_all(&p, sink, counts, &failure);
        for (i = 0; i < p.nchunks; i++) {
            free(p.chunks[i].words);
        }
        free(p.chunks);
        pthread_cond_destroy(&p.ready);
        pthread_cond_destroy(&p.taken);
        pthread_mutex_destroy(&p.lock);
    }
    relay_map_guard_restore(&saved);
    if (failure != FAILED_NOT) {
        snprintf(err, errlen, "%s", failure == FAILED_MEMORY ? "out of memory" : RELAY_MAP_GUARD_MESSAGE);
        return -1;
    }
    return stop ? RELAY_MATCH_SCAN_STOPPED : 0;
}
