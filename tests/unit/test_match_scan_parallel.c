/* Unit test of relay_match_scan_file (include/relay/match_scan.h): on any
 * number of threads and any range size, read or mapped, the sink hears
 * exactly what the streaming scan reports for the same text, in the same
 * order, on the calling thread, long lines included; relay_match_scan takes
 * that path for a regular file. A file cut short while it is scanned is an
 * error either way, never a crash. */
#include "check.h"
#include "relay/map_ahead.h"
#include "relay/map_probe.h"
#include "relay/match_scan.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOW INT64_C(1767225600000)

/* The ways to reach a file's bytes that every split scan is run with. */
static const int accesses[] = {RELAY_MATCH_ACCESS_READ, RELAY_MATCH_ACCESS_MAP};
#define NACCESS (sizeof(accesses) / sizeof(*accesses))

/* What a sink saw, one "<line>:<ids>" or "<line>!<reason>" per call. */
typedef struct transcript {
    char text[65536];
    size_t len;
    long long stop_at_line;
    int truncate_fd; /* > 0: the first callback cuts this file to truncate_to */
    off_t truncate_to;
    pthread_t caller;
    int off_thread; /* a callback ran on another thread */
} transcript;


static void
note(transcript *t, const char *fmt, long long line, const char *more)
{
    t->len += (size_t)snprintf(t->text + t->len, sizeof(t->text) - t->len, fmt, line, more);
}


static int
on_match(void *ctx, long long line, const uint32_t *ids, size_t nids)
{
    transcript *t = ctx;
    char list[64];
    size_t i, used = 0;

    list[0] = '\0';
    for (i = 0; i < nids && i < 4; i++) {
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%u", i ? "," : "", ids[i]);
    }
    note(t, "%lld:%s ", line, list);
    t->off_thread |= !pthread_equal(pthread_self(), t->caller);
    if (t->truncate_fd > 0) {
        CHECK(ftruncate(t->truncate_fd, t->truncate_to) == 0);
        t->truncate_fd = 0;
    }
    return t->stop_at_line > 0 && line >= t->stop_at_line;
}


static int
on_malformed(void *ctx, long long line, const char *reason)
{
    transcript *t = ctx;

    note(t, "%lld!%s ", line, reason);
    t->off_thread |= !pthread_equal(pthread_self(), t->caller);
    return t->stop_at_line > 0 && line >= t->stop_at_line;
}


static relay_matcher *
make(void)
{
    static const char *const rules[] = {
        "{\"a\":[{\"eq\":1}]}",
        "{\"b\":[{\"exists\":true}]}",
        "{\"s\":[{\"prefix\":\"ab\"}]}",
        "{\"a\":[{\"gt\":0}]}",
    };
    relay_matcher *m = relay_matcher_new();
    char err[200];
    size_t i;

    CHECK(m != NULL);
    for (i = 0; i < sizeof(rules) / sizeof(*rules); i++) {
        CHECK(relay_matcher_add(m, rules[i], strlen(rules[i]), err, sizeof(err)) == (int)i);
    }
    return m;
}


/* A text of `lines` lines mixing matches, misses, malformed and empty lines
 * and a line longer than max_bytes; no newline after the last one. */
static char *
make_text(int lines, size_t *len)
{
    static const char *const kinds[] = {
        "{\"a\":1}",
        "{\"c\":2}",
        "{\"s\":\"abc\",\"b\":null}",
        "",
        "{\"a\":",
        "{\"a\":3,\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}",
        "  {\"a\" : 2}  ",
        "[1]",
        "{\"s\":\"a\\u0062\"}",
    };
    size_t cap = (size_t)lines * 64 + 1, used = 0;
    char *text = malloc(cap);
    int i;

    CHECK(text != NULL);
    for (i = 0; i < lines; i++) {
        used +=
            (size_t)snprintf(text + used, cap - used, "%s%s", kinds[(i * 7 + i / 5) % 9], i + 1 < lines ? "\n" : "");
    }
    *len = used;
    return text;
}


