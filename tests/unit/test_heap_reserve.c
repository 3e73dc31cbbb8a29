/* Heap reserve: a populated heap takes later allocations without page
 * faults; tiny requests change nothing; a replaced allocator (a sanitizer's,
 * valgrind's) is left alone. */
#include "relay/heap_reserve.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"

#define MIB ((size_t)1 << 20)
#define BLOCK ((size_t)64 << 10)

#if defined(__SANITIZE_ADDRESS__)
static const int sanitized = 1;
#else
static const int sanitized = 0;
#endif


static long
minor_faults(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}


/* Allocates 16 MiB in 64 KiB blocks, all held at once so nothing is reused,
 * and writes every page of them; returns the page faults that took. */
static long
faults_to_fill_16_mib(void)
{
    enum { BLOCKS = (16 << 20) / (64 << 10) };
    size_t page = (size_t)sysconf(_SC_PAGESIZE), i, j;
    char *blocks[BLOCKS];
    long before = minor_faults(), faults;
    int all_allocated = 1;

    for (i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        all_allocated &= blocks[i] != NULL;
        for (j = 0; blocks[i] != NULL && j < BLOCK; j += page) {
            ((volatile char *)blocks[i])[j] = 1;
        }
    }
    faults = minor_faults() - before;
    for (i = 0; i < BLOCKS; i++) {
        free(blocks[i]);
    }
    CHECK(all_allocated);
    return faults;
}


static void
test_tiny_request_is_declined(void)
{
    CHECK(relay_heap_reserve(0) == 0);
    CHECK(relay_heap_reserve(100) == 0);
}


static void
test_reserved_heap_takes_allocations_without_faults(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = 16 * MIB / page, got = relay_heap_reserve(24 * MIB);
    long faults = faults_to_fill_16_mib();

    if (sanitized) {
        CHECK(got == 0); /* the sanitizer's malloc has no thresholds to set */
    } else if (getenv("RELAY_UNDER_VALGRIND") == NULL) {
        /* untouched, the 4,096 pages would be 4,096 faults */
        fprintf(stderr, "16 MiB filled after a 24 MiB reserve: %ld page faults for %zu pages\n", faults, pages);
        CHECK(got >= 23 * MIB);
        CHECK(faults < (long)(pages / 20));
    }
}


static void
test_request_above_the_cap_is_trimmed(void)
{
    size_t got = relay_heap_reserve((size_t)4 << 30);

    CHECK(got <= 32 * MIB);
    CHECK(sanitized || got > 0);
}


int
main(void)
{
    test_tiny_request_is_declined();
    test_reserved_heap_takes_allocations_without_faults();
    test_request_above_the_cap_is_trimmed();
    CHECK_DONE();
}
