/* Unit test of match_scan (include/relay/match_scan.h): line splitting, line
 * numbers, the sink's callbacks, long lines, read errors and pipes. */
#define _GNU_SOURCE /* F_GETPIPE_SZ */
#include "check.h"
#include "relay/match_scan.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define NOW INT64_C(1767225600000)

/* What the sink saw, one "<line>:<ids>" or "<line>!<reason>" per call. */
static char seen[4096];
static size_t seen_len;
static long long stop_at_line;


static int
record_match(void *ctx, long long line, const uint32_t *ids, size_t nids)
{
    size_t i;

    (void)ctx;
    seen_len += (size_t)snprintf(seen + seen_len, sizeof(seen) - seen_len, "%lld:", line);
    for (i = 0; i < nids && i < 3; i++) {
        seen_len += (size_t)snprintf(seen + seen_len, sizeof(seen) - seen_len, "%s%u", i ? "," : "", ids[i]);
    }
    if (nids > 3) {
        seen_len += (size_t)snprintf(seen + seen_len, sizeof(seen) - seen_len, "..%u(%zu)", ids[nids - 1], nids);
    }
    seen_len += (size_t)snprintf(seen + seen_len, sizeof(seen) - seen_len, " ");
    return line == stop_at_line;
}


static int
record_malformed(void *ctx, long long line, const char *reason)
{
    (void)ctx;
    seen_len += (size_t)snprintf(seen + seen_len, sizeof(seen) - seen_len, "%lld!%s ", line, reason);
    return 0;
}


static const relay_match_scan_sink recorder = {record_match, record_malformed, NULL, NULL};


static relay_matcher *
make(const char *const *rules, size_t n)
{
    relay_matcher *m = relay_matcher_new();
    char err[200];
    size_t i;

    CHECK(m != NULL);
    for (i = 0; i < n; i++) {
        CHECK(relay_matcher_add(m, rules[i], strlen(rules[i]), err, sizeof(err)) == (int)i);
    }
    return m;
}


/* Scan text through the recorder; returns relay_match_scan's result. */
static int
scan_text(relay_matcher *m, const char *text, const relay_match_scan_opts *opts, const relay_match_scan_sink *sink,
          relay_match_scan_counts *counts)
{
    FILE *in = fmemopen((void *)text, strlen(text), "r");
    char err[128];
    int rc;

    seen[0] = '\0';
    seen_len = 0;
    CHECK(in != NULL);
    if (in == NULL) {
        return -1;
    }
    rc = relay_match_scan(m, in, opts, sink, counts, err, sizeof(err));
    fclose(in);
    return rc;
}


static void
test_lines(void)
{
    static const char *const rules[] = {"{\"a\":[{\"eq\":1}]}", "{\"b\":[{\"exists\":true}]}"};
    relay_matcher *m = make(rules, 2);
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts;

    CHECK(scan_text(m, "{\"a\":1}\n{\"c\":1}\n\n{\"a\":1,\"b\":0}\n{\"a\":\n{\"b\":2}", &opts, &recorder, &counts)
          == 0);
    CHECK_STR(seen, "1:0 3!empty event 4:0,1 5!invalid JSON at byte 5: expected a value 6:1 ");
    CHECK(counts.matched == 3 && counts.total == 6);

    /* A final newline ends the last line; it starts no empty one. */
    CHECK(scan_text(m, "{\"b\":1}\n", &opts, &recorder, &counts) == 0);
    CHECK_STR(seen, "1:1 ");
    CHECK(counts.matched == 1 && counts.total == 1);
    CHECK(scan_text(m, "", &opts, &recorder, &counts) == 0);
    CHECK(counts.matched == 0 && counts.total == 0);
    relay_matcher_free(m);
}


/* More matching rules than the first ids buffer holds. */
static void
test_many_ids(void)
{
    const char *rules[70];
    relay_matcher *m;
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts;
    size_t i;

    for (i = 0; i < 70; i++) {
        rules[i] = i % 2 ? "{\"a\":[{\"gt\":0}]}" : "{\"a\":[{\"eq\":5}]}";
    }
    m = make(rules, 70);
    CHECK(scan_text(m, "{\"a\":5}\n{\"a\":1}\n", &opts, &recorder, &counts) == 0);
    CHECK_STR(seen, "1:0,1,2..69(70) 2:1,3,5..69(35) ");
    CHECK(counts.matched == 2 && counts.total == 2);
    relay_matcher_free(m);
}


