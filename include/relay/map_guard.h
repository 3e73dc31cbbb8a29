/*
 * map_guard: reading a mapped file that may shrink under us.
 *
 * A page of a MAP_SHARED or MAP_PRIVATE file mapping that lies past the
 * file's end once another process truncated it raises SIGBUS when touched,
 * which would kill the process; so does a mapped page the kernel cannot read
 * in (an I/O error). A reader runs its reads of such a mapping through
 * relay_map_guard_run; a SIGBUS the kernel raises for an address inside the
 * mapped range then ends the call early instead, and the reader reports the
 * file as changed (or unreadable). Any other SIGBUS, or one on a thread
 * outside a guarded call, gets the action that was in place before the first
 * hold.
 *
 *   relay_map_guard_hold();                      before any thread reads
 *   rc = relay_map_guard_run(base, len, fn, ctx, &faulted);   on any thread
 *   relay_map_guard_release();                   after every reader is done
 *
 * Holds nest and may come from several threads at once: the handler is
 * installed by the first hold and the earlier action put back by the last
 * release.
 *
 * A fault only happens where the mapped bytes are read. `fn` may allocate and
 * call out, as long as it never reads the mapping while it holds a lock or is
 * inside the allocator; a fault abandons whatever it was doing (memory it had
 * allocated and not yet freed included), so the caller gives up the read.
 */
#ifndef RELAY_MAP_GUARD_H
#define RELAY_MAP_GUARD_H

#include <stddef.h>

/* Take over SIGBUS for the process (or count one more holder). Returns 0, or
 * -1 when sigaction failed (then nothing is guarded: do not map). */
int relay_map_guard_hold(void);

/* One holder less; the last one puts the earlier SIGBUS action back. */
void relay_map_guard_release(void);

/* fn(ctx) with len bytes at base guarded on the calling thread: its result,
 * *faulted 0; or, when it touched a page of the range that raised SIGBUS,
 * -1 with *faulted 1. */
int relay_map_guard_run(const void *base, size_t len, int (*fn)(void *ctx), void *ctx, int *faulted);

#endif
