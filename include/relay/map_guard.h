/*
 * map_guard: reading a mapped file that may shrink under us.
 *
 * A page of a MAP_SHARED or MAP_PRIVATE file mapping that lies past the
 * file's end once another process truncated it raises SIGBUS when touched,
 * which would kill the process. Code that reads such a mapping arms a guard
 * on its thread for the mapped range; a SIGBUS inside that range then jumps
 * back to the guard's sigsetjmp point instead, and the reader reports the
 * file as changed. A SIGBUS anywhere else, or on a thread without a guard,
 * keeps its default action.
 *
 *   relay_map_guard_install(&saved);            once, before any thread reads
 *   sigjmp_buf env;
 *   if (sigsetjmp(env, 1) == 0) {
 *       relay_map_guard_arm(&env, base, len);   this thread, this range
 *       ... read the mapping ...
 *   } else {
 *       ... the file shrank ...
 *   }
 *   relay_map_guard_disarm();
 *   relay_map_guard_restore(&saved);            after every reader is done
 *
 * A fault only happens where the mapped bytes are read, so the code between
 * arm and disarm may allocate and call out, as long as it never reads the
 * mapping while it holds a lock or is inside the allocator, and the state a
 * jump leaves half-updated is thrown away with the failed read.
 */
#ifndef RELAY_MAP_GUARD_H
#define RELAY_MAP_GUARD_H

#include <setjmp.h>
#include <signal.h>
#include <stddef.h>

/* What relay_map_guard_restore puts back. */
typedef struct relay_map_guard_saved {
    struct sigaction action;
    int installed;
} relay_map_guard_saved;

/* Take over SIGBUS for the process (the previous action goes into *saved).
 * Returns 0, or -1 when sigaction failed (then nothing is guarded). */
int relay_map_guard_install(relay_map_guard_saved *saved);

/* Put back the SIGBUS action that install replaced. */
void relay_map_guard_restore(const relay_map_guard_saved *saved);

/* Guard len bytes at base on the calling thread, jumping to env on a fault. */
void relay_map_guard_arm(sigjmp_buf *env, const void *base, size_t len);

/* Stop guarding on the calling thread. */
void relay_map_guard_disarm(void);

/* The reader's message for a file that shrank while it was read. */
#define RELAY_MAP_GUARD_MESSAGE "the file changed while it was read (it shrank)"

#endif