/* Lines longer than the buffer are skipped and reported; the next ones count. */
static void
test_long_lines(void)
{
    static const char *const rules[] = {"{\"a\":[{\"eq\":1}]}"};
    relay_matcher *m = make(rules, 1);
    relay_match_scan_opts opts = {16, NOW, 32, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts;
    char text[512];

    snprintf(text, sizeof(text),
             "{\"a\":1}\n{\"a\":1,\"pad\":\"%0100d\"}\n{\"a\":1, \"b\":\"1234567\"}\n{\"a\":1}\n"
             "{\"pad\":\"%0200d\"}",
             0, 0);
    CHECK(scan_text(m, text, &opts, &recorder, &counts) == 0);
    CHECK_STR(seen, "1:0 2!event too large (116 bytes > 16) 3!event too large (22 bytes > 16) 4:0 "
                    "5!event too large (210 bytes > 16) ");
    CHECK(counts.matched == 2 && counts.total == 5);
    relay_matcher_free(m);
}


static void
test_sinks(void)
{
    static const char *const rules[] = {"{\"a\":[{\"eq\":1}]}"};
    static const relay_match_scan_sink count_only = {NULL, NULL, NULL, NULL};
    relay_matcher *m = make(rules, 1);
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts;

    CHECK(scan_text(m, "{\"a\":1}\nx\n{\"a\":1}\n", &opts, &count_only, &counts) == 0);
    CHECK_STR(seen, "");
    CHECK(counts.matched == 2 && counts.total == 3);

    /* A callback returning nonzero stops the scan after that line. */
    stop_at_line = 2;
    CHECK(scan_text(m, "{\"a\":1}\n{\"a\":1}\n{\"a\":1}\n", &opts, &recorder, &counts) == RELAY_MATCH_SCAN_STOPPED);
    CHECK_STR(seen, "1:0 2:0 ");
    CHECK(counts.matched == 2 && counts.total == 2);
    stop_at_line = 0;
    relay_matcher_free(m);
}


static void
test_read_error(void)
{
    relay_matcher *m = make(NULL, 0);
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts;
    FILE *dir = fopen("/", "r");
    char err[128];

    CHECK(dir != NULL);
    if (dir != NULL) {
        CHECK(relay_match_scan(m, dir, &opts, &recorder, &counts, err, sizeof(err)) == -1);
        CHECK_STR(err, "read error: Is a directory");
        fclose(dir);
    }
    relay_matcher_free(m);
}


/* A pipe already holding text, read through a FILE; the write end is left
 * open in *writer (the input then waits for more) or, with writer NULL,
 * closed (the input ends after text). The recorder is cleared. */
static FILE *
pipe_holding(const char *text, int *writer)
{
    FILE *in = NULL;
    int fds[2];

    seen[0] = '\0';
    seen_len = 0;
    CHECK(pipe(fds) == 0);
    CHECK(write(fds[1], text, strlen(text)) == (ssize_t)strlen(text));
    if (writer != NULL) {
        *writer = fds[1];
    } else {
        close(fds[1]);
    }
    CHECK((in = fdopen(fds[0], "r")) != NULL);
    return in;
}


/* A pipe's writer and the scan's sink: the writer waits (with a bound) for
 * each line it wrote to be reported before it writes the next. */
typedef struct pipe_talk {
    pthread_mutex_t lock;
    pthread_cond_t reported;
    int fd;
    long long last_reported;
    long long waits; /* the scan said it waits for more input */
    int waited_out;  /* a line was not reported within the bound */
} pipe_talk;


static int
talk_match(void *ctx, long long line, const uint32_t *ids, size_t nids)
{
    pipe_talk *t = ctx;

    (void)ids;
    (void)nids;
    pthread_mutex_lock(&t->lock);
    t->last_reported = line;
    pthread_cond_broadcast(&t->reported);
    pthread_mutex_unlock(&t->lock);
    return 0;
}


static int
talk_wait(void *ctx)
{
    pipe_talk *t = ctx;

    pthread_mutex_lock(&t->lock);
    t->waits++;
    pthread_cond_broadcast(&t->reported);
    pthread_mutex_unlock(&t->lock);
    return 0;
}


static void *
talk_write(void *arg)
{
    static const char line[] = "{\"a\":1}\n";
    pipe_talk *t = arg;
    struct timespec until;
    long long i;

    for (i = 1; i <= 3; i++) {
        if (write(t->fd, line, sizeof(line) - 1) != (ssize_t)(sizeof(line) - 1)) {
            break;
        }
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 20;
        pthread_mutex_lock(&t->lock);
        while ((t->last_reported < i || t->waits < i) && !t->waited_out) {
            t->waited_out = pthread_cond_timedwait(&t->reported, &t->lock, &until) == ETIMEDOUT;
        }
        pthread_mutex_unlock(&t->lock);
    }
    close(t->fd);
    return NULL;
}


/* A pipe is matched as its lines arrive: each line is reported while the
 * writer still holds the pipe open (reading a whole buffer first would wait
 * for megabytes that never come, until the writer gave up), and the sink
 * hears when the scan waits for more (the writer writes the next line only
 * then). Its size is raised so that a fast writer can run ahead. */
static void
test_pipe(void)
{
    static const char *const rules[] = {"{\"a\":[{\"eq\":1}]}"};
    relay_matcher *m = make(rules, 1);
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    pipe_talk t = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, 0, 0, 0};
    relay_match_scan_sink sink = {talk_match, record_malformed, &t, talk_wait};
    relay_match_scan_counts counts;
    pthread_t writer;
    char err[128];
    long max_size = 0;
    FILE *in = pipe_holding("", &t.fd), *max = fopen("/proc/sys/fs/pipe-max-size", "r");

    CHECK(pthread_create(&writer, NULL, talk_write, &t) == 0);
    CHECK(relay_match_scan(m, in, &opts, &sink, &counts, err, sizeof(err)) == 0);
    pthread_join(writer, NULL);
    CHECK(!t.waited_out);
    CHECK(t.last_reported == 3 && counts.matched == 3 && counts.total == 3 && t.waits >= 3);
    /* Unprivileged, the raise may be refused (pipe-max-size, or the user's pipes over
     * pipe-user-pages-soft); as root it is not. */
    if (geteuid() == 0 || (max != NULL && fscanf(max, "%ld", &max_size) == 1 && max_size >= 1 << 20)) {
        CHECK(fcntl(fileno(in), F_GETPIPE_SZ) >= (geteuid() == 0 ? 1 << 20 : 4096));
    }
    if (max != NULL) {
        fclose(max);
    }
    fclose(in);
    relay_matcher_free(m);
}


