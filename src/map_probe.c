/* map_probe: mapped or read, by timing both (include/relay/map_probe.h). */
#include "relay/map_probe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Two pieces each way, alternating; the faster of each pair counts, so one
 * piece slowed by preemption or an interrupt does not decide. */
#define PIECE ((size_t)512 << 10)
#define READ_BUF ((size_t)256 << 10)
#define ROUNDS 2


static double
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}


/* What either way does with the bytes: find every newline. */
static size_t
count_lines(const char *p, size_t len)
{
    const char *end = p + len, *nl;
    size_t n = 0;

    while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        n++;
        p = nl + 1;
    }
    return n;
}


/* Nanoseconds to read [off, off + PIECE) through buf; -1 when a read fails. */
static double
time_read(int fd, char *buf, off_t off, size_t *lines)
{
    double t0 = now_ns();
    size_t done = 0;
    ssize_t n;

    while (done < PIECE) {
        do {
            n = pread(fd, buf, READ_BUF, off + (off_t)done);
        } while (n < 0 && errno == EINTR);
        if (n <= 0) {
            return -1;
        }
        *lines += count_lines(buf, (size_t)n);
        done += (size_t)n;
    }
    return now_ns() - t0;
}


int
relay_map_probe(int fd, const char *map, off_t size)
{
    double mapped = -1, read = -1, t;
    size_t lines = 0;
    char *buf;
    int i;

    if (size < RELAY_MAP_PROBE_MIN || (buf = malloc(READ_BUF)) == NULL) {
        return 0;
    }
    memset(buf, 0, READ_BUF); /* a reader's buffer is warm after its first piece */
    for (i = 0; i < ROUNDS; i++) {
        off_t off = (off_t)(2 * (size_t)i) * (off_t)PIECE;

        t = now_ns();
        lines += count_lines(map + off, PIECE);
        t = now_ns() - t;
        mapped = mapped < 0 || t < mapped ? t : mapped;
        if ((t = time_read(fd, buf, off + (off_t)PIECE, &lines)) < 0) {
            free(buf);
            return 0;
        }
        read = read < 0 || t < read ? t : read;
    }
    free(buf);
    /* `lines` keeps the counting from being optimised away. */
    return lines != (size_t)-1 && mapped <= read * 1.5;
}
