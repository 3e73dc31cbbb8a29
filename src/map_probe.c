/* map_probe: mapped or read, by timing both (include/relay/map_probe.h). */
#include "relay/map_probe.h"
#include "relay/map_guard.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Two pieces each way, alternating; the faster of each pair counts, so one
 * piece slowed by preemption or an interrupt does not decide. */
#define PIECE ((size_t)512 << 10)
#define ROUNDS 2
#define SAMPLED (2 * ROUNDS * PIECE)


static double
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}


/* Nanoseconds to read [off, off + PIECE) through buf; -1 when a read fails.
 * *sum takes a byte of each read, so that nothing is optimised away. */
static double
time_read(int fd, char *buf, off_t off, unsigned long *sum)
{
    double t0 = now_ns();
    size_t done = 0;
    ssize_t n;

    while (done < PIECE) {
        do {
            n = pread(fd, buf, RELAY_MAP_PROBE_BUF, off + (off_t)done);
        } while (n < 0 && errno == EINTR);
        if (n <= 0) {
            return -1;
        }
        *sum += (unsigned char)buf[n - 1];
        done += (size_t)n;
    }
    return now_ns() - t0;
}


/* Nanoseconds to fault in PIECE bytes of the mapping at `at` as a scan's
 * first touches do, and to drop those page-table entries again, which is what
 * unmapping them costs at the end of a scan (serially, on one thread); -1
 * when they cannot be dropped. */
static double
time_mapped(const char *at, size_t page, unsigned long *sum)
{
    double t0 = now_ns();
    size_t i;

    for (i = 0; i < PIECE; i += page) {
        *sum += (unsigned char)((const volatile char *)at)[i];
    }
    /* A file's pages: they refault if the scan needs them. Refused (a locked
     * mapping, say), the timing would leave out the unmapping: then -1. */
    if (madvise((void *)(uintptr_t)at, PIECE, MADV_DONTNEED) != 0) {
        return -1;
    }
    return now_ns() - t0;
}


/* Whether every page of the sampled bytes is in the page cache. */
static int
sample_cached(const char *map)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = SAMPLED / page, i;
    unsigned char *in = malloc(pages);
    int all = in != NULL && mincore((void *)(uintptr_t)map, SAMPLED, in) == 0;

    for (i = 0; all && i < pages; i++) {
        all = in[i] & 1;
    }
    free(in);
    return all;
}


int
relay_map_probe(int fd, const char *map, off_t from, off_t size, char *buf)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    double mapped = -1, read = -1, t;
    unsigned long sum = 0;
    int i;

    if (size - from < RELAY_MAP_PROBE_MIN || !sample_cached(map + from)) {
        return 0;
    }
    memset(buf, 0, RELAY_MAP_PROBE_BUF); /* a reader's buffer is warm after its first piece */
    for (i = 0; i < ROUNDS; i++) {
        off_t off = from + (off_t)(2 * (size_t)i) * (off_t)PIECE;

        if ((t = time_mapped(map + off, page, &sum)) < 0) {
            return 0;
        }
        mapped = mapped < 0 || t < mapped ? t : mapped;
        if ((t = time_read(fd, buf, off + (off_t)PIECE, &sum)) < 0) {
            return 0;
        }
        read = read < 0 || t < read ? t : read;
    }
    /* `sum` keeps the reads from being optimised away. */
    return sum != (unsigned long)-1 && mapped <= read;
}


typedef struct probe_call {
    int fd;
    const char *map;
    off_t from, size;
    char *buf;
} probe_call;


static int
call_probe(void *arg)
{
    const probe_call *c = arg;

    return relay_map_probe(c->fd, c->map, c->from, c->size, c->buf);
}


int
relay_map_probe_guarded(int fd, const char *map, off_t from, off_t size)
{
    /* The buffer comes from outside the guard, which a fault would leak. */
    probe_call c = {fd, map, from, size, malloc(RELAY_MAP_PROBE_BUF)};
    int faulted; /* then the result is -1: not mapped */
    int pays = c.buf != NULL && relay_map_guard_run(map, (size_t)size, call_probe, &c, &faulted) > 0;

    free(c.buf);
    return pays;
}
