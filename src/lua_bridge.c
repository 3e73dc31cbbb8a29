/*
 * The coroutine bridge (see lua_bridge.h for the contract).
 *
 * Tasks live in a slot array. A slot's wait generation increases with every
 * wait, so a token names one wait of one task and can never resume a later
 * wait or a recycled slot. Results of a completion are parked on the task's
 * mailbox thread until the ready queue resumes the task: that way a
 * completion that fires before the task has yielded (hiredis can call back
 * synchronously) cannot disturb the running C frame.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_bridge.h"
#include "relay/log.h"

typedef enum {
    TASK_FREE = 0,
    TASK_READY, /* queued for resumption */
    TASK_RUNNING,
    TASK_WAITING, /* parked on a wait */
} task_state;

typedef struct {
    lua_State *co;
    lua_State *mailbox;
    int co_ref;
    int mailbox_ref;
    uint32_t wait_gen;
    task_state state;
    int started; /* first resume passes the spawn arguments */
    int is_main;
    ev_timer timer;
    relay_cancel_fn cancel;
    void *owner;
} task;

static struct {
    lua_State *L;
    struct ev_loop *loop;
    task **tasks; /* individually allocated: libev holds pointers to their timers */
    size_t ntasks;
    int *ready; /* ring of slot indices */
    size_t ready_cap, ready_head, ready_len;
    ev_prepare drain;
    ev_idle keep_spinning;
    int main_done;
    int main_failed;
    int main_exit_code;
    int shutting_down;
} bridge;

static const char TASK_INDEX_KEY = 0; /* registry: thread -> slot index */


static void
ready_push(int slot)
{
    if (bridge.ready_len == bridge.ready_cap) {
        size_t cap = bridge.ready_cap ? bridge.ready_cap * 2 : 64;
        int *ring = malloc(cap * sizeof(*ring));
        if (ring == NULL) {
            abort();
        }
        for (size_t i = 0; i < bridge.ready_len; i++) {
            ring[i] = bridge.ready[(bridge.ready_head + i) % bridge.ready_cap];
        }
        free(bridge.ready);
        bridge.ready = ring;
        bridge.ready_cap = cap;
        bridge.ready_head = 0;
    }
    bridge.ready[(bridge.ready_head + bridge.ready_len) % bridge.ready_cap] = slot;
    bridge.ready_len++;
    bridge.tasks[slot]->state = TASK_READY;
    ev_idle_start(bridge.loop, &bridge.keep_spinning);
}


static int
ready_pop(void)
{
    int slot = bridge.ready[bridge.ready_head];

    bridge.ready_head = (bridge.ready_head + 1) % bridge.ready_cap;
    bridge.ready_len--;
    return slot;
}


static int
slot_alloc(void)
{
    for (size_t i = 0; i < bridge.ntasks; i++) {
        if (bridge.tasks[i]->state == TASK_FREE) {
            return (int)i;
        }
    }
    size_t n = bridge.ntasks ? bridge.ntasks * 2 : 64;
    task **grown = realloc(bridge.tasks, n * sizeof(*grown));
    if (grown == NULL) {
        abort();
    }
    for (size_t i = bridge.ntasks; i < n; i++) {
        grown[i] = calloc(1, sizeof(task));
        if (grown[i] == NULL) {
            abort();
        }
    }
    bridge.tasks = grown;
    int slot = (int)bridge.ntasks;
    bridge.ntasks = n;
    return slot;
}


static void
task_index_set(lua_State *co, int slot)
{
    lua_State *L = bridge.L;

    lua_pushlightuserdata(L, (void *)&TASK_INDEX_KEY);
    lua_rawget(L, LUA_REGISTRYINDEX);
    lua_pushthread(co);
    lua_xmove(co, L, 1);
    if (slot >= 0) {
        lua_pushinteger(L, slot);
    } else {
        lua_pushnil(L);
    }
    lua_rawset(L, -3);
    lua_pop(L, 1);
}


static int
task_index_get(lua_State *co)
{
    int slot;

    lua_pushlightuserdata(co, (void *)&TASK_INDEX_KEY);
    lua_rawget(co, LUA_REGISTRYINDEX);
    lua_pushthread(co);
    lua_rawget(co, -2);
    slot = lua_isnumber(co, -1) ? (int)lua_tointeger(co, -1) : -1;
    lua_pop(co, 2);
    return slot;
}


static void
task_timer_stop(task *t)
{
    if (ev_is_active(&t->timer)) {
        ev_timer_stop(bridge.loop, &t->timer);
    }
}


