/* map_ahead: a file faulted in while the caller works (include/relay/map_ahead.h). */
#include "relay/map_ahead.h"
#include "relay/map_guard.h"
#include "relay/map_probe.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct relay_map_ahead {
    char *map; /* NULL once taken */
    size_t size;
    dev_t dev;
    ino_t ino;
    pthread_t helper;
    atomic_int stop;
};


/* A read of one byte per page, as the scan's first touches would: each
 * fault maps the pages around it that are in the page cache. Touching
 * rather than MADV_POPULATE_READ, which holds the mmap lock for the whole
 * range and so stalled the loading thread's own heap growth. */
static int
touch_pages(void *arg)
{
    const relay_map_ahead *a = arg;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), at;
    volatile unsigned char sink = 0;

    /* The flag is looked at before each page: a page not in the page cache
     * is a read from disk, and a stop should not wait on many of those. */
    for (at = 0; at < a->size && !atomic_load_explicit(&a->stop, memory_order_relaxed); at += page) {
        sink ^= (unsigned char)a->map[at];
    }
    (void)sink;
    return 0;
}


static void *
fault_in(void *arg)
{
    relay_map_ahead *a = arg;
    int faulted; /* a file cut short under the mapping: stop there */

    relay_map_guard_run(a->map, a->size, touch_pages, a, &faulted);
    return NULL;
}


relay_map_ahead *
relay_map_ahead_start(int fd, int probe)
{
    struct stat sb;
    relay_map_ahead *a;
    void *map;

    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < RELAY_MAP_PROBE_MIN
        || (uintmax_t)sb.st_size > SIZE_MAX || (a = calloc(1, sizeof(*a))) == NULL) {
        return NULL;
    }
    if ((map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        free(a);
        return NULL;
    }
    a->map = map;
    a->size = (size_t)sb.st_size;
    a->dev = sb.st_dev;
    a->ino = sb.st_ino;
    atomic_init(&a->stop, 0);
    if (relay_map_guard_hold() != 0) {
        munmap(map, a->size);
        free(a);
        return NULL;
    }
    /* Probed now, before the helper touches it (its faulting would sway the
     * probe): where reading pays, or the file is not in the page cache, the
     * scan reads, and nothing is done ahead. */
    if ((probe && !relay_map_probe_guarded(fd, map, 0, sb.st_size))
        || pthread_create(&a->helper, NULL, fault_in, a) != 0) {
        relay_map_guard_release();
        munmap(map, a->size);
        free(a);
        return NULL;
    }
    return a;
}


static void
stop_helper(relay_map_ahead *a)
{
    if (!atomic_exchange(&a->stop, 1)) {
        pthread_join(a->helper, NULL);
        relay_map_guard_release();
    }
}


void *
relay_map_ahead_take(relay_map_ahead *a, int fd, off_t size)
{
    struct stat sb;
    void *map;

    if (a == NULL || a->map == NULL || fstat(fd, &sb) != 0 || sb.st_dev != a->dev || sb.st_ino != a->ino || size < 0
        || (uintmax_t)size != a->size) {
        return NULL;
    }
    stop_helper(a);
    map = a->map;
    a->map = NULL;
    return map;
}


void
relay_map_ahead_stop(relay_map_ahead *a)
{
    if (a != NULL) {
        stop_helper(a);
    }
}


void
relay_map_ahead_free(relay_map_ahead *a)
{
    if (a == NULL) {
        return;
    }
    stop_helper(a);
    if (a->map != NULL) {
        munmap(a->map, a->size);
    }
    free(a);
}