static int
stop_waiting(void *ctx)
{
    (void)ctx;
    return 1;
}


/* on_wait stops the scan: what was read of a line not yet ended is not
 * reported as a line of its own. */
static void
test_pipe_stop(void)
{
    static const char *const rules[] = {"{\"a\":[{\"eq\":1}]}"};
    relay_matcher *m = make(rules, 1);
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_sink sink = {record_match, record_malformed, NULL, stop_waiting};
    relay_match_scan_counts counts;
    char err[128];
    int writer = -1;
    FILE *in = pipe_holding("{\"a\":1}\n{\"a\":", &writer);

    CHECK(relay_match_scan(m, in, &opts, &sink, &counts, err, sizeof(err)) == RELAY_MATCH_SCAN_STOPPED);
    CHECK_STR(seen, "1:0 ");
    CHECK(counts.matched == 1 && counts.total == 1);
    close(writer);
    fclose(in);
    relay_matcher_free(m);
}


/* Bytes the stream holds before the scan (an ungetc backup, the rest of its
 * buffer set aside) are read before the pipe itself. */
static void
test_pipe_held(void)
{
    static const char *const rules[] = {"{\"a\":[{\"eq\":1}]}"};
    relay_matcher *m = make(rules, 1);
    relay_match_scan_opts opts = {1 << 20, NOW, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_counts counts;
    char err[128];
    FILE *in = pipe_holding("{\"a\":1}\n{\"a\":1}\n", NULL);
    int c = getc(in);

    CHECK(ungetc(c, in) == c && ungetc('\n', in) == '\n');
    CHECK(relay_match_scan(m, in, &opts, &recorder, &counts, err, sizeof(err)) == 0);
    CHECK_STR(seen, "1!empty event 2:0 3:0 ");
    CHECK(counts.matched == 2 && counts.total == 3);
    fclose(in);
    relay_matcher_free(m);
}


int
main(void)
{
    /* The pipe tests read with the writer in this process or one of its
     * threads: a scan that waited for more than arrives would hang them. */
    alarm(300);
    test_lines();
    test_many_ids();
    test_long_lines();
    test_sinks();
    test_read_error();
    test_pipe();
    test_pipe_stop();
    test_pipe_held();
    CHECK_DONE();
}