static void
task_release(int slot)
{
    task *t = bridge.tasks[slot];

    task_timer_stop(t);
    if (t->cancel != NULL) {
        relay_cancel_fn cancel = t->cancel;
        t->cancel = NULL;
        cancel(t->owner);
    }
    task_index_set(t->co, -1);
    luaL_unref(bridge.L, LUA_REGISTRYINDEX, t->co_ref);
    luaL_unref(bridge.L, LUA_REGISTRYINDEX, t->mailbox_ref);
    t->co = NULL;
    t->mailbox = NULL;
    t->state = TASK_FREE;
    t->wait_gen++;
}


static void
task_log_error(task *t, const char *what)
{
    lua_State *L = bridge.L;
    const char *msg = lua_tostring(t->co, -1);

    luaL_traceback(L, t->co, msg ? msg : "(error object is not a string)", 0);
    relay_log_error("%s: %s", what, lua_tostring(L, -1));
    lua_pop(L, 1);
}


static void
task_finish(int slot, int status)
{
    task *t = bridge.tasks[slot];

    if (status != 0) {
        task_log_error(t, t->is_main ? "command failed" : "task failed");
    }
    if (t->is_main) {
        bridge.main_done = 1;
        bridge.main_failed = status != 0;
        if (status == 0 && lua_gettop(t->co) >= 1 && lua_isnumber(t->co, 1)) {
            bridge.main_exit_code = (int)lua_tointeger(t->co, 1);
        }
        ev_break(bridge.loop, EVBREAK_ALL);
    }
    task_release(slot);
}


static void
task_resume(int slot)
{
    task *t = bridge.tasks[slot];
    int nargs = lua_gettop(t->mailbox);
    int rc;

    if (!t->started) {
        /* The mailbox holds the function and its spawn arguments. */
        t->started = 1;
        nargs--;
    }
    lua_xmove(t->mailbox, t->co, lua_gettop(t->mailbox));
    t->state = TASK_RUNNING;
    rc = lua_resume(t->co, nargs);
    if (rc == LUA_YIELD) {
        if (t->state != TASK_WAITING) {
            lua_pushstring(t->co, "coroutine yielded outside a relay wait "
                                  "(a plain coroutine.yield in a task?)");
            task_finish(slot, LUA_ERRRUN);
        }
        return;
    }
    task_finish(slot, rc);
}


static void
drain_ready(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    /* Resume only what is queued now; tasks queued meanwhile wait for the
     * next iteration so that I/O is polled between rounds. */
    size_t n = bridge.ready_len;
    while (n-- > 0 && bridge.ready_len > 0) {
        int slot = ready_pop();
        if (bridge.tasks[slot]->state == TASK_READY) {
            task_resume(slot);
        }
    }
    if (bridge.ready_len == 0) {
        ev_idle_stop(bridge.loop, &bridge.keep_spinning);
    }
}


static void
spin_once(struct ev_loop *loop, ev_idle *w, int revents)
{
    /* Only keeps the loop from blocking while tasks are ready. */
    (void)loop;
    (void)w;
    (void)revents;
}


void
relay_bridge_init(lua_State *L, struct ev_loop *loop)
{
    memset(&bridge, 0, sizeof(bridge));
    bridge.L = L;
    bridge.loop = loop;
    lua_pushlightuserdata(L, (void *)&TASK_INDEX_KEY);
    lua_newtable(L);
    lua_rawset(L, LUA_REGISTRYINDEX);
    ev_prepare_init(&bridge.drain, drain_ready);
    ev_prepare_start(loop, &bridge.drain);
    ev_unref(loop); /* the drain watcher alone must not keep ev_run alive */
    ev_idle_init(&bridge.keep_spinning, spin_once);
}


void
relay_bridge_shutdown(void)
{
    bridge.shutting_down = 1;
    for (size_t i = 0; i < bridge.ntasks; i++) {
        task_timer_stop(bridge.tasks[i]);
        free(bridge.tasks[i]);
    }
    ev_ref(bridge.loop);
    ev_prepare_stop(bridge.loop, &bridge.drain);
    ev_idle_stop(bridge.loop, &bridge.keep_spinning);
    free(bridge.tasks);
    free(bridge.ready);
    bridge.tasks = NULL;
    bridge.ntasks = 0;
    bridge.ready = NULL;
}


int
relay_bridge_shutting_down(void)
{
    return bridge.shutting_down;
}


struct ev_loop *
relay_bridge_loop(void)
{
    return bridge.loop;
}


lua_State *
relay_bridge_main_state(void)
{
    return bridge.L;
}


