/*
 * match_scan: match every line of a stream of JSON events, one event per line,
 * against a matcher, without a call per line from the caller: the bulk side of
 * `relay match --events`. What to do with a match or a malformed line is the
 * caller's (a sink of callbacks); this unit only reads, splits and matches.
 *
 * Reading blocks: meant for a one-shot command, never for the daemon's loop.
 * A regular file is split into byte ranges that several threads read and
 * match (relay_match_scan_file); pipes, sockets and terminals are read as
 * their bytes arrive on the caller's thread. Either way the sink hears the
 * same calls in the same order, on the caller's thread.
 *
 * Every line is an event, the last one too when no newline ends it. A line the
 * matcher refuses is malformed, an empty line included ("empty event"). A line
 * longer than the read buffer is skipped without being held in memory and
 * reported as "event too large (<bytes> bytes > <max_bytes>)".
 */
#ifndef RELAY_MATCH_SCAN_H
#define RELAY_MATCH_SCAN_H

#include "relay/matcher.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* relay_match_scan's result when a sink callback asked it to stop. */
#define RELAY_MATCH_SCAN_STOPPED 1

typedef struct relay_match_scan_sink {
    /* A matching event: its line number (from 1) and the ids of the rules it
     * matched, ascending (ids is reused: copy what must outlive the call).
     * A nonzero return stops the scan. NULL: matches are only counted. */
    int (*on_match)(void *ctx, long long line, const uint32_t *ids, size_t nids);
    /* A malformed line and why. A nonzero return stops the scan. NULL: skip. */
    int (*on_malformed)(void *ctx, long long line, const char *reason);
    void *ctx;
    /* A pipe, socket or terminal has nothing more to read for now: called
     * before the scan waits for it, so that what was reported so far can be
     * written out (a live filter's output). A nonzero return stops the scan.
     * NULL: not called. */
    int (*on_wait)(void *ctx);
} relay_match_scan_sink;

typedef struct relay_match_scan_opts {
    size_t max_bytes;  /* the largest event accepted (RELAY_MAX_EVENT_BYTES) */
    int64_t now_ms;    /* wall clock for temporal rules, ms since the Unix epoch */
    size_t read_chunk; /* streaming: 0 for 4 MiB; the read buffer holds
                        * max(max_bytes + 1, read_chunk) bytes, at most 1 GiB.
                        * A regular file: the size of the byte ranges the
                        * threads take, 0 for 1 MiB */
    int threads;       /* a regular file: matching threads, 0 for one per CPU
                        * this process may use; 1 matches on the caller's thread */
    int access;        /* a regular file: RELAY_MATCH_ACCESS_* */
    /* A regular file: its mapping, started before the scan (include/relay/
     * map_ahead.h), taken over when it is of this file at this size and the
     * scan maps; NULL for none. The caller still frees it. */
    struct relay_map_ahead *ahead;
} relay_match_scan_opts;

/* How relay_match_scan_file reaches the file's bytes. AUTO (0): through a
 * mapping when relay_map_probe finds that faster on this host, else pread;
 * the others force one way (tests compare them). */
#define RELAY_MATCH_ACCESS_AUTO 0
#define RELAY_MATCH_ACCESS_READ 1
#define RELAY_MATCH_ACCESS_MAP 2

typedef struct relay_match_scan_counts {
    long long matched; /* events that matched at least one rule */
    long long total;   /* lines read, malformed ones included */
} relay_match_scan_counts;

/*
 * Read `in` to its end, matching each line with m. Returns 0 at the end of the
 * input, RELAY_MATCH_SCAN_STOPPED when a callback stopped the scan, or -1 with a
 * message in err on a read error or when memory ran out. *counts holds what was
 * seen in every case. `in` stays open and owned by the caller. A regular file
 * is matched by relay_match_scan_file; a pipe, socket or terminal is read as
 * its bytes arrive (a pipe's size raised to 1 MiB where the limits allow), so
 * that each line is matched without waiting for more input and the writer
 * runs on meanwhile.
 */
int relay_match_scan(relay_matcher *m, FILE *in, const relay_match_scan_opts *opts, const relay_match_scan_sink *sink,
                     relay_match_scan_counts *counts, char *err, size_t errlen);

/*
 * The same over the bytes [first, size) of the regular file fd (size: its
 * size when the scan began), mapped or read with pread (opts->access) and
 * matched on opts->threads
 * threads (0: one per CPU), each with its own relay_match_state over the
 * shared matcher, compiled first. The sink's callbacks run on the calling
 * thread only, in line order. A file that ends before `size` while it is
 * read is an error: "the file changed while it was read (it shrank)".
 */
int relay_match_scan_file(relay_matcher *m, int fd, off_t first, off_t size, const relay_match_scan_opts *opts,
                          const relay_match_scan_sink *sink, relay_match_scan_counts *counts, char *err, size_t errlen);

#endif
