/*
 * map_guard: reading a mapped file that may shrink under us.
 *
 * A page of a MAP_SHARED or MAP_PRIVATE file mapping that lies past the
 * file's end once another process truncated it raises SIGBUS when touched,
 * which would kill the process; so does a mapped page the kernel cannot read
 * in (an I/O error). Code that reads such a mapping arms a guard on its thread
 * for the mapped range; a SIGBUS the kernel raises for an address inside that
 * range then jumps back to the guard's sigsetjmp point instead, and the reader
 * reports the file as changed (or unreadable). Any other SIGBUS, or one on a
 * thread without a guard, gets the action that was in place before the first
 * hold.
 *
 *   relay_map_guard_hold();                     before any thread reads
 *   sigjmp_buf env;
 *   if (sigsetjmp(env, 1) == 0) {
 *       relay_map_guard_arm(&env, base, len);   this thread, this range
 *       ... read the mapping ...
 *   } else {
 *       ... the file shrank, or a page could not be read ...
 *   }
 *   relay_map_guard_disarm();
 *   relay_map_guard_release();                  after every reader is done
 *
 * Holds nest and may come from several threads at once: the handler is
 * installed by the first hold and the earlier action put back by the last
 * release.
 *
 * A fault only happens where the mapped bytes are read. The code between arm
 * and disarm may allocate and call out, as long as it never reads the mapping
 * while it holds a lock or is inside the allocator; a jump abandons whatever
 * that code was doing (memory it had allocated and not yet freed included),
 * so the caller gives up the read it guarded.
 */
#ifndef RELAY_MAP_GUARD_H
#define RELAY_MAP_GUARD_H

#include <setjmp.h>
#include <stddef.h>

/* Take over SIGBUS for the process (or count one more holder). Returns 0, or
 * -1 when sigaction failed (then nothing is guarded: do not map). */
int relay_map_guard_hold(void);

/* One holder less; the last one puts the earlier SIGBUS action back. */
void relay_map_guard_release(void);

/* Guard len bytes at base on the calling thread, jumping to env on a fault. */
void relay_map_guard_arm(sigjmp_buf *env, const void *base, size_t len);

/* Stop guarding on the calling thread. */
void relay_map_guard_disarm(void);

#endif