static int
scan_stream(relay_matcher *m, const char *text, size_t len, const relay_match_scan_opts *opts, transcript *t,
            relay_match_scan_counts *counts)
{
    relay_match_scan_sink sink = {on_match, on_malformed, t, NULL};
    FILE *in = fmemopen((void *)text, len, "r");
    char err[128];
    int rc;

    CHECK(in != NULL);
    rc = relay_match_scan(m, in, opts, &sink, counts, err, sizeof(err));
    fclose(in);
    return rc;
}


/* The text in a regular file, scanned by relay_match_scan_file. */
static int
scan_file(relay_matcher *m, const char *text, size_t len, const relay_match_scan_opts *opts,
          const relay_match_scan_sink *sink, relay_match_scan_counts *counts)
{
    FILE *f = tmpfile();
    char err[128];
    int rc;

    CHECK(f != NULL);
    if (f == NULL) {
        return -1;
    }
    CHECK(fwrite(text, 1, len, f) == len && fflush(f) == 0);
    rc = relay_match_scan_file(m, fileno(f), 0, (off_t)len, opts, sink, counts, err, sizeof(err));
    fclose(f);
    return rc;
}


static int
scan_split(relay_matcher *m, const char *text, size_t len, const relay_match_scan_opts *opts, transcript *t,
           relay_match_scan_counts *counts)
{
    relay_match_scan_sink sink = {on_match, on_malformed, t, NULL};

    t->caller = pthread_self();
    return scan_file(m, text, len, opts, &sink, counts);
}


/* The very first scans of the process run on worker threads: the scanner's
 * one-time set-up must not race (run under ThreadSanitizer to see it). */
