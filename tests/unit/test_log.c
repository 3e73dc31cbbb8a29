/* The asynchronous log sink with a stderr that nobody reads for a while:
 * writing never blocks the caller, a record that does not fit is dropped
 * whole and counted, handler output leaves room for Relay's own records,
 * a flush is bounded, and once a reader comes every line is whole and the
 * "log records dropped" records account for every drop. */
#include "relay/log.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define RING_BYTES (64 * 1024)
#define FLOOD 5000

static int pipe_read_end;
static char *got;
static size_t got_len;


static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


/* Reads the pipe to its end into got. */
static void *
reader_main(void *arg)
{
    size_t cap = 16 * 1024 * 1024;
    ssize_t n;

    (void)arg;
    got = malloc(cap);
    while (got != NULL && got_len < cap - 1 && (n = read(pipe_read_end, got + got_len, cap - 1 - got_len)) > 0) {
        got_len += (size_t)n;
    }
    if (got != NULL) {
        got[got_len] = '\0';
    }
    return NULL;
}


static unsigned long long
dropped_now(void)
{
    unsigned long long records, bytes;

    relay_log_dropped(&records, &bytes);
    return records;
}


static size_t
count(const char *needle)
{
    size_t n = 0;

    /* got is NUL-terminated, and text records hold no NUL (the sink escapes it). */
    for (const char *p = got; p != NULL && (p = strstr(p, needle)) != NULL; p++) {
        n++;
    }
    return n;
}


/* The sum of the dropped=N of every "log records dropped" record. */
static unsigned long long
dropped_reported(void)
{
    unsigned long long sum = 0;

    for (const char *p = got; (p = strstr(p, "log records dropped")) != NULL; p++) {
        const char *n = strstr(p, " dropped=");
        sum += n != NULL ? strtoull(n + 9, NULL, 10) : 0;
    }
    return sum;
}


/* Every line ends with a newline and starts with a timestamp. */
static int
lines_whole(void)
{
    size_t start = 0;

    if (got_len == 0 || got[got_len - 1] != '\n') {
        return 0;
    }
    for (size_t i = 0; i < got_len; i++) {
        if (got[i] == '\n') {
            if (i - start < 25 || memcmp(got + start, "20", 2) != 0 || got[start + 23] != 'Z') {
                return 0;
            }
            start = i + 1;
        }
    }
    return 1;
}


int
main(void)
{
    int fds[2], saved_stderr = dup(STDERR_FILENO);
    unsigned long long dropped;
    pthread_t reader;
    double t0;

    CHECK(pipe(fds) == 0);
    pipe_read_end = fds[0];
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    relay_log_configure(RELAY_LOG_INFO, 0);
    CHECK(relay_log_start_async(RING_BYTES) == 0);

    /* Nobody reads: the pipe fills, then the ring, and writing goes on. */
    t0 = now_s();
    for (int i = 0; i < FLOOD; i++) {
        relay_log_write_output(RELAY_LOG_INFO, "out ........................................................", 58, NULL,
                               0);
    }
    CHECK(now_s() - t0 < 2.0);
    dropped = dropped_now();
    CHECK(dropped > 0);

    /* Output filled only its share: Relay's own record still fits. */
    relay_log_info("relay's own record");
    CHECK(dropped_now() == dropped);
    for (int i = 0; i < FLOOD; i++) {
        relay_log_info("mine %05d ......................................................", i);
    }
    CHECK(dropped_now() > dropped);

    /* A flush without a reader gives up at its deadline. */
    t0 = now_s();
    relay_log_flush(0.3);
    CHECK(now_s() - t0 < 1.5);

    /* A reader comes: everything queued is written, lines whole, and the
     * drop records count what was dropped. */
    CHECK(pthread_create(&reader, NULL, reader_main, NULL) == 0);
    relay_log_flush(10.0);
    dup2(saved_stderr, STDERR_FILENO); /* the pipe's last write end: the reader sees its end */
    pthread_join(reader, NULL);
    CHECK(lines_whole());
    CHECK(count("relay's own record") == 1);
    CHECK(count("log records dropped") >= 1);
    CHECK(dropped_reported() == dropped_now());
    CHECK(count(" out ") + count(" mine ") + dropped_now() == 2 * FLOOD);
    free(got);
    CHECK_DONE();
}
