/*
 * Heap set-up for a short-lived command that builds a large structure at once
 * (`relay match` loading thousands of rules): the C heap grows in one step,
 * already backed by memory, and is never handed back to the kernel.
 *
 * Why: each first touch of a fresh page is a page fault, and on a
 * paravirtualised host a fault costs several microseconds; a load of 10,000
 * rules touches ~4,000 heap pages one fault at a time. Populating the pages in
 * one madvise call does the same zeroing without the per-page trap. A
 * long-running daemon must not call this: it turns off the trimming that
 * returns freed memory.
 */
#ifndef RELAY_HEAP_RESERVE_H
#define RELAY_HEAP_RESERVE_H

#include <stddef.h>

/* Raises malloc's thresholds (no mmap'd blocks below `bytes`, no trimming)
 * and populates `bytes` of the heap's free top. Best effort: returns the
 * bytes populated, 0 when the host or the allocator cannot (an older kernel,
 * a sanitizer's allocator); the heap then simply grows as usual. */
size_t relay_heap_reserve(size_t bytes);

#endif