static void
test_first_scans_on_threads(void)
{
    static transcript got, want;
    relay_matcher *m = make();
    relay_match_scan_opts opts = {48, NOW, 16, 4, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts, want_counts;
    size_t len;
    char *text = make_text(64, &len);

    CHECK(scan_split(m, text, len, &opts, &got, &counts) == 0);
    CHECK(!got.off_thread);
    CHECK(scan_stream(m, text, len, &opts, &want, &want_counts) == 0);
    CHECK_STR(got.text, want.text);
    CHECK(counts.total == want_counts.total && counts.total > 0);
    free(text);
    relay_matcher_free(m);
}


/* The split scan of text, for every thread count in threads, both ways of
 * reaching the file and every read chunk in chunks, gives what the
 * streaming scan gave (want), with every callback on the caller's thread. */
static void
check_splits(relay_matcher *m, const char *text, size_t len, relay_match_scan_opts opts, const transcript *want,
             const relay_match_scan_counts *want_counts, const int *threads, size_t nthreads, const size_t *chunks,
             size_t nchunks)
{
    static transcript got;
    relay_match_scan_counts got_counts;
    size_t i, j;

    for (i = 0; i < nthreads * NACCESS; i++) {
        for (j = 0; j < nchunks; j++) {
            memset(&got, 0, sizeof(got));
            opts.threads = threads[i / NACCESS];
            opts.access = accesses[i % NACCESS];
            opts.read_chunk = chunks[j];
            CHECK(scan_split(m, text, len, &opts, &got, &got_counts) == 0);
            CHECK_STR(got.text, want->text);
            CHECK(!got.off_thread);
            CHECK(got_counts.total == want_counts->total && got_counts.matched == want_counts->matched);
        }
    }
}


/* Every thread count and chunk size against the streaming scan. */
static void
test_same_as_streaming(void)
{
    static const int threads[] = {1, 2, 3, 8};
    static const size_t chunks[] = {1, 7, 64, 1000, 0};
    static transcript want;
    relay_matcher *m = make();
    relay_match_scan_opts opts = {48, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts want_counts;
    size_t len;
    char *text = make_text(400, &len);

    CHECK(scan_stream(m, text, len, &opts, &want, &want_counts) == 0);
    CHECK(want_counts.total == 400 && want_counts.matched > 0);
    check_splits(m, text, len, opts, &want, &want_counts, threads, sizeof(threads) / sizeof(*threads), chunks,
                 sizeof(chunks) / sizeof(*chunks));
    free(text);
    relay_matcher_free(m);
}


/* Lines that only a scan which finds the line's end as it goes could get
 * wrong (src/line_reader.c settles lines ahead): data after the object, a
 * newline inside an object or a string (two malformed lines), trailing
 * blanks and CRs, and objects of exactly max_bytes and one byte more. Long
 * enough for a mapped file to have lines before its last page; with and
 * without a newline at the end. */
static void
test_lines_settled_ahead(void)
{
    static const char *const kinds[] = {
        "{\"a\":1} x",
        "{\"a\":1}\t \r",
        "{\"a\":1}}",
        "{\"a\":1\n}",
        "{\"s\":\"ab\ncd\"}",
        "\r",
        "{\"s\":\"abcdefghijklmnopqrstuvwxyz0123456789ABCD\"}",  /* 48 bytes */
        "{\"s\":\"abcdefghijklmnopqrstuvwxyz0123456789ABCDE\"}", /* 49 bytes */
        "{\"a\":1}   ",
        " {}",
        "{\"a\":[1,2,[3,\n4]],\"b\":0}",
        "{\"a\":1,\"b\":2,\"s\":\"abc\"}",
        "{\"a\":[[1.5,-2],[3,4]],\"b\":[]}",
    };
    static const int threads[] = {1, 2, 3};
    static const size_t chunks[] = {7, 1000, 0};
    static transcript want;
    relay_matcher *m = make();
    relay_match_scan_opts opts = {48, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts want_counts;
    size_t cap = 64 * 1024, len = 0;
    char *text = malloc(cap);
    int line, ends;

    CHECK(text != NULL);
    CHECK(strlen(kinds[6]) == 48 && strlen(kinds[7]) == 49);
    for (line = 0; len + 128 < cap && line < 1200; line++) {
        len += (size_t)snprintf(text + len, cap - len, "%s\n", kinds[(line * 5 + line / 13) % 13]);
    }
    CHECK(len > (size_t)3 * (size_t)sysconf(_SC_PAGESIZE));
    for (ends = 0; ends < 2; ends++) {
        size_t n = ends ? len : len - 1; /* with, then without the last newline */

        memset(&want, 0, sizeof(want));
        CHECK(scan_stream(m, text, n, &opts, &want, &want_counts) == 0);
        CHECK(want_counts.matched > 0 && want_counts.total > 1200 && want.len + 64 < sizeof(want.text));
        CHECK(strstr(want.text, "too large") != NULL && strstr(want.text, "after the value") != NULL);
        check_splits(m, text, n, opts, &want, &want_counts, threads, sizeof(threads) / sizeof(*threads), chunks,
                     sizeof(chunks) / sizeof(*chunks));
    }
    free(text);
    relay_matcher_free(m);
}


/* A callback that stops the scan (the first one at or after a line): counts
 * end at its line, nothing follows. */
static void
test_stop(void)
{
    static transcript want, got;
    relay_matcher *m = make();
    relay_match_scan_opts opts = {48, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts want_counts, got_counts;
    size_t len;
    char *text = make_text(300, &len);
    long long stops[] = {1, 4, 5, 150, 299};
    size_t i;

    for (i = 0; i < sizeof(stops) / sizeof(*stops) * NACCESS; i++) {
        memset(&want, 0, sizeof(want));
        memset(&got, 0, sizeof(got));
        want.stop_at_line = got.stop_at_line = stops[i / NACCESS];
        opts.threads = 0;
        opts.read_chunk = 16;
        CHECK(scan_stream(m, text, len, &opts, &want, &want_counts) == RELAY_MATCH_SCAN_STOPPED);
        opts.threads = 2;
        opts.access = accesses[i % NACCESS];
        CHECK(scan_split(m, text, len, &opts, &got, &got_counts) == RELAY_MATCH_SCAN_STOPPED);
        CHECK_STR(got.text, want.text);
        CHECK(got_counts.total == want_counts.total && got_counts.matched == want_counts.matched);
    }
    free(text);
    relay_matcher_free(m);
}


/* Count-only sinks, an empty text, a final newline, one line. */
static void
test_edges(void)
{
    static const relay_match_scan_sink count_only = {NULL, NULL, NULL, NULL};
    relay_matcher *m = make();
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 2, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts;
    size_t i;

    for (i = 0; i < NACCESS; i++) {
        opts.access = accesses[i];
        CHECK(scan_file(m, "", 0, &opts, &count_only, &counts) == 0);
        CHECK(counts.total == 0 && counts.matched == 0);
        CHECK(scan_file(m, "{\"a\":1}\n", 8, &opts, &count_only, &counts) == 0);
        CHECK(counts.total == 1 && counts.matched == 1);
        CHECK(scan_file(m, "{\"a\":1}\n\n", 9, &opts, &count_only, &counts) == 0);
        CHECK(counts.total == 2 && counts.matched == 1);
        CHECK(scan_file(m, "x", 1, &opts, &count_only, &counts) == 0);
        CHECK(counts.total == 1 && counts.matched == 0);
    }
    relay_matcher_free(m);
}


/* relay_match_scan splits a regular file, from the stream's position on. */
static void
test_regular_file(void)
{
    static transcript want, got;
    relay_matcher *m = make();
    relay_match_scan_opts opts = {48, NOW, 64, 2, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts want_counts, got_counts;
    relay_match_scan_sink sink = {on_match, on_malformed, &got, NULL};
    size_t len;
    char *text = make_text(200, &len), err[128];
    FILE *f = tmpfile();

    CHECK(f != NULL);
    if (f == NULL) {
        free(text);
        relay_matcher_free(m);
        return;
    }
    CHECK(fwrite("{\"a\":1}\n", 1, 8, f) == 8 && fwrite(text, 1, len, f) == len && fflush(f) == 0);
    CHECK(scan_stream(m, text, len, &opts, &want, &want_counts) == 0);
    CHECK(fseek(f, 8, SEEK_SET) == 0);
    got.caller = pthread_self();
    CHECK(relay_match_scan(m, f, &opts, &sink, &got_counts, err, sizeof(err)) == 0);
    CHECK_STR(got.text, want.text);
    CHECK(got_counts.total == want_counts.total && got_counts.matched == want_counts.matched);
    CHECK(!got.off_thread);
    fclose(f);
    free(text);
    relay_matcher_free(m);
}


/* A file that reports no size (as /proc files do) is streamed, not split. */
static void
test_sizeless_file(void)
{
    static const relay_match_scan_sink count_only = {NULL, NULL, NULL, NULL};
    relay_matcher *m = make();
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 2, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts;
    FILE *f = fopen("/proc/self/status", "r");
    char err[128];

    if (f == NULL) {
        relay_matcher_free(m);
        return; /* no procfs here: nothing to check */
    }
    CHECK(relay_match_scan(m, f, &opts, &count_only, &counts, err, sizeof(err)) == 0);
    CHECK(counts.total > 1 && counts.matched == 0);
    fclose(f);
    relay_matcher_free(m);
}


/* Lines longer than the first read buffer, and than max_bytes: held and
 * matched when max_bytes allows, else read past and reported by length, as
 * the streaming scan reports them; the last one without a newline. */
static void
test_long_lines(void)
{
    static const size_t lengths[] = {300000, 600000, 70000, 400000};
    static const size_t max_bytes[] = {48, 1 << 20};
    static const size_t ranges[] = {0, 100000, 4099};
    static const int threads[] = {1, 2};
    static transcript want;
    relay_matcher *m = make();
    relay_match_scan_opts opts = {0, NOW, 4096, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts want_counts;
    size_t len = 0, i;
    char *text = malloc(2 << 20);

    CHECK(text != NULL);
    for (i = 0; text != NULL && i < sizeof(lengths) / sizeof(*lengths); i++) {
        len += (size_t)sprintf(text + len, "{\"a\":1}\n{\"%s\":\"", i % 2 ? "b" : "p");
        memset(text + len, 'x', lengths[i]);
        len += lengths[i];
        len += (size_t)sprintf(text + len, "\"}%s", i + 1 < sizeof(lengths) / sizeof(*lengths) ? "\n" : "");
    }
    for (i = 0; text != NULL && i < sizeof(max_bytes) / sizeof(*max_bytes); i++) {
        memset(&want, 0, sizeof(want));
        opts.max_bytes = max_bytes[i];
        opts.read_chunk = 4096;
        CHECK(scan_stream(m, text, len, &opts, &want, &want_counts) == 0);
        CHECK(want_counts.total == 8 && want_counts.matched == (i ? 6 : 4));
        check_splits(m, text, len, opts, &want, &want_counts, threads, sizeof(threads) / sizeof(*threads), ranges,
                     sizeof(ranges) / sizeof(*ranges));
    }
    free(text);
    relay_matcher_free(m);
}


/* The first match's callback cuts the file short; the ranges read after it
 * lack bytes: a short read, or through the mapping a SIGBUS (emptied) or
 * zeros (cut within its last page). Every way, the scan fails with the same
 * message after the lines it had seen. One thread: the caller matches a
 * range, replays it, then matches the next. Two: the other thread may only
 * run a window of ranges ahead of the replay, far fewer than the file has. */
static void
test_file_shrinks(void)
{
    static transcript got;
    relay_matcher *m = make();
    relay_match_scan_opts opts = {48, NOW, 64, 1, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_sink sink = {on_match, on_malformed, &got, NULL};
    relay_match_scan_counts counts;
    size_t len, i;
    char *text = make_text(400, &len), err[128];

    for (i = 0; i < NACCESS * 4; i++) {
        FILE *f = tmpfile();

        CHECK(f != NULL);
        if (f == NULL) {
            break;
        }
        CHECK(fwrite(text, 1, len, f) == len && fflush(f) == 0);
        memset(&got, 0, sizeof(got));
        got.caller = pthread_self();
        got.truncate_fd = fileno(f);
        got.truncate_to = i / NACCESS % 2 ? (off_t)len - 5 : 0;
        opts.access = accesses[i % NACCESS];
        opts.threads = i / NACCESS < 2 ? 1 : 2;
        err[0] = '\0';
        CHECK(relay_match_scan_file(m, fileno(f), 0, (off_t)len, &opts, &sink, &counts, err, sizeof(err)) == -1);
        CHECK_STR(err, "the file changed while it was read (it shrank)");
        CHECK(counts.total > 0 && counts.total < 400);
        fclose(f);
    }
    free(text);
    relay_matcher_free(m);
}


/* Text large enough for the probe: 1,000 ordinary lines, then lines longer
 * than max_bytes, which are reported by their length alone (cheap under
 * valgrind). NULL when out of memory; *lines is its number of lines. */
static char *
make_probe_text(size_t *total, long long *lines)
{
    enum { PAD_LINE = 64 << 10 };
    size_t len, pads = (size_t)RELAY_MAP_PROBE_MIN / PAD_LINE + 1, i;
    char *head = make_text(1000, &len), *text = malloc(len + 1 + pads * PAD_LINE);

    if (text != NULL) {
        memcpy(text, head, len);
        text[len] = '\n';
        memset(text + len + 1, 'x', pads * PAD_LINE);
        for (i = 1; i <= pads; i++) {
            text[len + i * PAD_LINE] = '\n';
        }
    }
    free(head);
    *total = len + 1 + pads * PAD_LINE;
    *lines = 1000 + (long long)pads;
    return text;
}


/* A file large enough for the probe: whichever way it picks, the sink hears
 * what it hears from a read scan. */
static void
test_probed_file(void)
{
    static const relay_match_scan_sink count_only = {NULL, NULL, NULL, NULL};
    relay_matcher *m = make();
    relay_match_scan_opts opts = {48, NOW, 0, 2, RELAY_MATCH_ACCESS_READ, NULL};
    relay_match_scan_counts want, got;
    long long lines;
    size_t total;
    char *text = make_probe_text(&total, &lines);

    CHECK(text != NULL);
    if (text != NULL) {
        CHECK(scan_file(m, text, total, &opts, &count_only, &want) == 0);
        opts.access = RELAY_MATCH_ACCESS_AUTO;
        CHECK(scan_file(m, text, total, &opts, &count_only, &got) == 0);
        CHECK(want.total == lines && want.matched > 0);
        CHECK(got.total == want.total && got.matched == want.matched);
    }
    free(text);
    relay_matcher_free(m);
}


/* Scan `f` (total bytes) with `ahead`, which must be taken over when the scan
 * maps: the counts must be `want`'s. */
static void
scan_ahead(relay_matcher *m, FILE *f, size_t total, relay_map_ahead *ahead, int access,
           const relay_match_scan_counts *want)
{
    static const relay_match_scan_sink count_only = {NULL, NULL, NULL, NULL};
    relay_match_scan_opts opts = {48, NOW, 0, 2, access, ahead};
    relay_match_scan_counts got;
    char err[128];

    CHECK(relay_match_scan_file(m, fileno(f), 0, (off_t)total, &opts, &count_only, &got, err, sizeof(err)) == 0);
    CHECK(got.total == want->total && got.matched == want->matched);
    if (access == RELAY_MATCH_ACCESS_MAP) {
        CHECK(relay_map_ahead_take(ahead, fileno(f), (off_t)total) == NULL); /* taken over */
    }
}


/* A mapping made ahead of the scan (include/relay/map_ahead.h): taken over by
 * a mapped scan of that very file at that size only, its helper running or
 * stopped, with a read scan's counts; never taken, or the file cut short
 * while its helper faults it in, it is given back without harm. */
static void
test_mapped_ahead(void)
{
    static const relay_match_scan_sink count_only = {NULL, NULL, NULL, NULL};
    relay_matcher *m = make();
    relay_match_scan_opts opts = {48, NOW, 0, 2, RELAY_MATCH_ACCESS_READ, NULL};
    relay_match_scan_counts want;
    long long lines;
    size_t total;
    char *text = make_probe_text(&total, &lines);
    FILE *f = tmpfile(), *other = tmpfile(), *small = tmpfile();
    relay_map_ahead *ahead;

    CHECK(text != NULL && f != NULL && other != NULL && small != NULL);
    if (text != NULL && f != NULL && other != NULL && small != NULL) {
        CHECK(fwrite(text, 1, total, f) == total && fflush(f) == 0);
        CHECK(fwrite(text, 1, total, other) == total && fflush(other) == 0);
        CHECK(fwrite(text, 1, 4096, small) == 4096 && fflush(small) == 0);
        CHECK(scan_file(m, text, total, &opts, &count_only, &want) == 0 && want.total == lines);
        CHECK(relay_map_ahead_start(fileno(small), 0) == NULL); /* under RELAY_MAP_PROBE_MIN */

        /* Taken at once, the helper still at work. */
        ahead = relay_map_ahead_start(fileno(f), 0);
        CHECK(ahead != NULL);
        scan_ahead(m, f, total, ahead, RELAY_MATCH_ACCESS_MAP, &want);
        relay_map_ahead_free(ahead);
        /* Not by another file, another size or a reading scan (which stops
         * the helper); then by a mapping one. */
        ahead = relay_map_ahead_start(fileno(f), 0);
        CHECK(ahead != NULL);
        CHECK(relay_map_ahead_take(ahead, fileno(other), (off_t)total) == NULL);
        CHECK(relay_map_ahead_take(ahead, fileno(f), (off_t)total - 1) == NULL);
        scan_ahead(m, f, total, ahead, RELAY_MATCH_ACCESS_READ, &want);
        scan_ahead(m, f, total, ahead, RELAY_MATCH_ACCESS_MAP, &want);
        relay_map_ahead_free(ahead);
        /* Probed first: made or not, the scan's counts are the same. */
        scan_ahead(m, f, total, ahead = relay_map_ahead_start(fileno(f), 1), RELAY_MATCH_ACCESS_AUTO, &want);
        relay_map_ahead_free(ahead);
        /* Never taken; and a file cut short under the helper. */
        relay_map_ahead_free(relay_map_ahead_start(fileno(other), 0));
        ahead = relay_map_ahead_start(fileno(other), 0);
        CHECK(ahead != NULL && ftruncate(fileno(other), 4096) == 0);
        relay_map_ahead_free(ahead);
        relay_map_ahead_free(NULL);
    }
    if (f != NULL) {
        fclose(f);
    }
    if (other != NULL) {
        fclose(other);
    }
    if (small != NULL) {
        fclose(small);
    }
    free(text);
    relay_matcher_free(m);
}


int
main(void)
{
    test_first_scans_on_threads();
    test_same_as_streaming();
    test_lines_settled_ahead();
    test_stop();
    test_edges();
    test_regular_file();
    test_sizeless_file();
    test_long_lines();
    test_file_shrinks();
    test_probed_file();
    test_mapped_ahead();
    CHECK_DONE();
}
