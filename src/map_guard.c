/*
 * map_guard: SIGBUS from a mapped file cut short becomes a jump back to the
 * reader (include/relay/map_guard.h).
 */
#include "relay/map_guard.h"

#include <string.h>

/* The calling thread's guard: where to jump and which bytes it covers. The
 * handler only reads these for the thread the fault happened on. */
static _Thread_local sigjmp_buf *guard_env;
static _Thread_local const char *guard_base;
static _Thread_local size_t guard_len;


static void
on_sigbus(int sig, siginfo_t *info, void *uctx)
{
    const char *at = info->si_addr;

    (void)uctx;
    if (guard_env != NULL && at >= guard_base && (size_t)(at - guard_base) < guard_len) {
        siglongjmp(*guard_env, 1);
    }
    /* Not ours: the default action, taken when the faulting access repeats. */
    signal(sig, SIG_DFL);
}


int
relay_map_guard_install(relay_map_guard_saved *saved)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    saved->installed = sigaction(SIGBUS, &sa, &saved->action) == 0;
    return saved->installed ? 0 : -1;
}


void
relay_map_guard_restore(const relay_map_guard_saved *saved)
{
    if (saved->installed) {
        sigaction(SIGBUS, &saved->action, NULL);
    }
}


void
relay_map_guard_arm(sigjmp_buf *env, const void *base, size_t len)
{
    guard_base = base;
    guard_len = len;
    guard_env = env;
}


void
relay_map_guard_disarm(void)
{
    guard_env = NULL;
}
