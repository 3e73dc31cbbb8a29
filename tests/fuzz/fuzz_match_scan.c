/* libFuzzer target for match_scan. Input: one rule in normal form on the first
 * line, then the events, one per line. The read buffer is tiny (128 bytes, events
 * up to 64), so long lines and lines across reads are common. Every line must be
 * reported exactly once, in order, as matched, unmatched or malformed; ids come
 * ascending; the counts agree with what the sink saw. The same events in a
 * regular file (a memfd) matched on two threads in ranges of 16 bytes
 * (relay_match_scan_file), read or mapped as the input's length is even or
 * odd, must give the sink exactly the same calls. So must the events mapped
 * across a page boundary, after bytes the scan skips: a mapped file's lines
 * before its last page are settled ahead, while scanned (line_reader), and
 * the one crossing into that page is not, which the events alone, shorter
 * than a page, never reach. */
#define _GNU_SOURCE /* memfd_create */
#include "relay/match_scan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
    long long last_line; /* highest line reported so far */
    long long matched;
    long long malformed;
    uint64_t digest; /* FNV-1a over every call and its arguments */
} seen;


static void
digest(seen *s, const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    size_t i;

    for (i = 0; i < len; i++) {
        s->digest = (s->digest ^ p[i]) * UINT64_C(0x100000001b3);
    }
}


static int
on_match(void *ctx, long long line, const uint32_t *ids, size_t nids)
{
    seen *s = ctx;
    size_t i;

    if (line <= s->last_line || nids == 0) {
        abort();
    }
    for (i = 1; i < nids; i++) {
        if (ids[i - 1] >= ids[i]) {
            abort();
        }
    }
    s->last_line = line;
    s->matched++;
    digest(s, &line, sizeof(line));
    digest(s, ids, nids * sizeof(*ids));
    return 0;
}


static int
on_malformed(void *ctx, long long line, const char *reason)
{
    seen *s = ctx;

    if (line <= s->last_line || reason[0] == '\0') {
        abort();
    }
    s->last_line = line;
    s->malformed++;
    digest(s, &line, sizeof(line));
    digest(s, reason, strlen(reason));
    return 0;
}


/* The events at byte `at` of the one regular file this process keeps for
 * them, after `at` bytes that are no JSON at all. */
static int
events_file(const char *events, size_t len, size_t at)
{
    static int fd = -1;
    static const char junk[4096] = {'x'};
    size_t done, n;

    if (fd < 0 && (fd = memfd_create("fuzz_match_scan", 0)) < 0) {
        abort();
    }
    if (ftruncate(fd, 0) < 0) {
        abort();
    }
    for (done = 0; done < at; done += n) {
        n = at - done < sizeof(junk) ? at - done : sizeof(junk);
        if (pwrite(fd, junk, n, (off_t)done) != (ssize_t)n) {
            abort();
        }
    }
    if (pwrite(fd, events, len, (off_t)at) != (ssize_t)len) {
        abort();
    }
    return fd;
}


/* Lines in the events: newlines, plus one for a last line without its own. */
static long long
count_lines(const char *p, size_t len)
{
    long long n = 0;
    size_t i;

    for (i = 0; i < len; i++) {
        n += p[i] == '\n';
    }
    return n + (len > 0 && p[len - 1] != '\n');
}


/* Whether a scan (got, got_counts) reported exactly what the stream's did. */
static int
same_report(const seen *got, const relay_match_scan_counts *got_counts, const seen *want,
            const relay_match_scan_counts *want_counts)
{
    return got_counts->total == want_counts->total && got_counts->matched == want_counts->matched
           && got->digest == want->digest && got->malformed == want->malformed;
}


/* The events mapped from just before a page boundary to past it, scanned
 * on two threads: the sink must hear what the stream's (want) heard. */
static void
check_across_page(relay_matcher *m, const char *events, size_t len, const seen *want,
                  const relay_match_scan_counts *want_counts)
{
    relay_match_scan_opts mapped = {64, INT64_C(1767225600000), 16, 2, RELAY_MATCH_ACCESS_MAP, NULL};
    size_t page = (size_t)sysconf(_SC_PAGESIZE), at = len / 2 < page ? page - len / 2 : 1;
    seen t = {0, 0, 0, 0};
    relay_match_scan_sink sink = {on_match, on_malformed, &t, NULL};
    relay_match_scan_counts counts;
    char err[256];

    if (relay_match_scan_file(m, events_file(events, len, at), (off_t)at, (off_t)(at + len), &mapped, &sink, &counts,
                              err, sizeof(err))
            != 0
        || !same_report(&t, &counts, want, want_counts)) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *nl = memchr(p, '\n', size);
    relay_match_scan_opts opts = {64, INT64_C(1767225600000), 128, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_opts split = {
        64, INT64_C(1767225600000), 16, 2, size % 2 ? RELAY_MATCH_ACCESS_MAP : RELAY_MATCH_ACCESS_READ, NULL};
    seen s = {0, 0, 0, 0}, t = {0, 0, 0, 0};
    relay_match_scan_sink sink = {on_match, on_malformed, &s, NULL}, split_sink = {on_match, on_malformed, &t, NULL};
    relay_match_scan_counts counts, split_counts;
    relay_matcher *m;
    size_t rule_len = nl != NULL ? (size_t)(nl - p) : size;
    size_t events_len = nl != NULL ? size - rule_len - 1 : 0;
    char err[256];
    FILE *in;

    if (events_len == 0 || (m = relay_matcher_new()) == NULL) {
        return 0;
    }
    relay_matcher_add(m, p, rule_len, err, sizeof(err));
    in = fmemopen((void *)(nl + 1), events_len, "r");
    if (in != NULL) {
        if (relay_match_scan(m, in, &opts, &sink, &counts, err, sizeof(err)) != 0) {
            abort();
        }
        if (counts.total != count_lines(nl + 1, events_len) || counts.matched != s.matched
            || s.matched + s.malformed > counts.total) {
            abort();
        }
        fclose(in);
        if (relay_match_scan_file(m, events_file(nl + 1, events_len, 0), 0, (off_t)events_len, &split, &split_sink,
                                  &split_counts, err, sizeof(err))
                != 0
            || !same_report(&t, &split_counts, &s, &counts)) {
            abort();
        }
        check_across_page(m, nl + 1, events_len, &s, &counts);
    }
    relay_matcher_free(m);
    return 0;
}
