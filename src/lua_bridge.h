/*
 * The coroutine bridge: the only place that resumes Lua coroutines.
 *
 * Every unit of work (a CLI command, a stream message, a sweep) is a task: a
 * Lua coroutine anchored in the registry while C holds it. A task parks itself
 * on exactly one wait at a time. A wait is named by a token (slot + generation)
 * so that a completion arriving after the task moved on, died or was recycled
 * is a logged no-op instead of a resume of the wrong coroutine.
 *
 * Completions never resume inline: they push their results onto the parked
 * coroutine's stack and queue it; the queue is drained from an ev_prepare
 * watcher, outside any hiredis or libev I/O frame: a Lua error or a yield must
 * never unwind through those frames, and hiredis must not be re-entered from
 * its own callback.
 *
 * Only binding files (src/lua_*.c) include this header.
 */
#ifndef RELAY_LUA_BRIDGE_H
#define RELAY_LUA_BRIDGE_H

#include <stdint.h>

#include <ev.h>
#include <lauxlib.h>
#include <lua.h>

typedef uint64_t relay_wait_token;

/* Pushes a completion's results onto the parked coroutine; returns how many. */
typedef int (*relay_push_fn)(lua_State *co, void *arg);

/* Called when a wait ends without its completion (timeout or task teardown),
 * so the owner of the pending operation drops its reference to the token. */
typedef void (*relay_cancel_fn)(void *owner);

/* Set up once by the boot (lua_boot.c). */
void relay_bridge_init(lua_State *L, struct ev_loop *loop);
void relay_bridge_shutdown(void);
struct ev_loop *relay_bridge_loop(void);
lua_State *relay_bridge_main_state(void);

/* Starts fn (at index fn_index of L, followed by nargs arguments on top of L)
 * as a new task; it first runs from the ready queue. Pops fn and args.
 * Returns the task id, usable with relay_bridge_task_status(). */
int relay_bridge_spawn(lua_State *L, int nargs);

/* Parks the running task of L. timeout_s < 0 means no timer (Lua-level waits
 * only; every C I/O wait passes a timeout). On timeout the task resumes with
 * (nil, "timeout") after cancel(owner) ran. Raises a Lua error if L is not a
 * task's own coroutine (a nested coroutine, a hook, the main state).
 * Usage: token = relay_wait_begin(L, ...); ...; return relay_wait_yield(L); */
relay_wait_token relay_wait_begin(lua_State *L, double timeout_s, relay_cancel_fn cancel, void *owner);
int relay_wait_yield(lua_State *L);

/* Completes a wait from any loop callback. Returns 0 if delivered, -1 if the
 * token is stale (already completed, timed out, task gone): the caller then
 * simply drops its result. */
int relay_wait_complete(relay_wait_token token, relay_push_fn push, void *arg);

/* Completes a wait with (nil, message). */
int relay_wait_fail(relay_wait_token token, const char *message);

/* Runs fn (below nargs arguments on top of L) as the main task and the loop
 * until it finishes. *exit_code is its first result when that is a number.
 * Returns -1 if it raised (the traceback was logged) or got stuck. */
int relay_bridge_run_main(lua_State *L, int nargs, int *exit_code);

/* True once shutdown began: late completions and __gc must not touch Lua. */
int relay_bridge_shutting_down(void);

/* The (emptied) stack where a completion for token is pushed, or NULL if the
 * token is stale. Push the results there, then call
 * relay_wait_complete(token, NULL, NULL): for results built in place. */
lua_State *relay_wait_mailbox(relay_wait_token token);

#endif
