/*
 * relay.core.loop: tasks, sleeping, waking, clocks and signals for Lua.
 */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "lua_bridge.h"
#include "relay/log.h"

#define MAX_SIGNAL 64

static struct {
    ev_signal watchers[MAX_SIGNAL];
    int handler_refs[MAX_SIGNAL];
} signals;


/***
 * @function loop.spawn(fn, ...)
 * Starts fn(...) as a new task from the ready queue.
 * @return task id
 */
static int
lua_loop_spawn(lua_State *L)
{
    int nargs = lua_gettop(L) - 1;

    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_pushinteger(L, relay_bridge_spawn(L, nargs));
    return 1;
}


/***
 * @function loop.sleep(seconds)
 * Parks the current task for seconds (monotonic clock).
 */
static int
lua_loop_sleep(lua_State *L)
{
    double seconds = luaL_checknumber(L, 1);

    luaL_argcheck(L, seconds >= 0, 1, "must not be negative");
    relay_wait_begin(L, seconds, NULL, NULL);
    return relay_wait_yield(L);
}


/***
 * @function loop.wait(timeout, on_token)
 * Parks the current task until loop.wake(token, ...) or the timeout
 * (nil = none). on_token(token) runs before parking and must not yield.
 * @return the values given to wake, or nil, "timeout"
 */
static int
lua_loop_wait(lua_State *L)
{
    double timeout = luaL_optnumber(L, 1, -1);
    relay_wait_token token;

    luaL_checktype(L, 2, LUA_TFUNCTION);
    token = relay_wait_begin(L, timeout, NULL, NULL);
    lua_pushvalue(L, 2);
    lua_pushnumber(L, (lua_Number)token);
    lua_call(L, 1, 0);
    return relay_wait_yield(L);
}


static int
push_wake_values(lua_State *co, void *arg)
{
    lua_State *from = arg;
    int n = lua_gettop(from) - 1;

    lua_xmove(from, co, n);
    return n;
}


/***
 * @function loop.wake(token, ...)
 * Completes the wait named by token with the given values.
 * @return true if delivered, false if the wait had already ended
 */
static int
lua_loop_wake(lua_State *L)
{
    relay_wait_token token = (relay_wait_token)luaL_checknumber(L, 1);

    lua_pushboolean(L, relay_wait_complete(token, push_wake_values, L) == 0);
    return 1;
}


/***
 * @function loop.now_ms()
 * @return wall-clock milliseconds since the epoch
 */
static int
lua_loop_now_ms(lua_State *L)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec * 1000.0 + (lua_Number)(ts.tv_nsec / 1000000));
    return 1;
}


/***
 * @function loop.monotonic()
 * @return seconds on a monotonic clock
 */
static int
lua_loop_monotonic(lua_State *L)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec / 1e9);
    return 1;
}


static void
signal_arrived(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)revents;
    lua_State *L = relay_bridge_main_state();

    if (relay_bridge_shutting_down()) {
        return;
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, signals.handler_refs[w->signum]);
    lua_pushinteger(L, w->signum);
    relay_bridge_spawn(L, 1);
}


/***
 * @function loop.on_signal(signum, fn)
 * Runs fn(signum) as a new task each time the signal arrives; fn = nil
 * restores the default disposition.
 */
static int
lua_loop_on_signal(lua_State *L)
{
    int signum = (int)luaL_checkinteger(L, 1);
    ev_signal *w;

    luaL_argcheck(L, signum > 0 && signum < MAX_SIGNAL, 1, "bad signal number");
    w = &signals.watchers[signum];
    if (ev_is_active(w)) {
        /* It was unref'd when started: libev wants the ref back before the
         * stop, or the loop's count of active watchers goes one too low and
         * ev_run may return while a task still waits on a child process. */
        ev_ref(relay_bridge_loop());
        ev_signal_stop(relay_bridge_loop(), w);
        luaL_unref(L, LUA_REGISTRYINDEX, signals.handler_refs[signum]);
    }
    if (lua_isnoneornil(L, 2)) {
        return 0;
    }
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    signals.handler_refs[signum] = luaL_ref(L, LUA_REGISTRYINDEX);
    ev_signal_init(w, signal_arrived, signum);
    ev_signal_start(relay_bridge_loop(), w);
    ev_unref(relay_bridge_loop()); /* a signal handler alone keeps nothing alive */
    return 0;
}


/***
 * @function loop.exit(code)
 * Ends the process without unwinding (for a second shutdown signal), once
 * the queued log records are written (at most RELAY_LOG_EXIT_FLUSH_S).
 */
static int
lua_loop_exit(lua_State *L)
{
    int code = (int)luaL_checkinteger(L, 1);

    relay_log_flush(RELAY_LOG_EXIT_FLUSH_S); /* _exit skips the sink's atexit flush */
    _exit(code);
    return 0;
}


/***
 * @function loop.getpid()
 * @return this process id
 */
static int
lua_loop_getpid(lua_State *L)
{
    lua_pushinteger(L, getpid());
    return 1;
}


int
luaopen_relay_core_loop(lua_State *L)
{
    static const luaL_Reg functions[] = {
        {"spawn", lua_loop_spawn},         {"sleep", lua_loop_sleep},
        {"wait", lua_loop_wait},           {"wake", lua_loop_wake},
        {"now_ms", lua_loop_now_ms},       {"monotonic", lua_loop_monotonic},
        {"on_signal", lua_loop_on_signal}, {"exit", lua_loop_exit},
        {"getpid", lua_loop_getpid},       {NULL, NULL},
    };

    lua_newtable(L);
    luaL_register(L, NULL, functions);
    return 1;
}
