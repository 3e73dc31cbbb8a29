/*
 * map_guard: SIGBUS from a mapped file cut short becomes a jump back to the
 * reader (include/relay/map_guard.h).
 */
#include "relay/map_guard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

/* The calling thread's guard: where to jump and which bytes it covers. The
 * handler only reads these for the thread the fault happened on; volatile
 * and the fences keep the compiler from moving the stores across the reads
 * of the mapping they guard. */
static _Thread_local sigjmp_buf *volatile guard_env;
static _Thread_local const char *volatile guard_base;
static _Thread_local volatile size_t guard_len;

static pthread_mutex_t holders_lock = PTHREAD_MUTEX_INITIALIZER;
static int holders;
static struct sigaction earlier; /* the action before the first hold */


static void
on_sigbus(int sig, siginfo_t *info, void *uctx)
{
    const char *at = info->si_addr, *base = guard_base;
    sigjmp_buf *env = guard_env;

    /* si_code > 0: raised by the kernel for a fault (si_addr is meaningful);
     * a SIGBUS sent by kill or sigqueue is never ours. */
    if (info->si_code > 0 && env != NULL && at >= base && (size_t)(at - base) < guard_len) {
        siglongjmp(*env, 1);
    }
    /* Not ours: the earlier action. A handler is called as the kernel would
     * have; the default is put back, and a fault repeats when this returns
     * and meets it, while a sent signal must be raised again. */
    if ((earlier.sa_flags & SA_SIGINFO) != 0 && earlier.sa_sigaction != NULL) {
        earlier.sa_sigaction(sig, info, uctx);
    } else if (earlier.sa_handler != SIG_DFL && earlier.sa_handler != SIG_IGN) {
        earlier.sa_handler(sig);
    } else if (earlier.sa_handler == SIG_DFL) {
        sigaction(sig, &earlier, NULL);
        if (info->si_code <= 0) {
            raise(sig);
        }
    }
}


int
relay_map_guard_hold(void)
{
    struct sigaction sa;
    int rc = 0;

    pthread_mutex_lock(&holders_lock);
    if (holders == 0) {
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        rc = sigaction(SIGBUS, &sa, &earlier);
    }
    if (rc == 0) {
        holders++;
    }
    pthread_mutex_unlock(&holders_lock);
    return rc == 0 ? 0 : -1;
}


void
relay_map_guard_release(void)
{
    pthread_mutex_lock(&holders_lock);
    if (holders > 0 && --holders == 0) {
        sigaction(SIGBUS, &earlier, NULL);
    }
    pthread_mutex_unlock(&holders_lock);
}


static void
arm(sigjmp_buf *env, const void *base, size_t len)
{
    guard_base = base;
    guard_len = len;
    guard_env = env;
    atomic_signal_fence(memory_order_seq_cst);
}


static void
disarm(void)
{
    atomic_signal_fence(memory_order_seq_cst);
    guard_env = NULL;
}


int
relay_map_guard_run(const void *base, size_t len, int (*fn)(void *ctx), void *ctx, int *faulted)
{
    sigjmp_buf env;
    volatile int rc = -1;

    *faulted = 1;
    if (sigsetjmp(env, 1) == 0) {
        arm(&env, base, len);
        rc = fn(ctx);
        *faulted = 0;
    }
    disarm();
    return rc;
}