int
relay_bridge_spawn(lua_State *L, int nargs)
{
    int slot = slot_alloc();
    task *t = bridge.tasks[slot];

    luaL_checktype(L, -nargs - 1, LUA_TFUNCTION);
    t->co = lua_newthread(L);
    t->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    t->mailbox = lua_newthread(L);
    t->mailbox_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    t->started = 0;
    t->is_main = 0;
    t->cancel = NULL;
    lua_xmove(L, t->mailbox, nargs + 1);
    task_index_set(t->co, slot);
    ready_push(slot);
    return slot;
}


int
relay_bridge_run_main(lua_State *L, int nargs, int *exit_code)
{
    int slot = relay_bridge_spawn(L, nargs);

    bridge.tasks[slot]->is_main = 1;
    bridge.main_exit_code = 0;
    while (!bridge.main_done) {
        ev_run(bridge.loop, 0);
        if (!bridge.main_done && bridge.ready_len == 0) {
            /* Nothing can wake the main task any more: a wait with no
             * timer whose waker is gone. Report instead of hanging. */
            relay_log_error("the command is waiting on something that can never complete");
            bridge.main_failed = 1;
            break;
        }
    }
    *exit_code = bridge.main_exit_code;
    return bridge.main_failed ? -1 : 0;
}


static void
wait_timed_out(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    int slot = (int)(intptr_t)w->data;
    task *t = bridge.tasks[slot];

    if (t->state != TASK_WAITING) {
        return;
    }
    if (t->cancel != NULL) {
        relay_cancel_fn cancel = t->cancel;
        t->cancel = NULL;
        cancel(t->owner);
    }
    lua_settop(t->mailbox, 0);
    lua_pushnil(t->mailbox);
    lua_pushliteral(t->mailbox, "timeout");
    t->wait_gen++;
    ready_push(slot);
}


relay_wait_token
relay_wait_begin(lua_State *L, double timeout_s, relay_cancel_fn cancel, void *owner)
{
    int slot = task_index_get(L);
    task *t;

    if (slot < 0 || bridge.tasks[slot]->co != L) {
        luaL_error(L, "this operation waits, and can only run inside a relay task "
                      "(not in a hook, a nested coroutine or at module load time)");
    }
    t = bridge.tasks[slot];
    if (t->state != TASK_RUNNING) {
        luaL_error(L, "task is already waiting");
    }
    t->wait_gen++;
    t->state = TASK_WAITING;
    t->cancel = cancel;
    t->owner = owner;
    lua_settop(t->mailbox, 0);
    if (timeout_s >= 0) {
        /* The task may have run long outside the loop (os.execute, a big
         * computation): the loop's time is from before that, and a timeout
         * counted from it would end early, even at once. */
        ev_now_update(bridge.loop);
        ev_timer_init(&t->timer, wait_timed_out, timeout_s, 0.);
        t->timer.data = (void *)(intptr_t)slot;
        ev_timer_start(bridge.loop, &t->timer);
    }
    return ((relay_wait_token)slot << 32) | t->wait_gen;
}


int
relay_wait_yield(lua_State *L)
{
    return lua_yield(L, 0);
}


static task *
task_for_token(relay_wait_token token)
{
    size_t slot = (size_t)(token >> 32);
    uint32_t gen = (uint32_t)(token & 0xffffffffu);

    if (bridge.shutting_down || slot >= bridge.ntasks) {
        return NULL;
    }
    task *t = bridge.tasks[slot];

    if (t->state != TASK_WAITING || t->wait_gen != gen) {
        return NULL;
    }
    return t;
}


int
relay_wait_complete(relay_wait_token token, relay_push_fn push, void *arg)
{
    task *t = task_for_token(token);

    if (t == NULL) {
        return -1;
    }
    task_timer_stop(t);
    t->cancel = NULL;
    if (push != NULL) {
        lua_settop(t->mailbox, 0);
        push(t->mailbox, arg);
    }
    t->wait_gen++;
    ready_push((int)(token >> 32));
    return 0;
}


static int
push_failure(lua_State *co, void *arg)
{
    lua_pushnil(co);
    lua_pushstring(co, (const char *)arg);
    return 2;
}


int
relay_wait_fail(relay_wait_token token, const char *message)
{
    return relay_wait_complete(token, push_failure, (void *)message);
}


lua_State *
relay_wait_mailbox(relay_wait_token token)
{
    task *t = task_for_token(token);

    if (t == NULL) {
        return NULL;
    }
    lua_settop(t->mailbox, 0);
    return t->mailbox;
}
