/* heap_reserve: a pre-populated C heap for bulk commands (include/relay/heap_reserve.h). */
#define _GNU_SOURCE
#include "relay/heap_reserve.h"

#include <limits.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* malloc refuses an mmap threshold above 32 MiB on 64-bit hosts, and the
 * block must stay below the threshold to come from the heap. */
#define MAX_RESERVE (((size_t)32 << 20) - ((size_t)64 << 10))


size_t
relay_heap_reserve(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len;
    uintptr_t lo, hi;
    char *block;

    if (bytes > MAX_RESERVE) {
        bytes = MAX_RESERVE;
    }
    if (bytes < 2 * page) {
        return 0;
    }
    /* The block must come from the heap's top, so that freeing it leaves the
     * populated pages there for every later allocation. */
    if (mallopt(M_MMAP_THRESHOLD, (int)(bytes + page)) == 0 || mallopt(M_TRIM_THRESHOLD, INT_MAX) == 0) {
        return 0;
    }
    if ((block = malloc(bytes)) == NULL) {
        return 0;
    }
    lo = ((uintptr_t)block + page - 1) & ~(uintptr_t)(page - 1);
    hi = ((uintptr_t)block + bytes) & ~(uintptr_t)(page - 1);
    if (hi > lo) {
        /* Huge pages where the host allows: 512 times fewer page-table
         * entries to set, which is most of the cost on a paravirtualised
         * host (a 10,000-rule load: 90 -> 81 ms). Refused is fine. */
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
    len = hi > lo && madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0 ? hi - lo : 0;
    free(block);
    return len;
}
