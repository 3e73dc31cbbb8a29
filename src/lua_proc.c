/*
 * relay.core.proc: child processes for Lua (the container runtimes).
 *
 * A handle is a userdata wrapping one relay_proc. While the child runs the
 * handle is anchored in the registry (a task may drop its
 * reference and the completion must still have somewhere to land). on_line runs on
 * the main state under pcall, never on a parked coroutine (resuming one from
 * inside a libev callback would unwind Lua errors through C frames); its
 * errors are logged. h:wait() parks the calling task on the bridge.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "lua_bridge.h"
#include "lua_common.h"
#include "relay/log.h"
#include "relay/proc.h"

#define PROC_MT "relay.core.proc.handle"
#define HOOK_TIMEOUT_S 10.0

typedef struct lproc {
    relay_proc *p;
    pid_t pid;
    int self_ref; /* anchors the userdata while the child runs */
    int on_line_ref;
    char **term_argv;
    char **kill_argv;
    int waiting;
    relay_wait_token token;
    int done;
    relay_proc_report rep;
} lproc;

int luaopen_relay_core_proc(lua_State *L);


static void
strv_free(char **v)
{
    size_t i;

    for (i = 0; v != NULL && v[i] != NULL; i++) {
        free(v[i]);
    }
    free(v);
}


/* Copies the array of strings at field `name` of the options table (or nil).
 * Raises on a wrong type: that is a programmer error. */
static char **
opt_strv(lua_State *L, int opts, const char *name, int required)
{
    char **v;
    size_t n, i;

    lua_getfield(L, opts, name);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        if (required) {
            luaL_error(L, "proc.spawn: %s is required", name);
        }
        return NULL;
    }
    if (!lua_istable(L, -1)) {
        luaL_error(L, "proc.spawn: %s must be a list of strings", name);
    }
    n = lua_objlen(L, -1);
    if (required && n == 0) {
        luaL_error(L, "proc.spawn: %s must not be empty", name);
    }
    v = calloc(n + 1, sizeof *v);
    for (i = 0; v != NULL && i < n; i++) {
        lua_rawgeti(L, -1, (int)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER) {
            strv_free(v);
            luaL_error(L, "proc.spawn: %s[%d] must be a string", name, (int)i + 1);
        }
        v[i] = strdup(lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return v;
}


/* env = {K = V, ...} -> "K=V" strings; nil means inherit. */
static char **
opt_env(lua_State *L, int opts)
{
    char **v;
    size_t n = 0, i = 0, kl, vl;
    const char *k, *val;

    lua_getfield(L, opts, "env");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    luaL_argcheck(L, lua_istable(L, -1), 1, "env must be a table");
    for (lua_pushnil(L); lua_next(L, -2) != 0; lua_pop(L, 1)) {
        n++;
    }
    v = calloc(n + 1, sizeof *v);
    for (lua_pushnil(L); v != NULL && lua_next(L, -2) != 0; lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING || (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)) {
            strv_free(v);
            luaL_error(L, "proc.spawn: env keys and values must be strings");
        }
        k = lua_tolstring(L, -2, &kl);
        val = lua_tolstring(L, -1, &vl);
        v[i] = malloc(kl + vl + 2);
        memcpy(v[i], k, kl);
        v[i][kl] = '=';
        memcpy(v[i] + kl + 1, val, vl + 1);
        i++;
    }
    lua_pop(L, 1);
    return v;
}


static double
opt_number(lua_State *L, int opts, const char *name, double def)
{
    double d;

    lua_getfield(L, opts, name);
    d = luaL_optnumber(L, -1, def);
    lua_pop(L, 1);
    return d;
}


static void
on_line(void *ud, int stream, const char *bytes, size_t len, int partial)
{
    lproc *h = ud;
    lua_State *L = relay_bridge_main_state();
    int top;

    if (L == NULL || h->on_line_ref == LUA_NOREF || relay_bridge_shutting_down()) {
        return;
    }
    top = lua_gettop(L);
    lua_pushcfunction(L, relay_lua_traceback);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->on_line_ref);
    lua_pushstring(L, stream == RELAY_PROC_STDOUT ? "stdout" : stream == RELAY_PROC_STDERR ? "stderr" : "control");
    lua_pushlstring(L, bytes, len);
    lua_pushboolean(L, partial);
    if (lua_pcall(L, 3, 0, top + 1) != 0) {
        relay_log_error("proc %d on_line: %s", (int)h->pid, lua_tostring(L, -1));
    }
    lua_settop(L, top);
}


static void
hook_done(void *ud, relay_proc *p, const relay_proc_report *r)
{
    (void)ud;
    if (r->start_errno != 0) {
        relay_log_warn("runtime hook: %s", r->start_error);
    }
    relay_proc_free(p);
}


/* The driver's own kill command (`runc kill ID KILL`): fire and forget, with
 * its own deadline; its output is not the handler's. */
static void
on_hook(void *ud, relay_proc *p, int which)
{
    lproc *h = ud;
    char **argv = which == SIGTERM ? h->term_argv : h->kill_argv;
    relay_proc_opts o;
    char err[256];

    (void)p;
    if (argv == NULL) {
        return;
    }
    memset(&o, 0, sizeof o);
    o.argv = (const char *const *)argv;
    o.timeout_s = HOOK_TIMEOUT_S;
    o.on_done = hook_done;
    if (relay_proc_spawn(relay_bridge_loop(), &o, err, sizeof err) == NULL) {
        relay_log_warn("runtime hook %s: %s", argv[0], err);
    }
}


static int
push_report(lua_State *L, void *arg)
{
    const relay_proc_report *r = arg;

    lua_createtable(L, 0, 6);
    if (r->start_errno != 0) {
        lua_pushstring(L, r->start_error);
        lua_setfield(L, -2, "start_error");
    } else if (r->exited) {
        lua_pushinteger(L, r->status);
        lua_setfield(L, -2, "status");
    }
    if (r->signal != 0) {
        lua_pushinteger(L, r->signal);
        lua_setfield(L, -2, "signal");
    }
    lua_pushboolean(L, r->timed_out);
    lua_setfield(L, -2, "timed_out");
    lua_pushnumber(L, (lua_Number)r->duration_ms);
    lua_setfield(L, -2, "duration_ms");
    return 1;
}


static void
on_done(void *ud, relay_proc *p, const relay_proc_report *r)
{
    lproc *h = ud;
    lua_State *L = relay_bridge_main_state();
    int ref = h->self_ref;

    h->rep = *r;
    h->done = 1;
    h->p = NULL;
    relay_proc_free(p);
    /* the hooks are only needed while the child runs */
    strv_free(h->term_argv);
    strv_free(h->kill_argv);
    h->term_argv = h->kill_argv = NULL;
    if (h->waiting) {
        h->waiting = 0;
        relay_wait_complete(h->token, push_report, &h->rep);
    }
    /* last: dropping the anchor may let the GC free h */
    h->self_ref = LUA_NOREF;
    if (L != NULL && !relay_bridge_shutting_down()) {
        luaL_unref(L, LUA_REGISTRYINDEX, ref);
    }
}


static lproc *
check_proc(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, PROC_MT);
}


/* uid/gid (both or neither), nofile, no_core, die_with_parent: the
 * child's identity and limits, applied after it joined its cgroups. */
static void
fill_identity(lua_State *L, relay_proc_opts *o)
{
    lua_getfield(L, 1, "uid");
    lua_getfield(L, 1, "gid");
    if (!lua_isnil(L, -2) || !lua_isnil(L, -1)) {
        o->set_ids = 1;
        o->uid = (long)luaL_checkinteger(L, -2);
        o->gid = (long)luaL_checkinteger(L, -1);
        luaL_argcheck(L, o->uid >= 0 && o->gid >= 0, 1, "uid and gid must be set together, >= 0");
    }
    lua_pop(L, 2);
    o->nofile = (long)opt_number(L, 1, "nofile", 0);
    lua_getfield(L, 1, "no_core");
    o->no_core = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "die_with_parent");
    o->die_with_parent = lua_toboolean(L, -1);
    lua_pop(L, 1);
}


/* pass_fds = {fd, ...}: become the child's fds 3, 4, ... (at most 16). */
static int *
opt_fds(lua_State *L, size_t *n)
{
    int *fds;
    size_t i, len;

    *n = 0;
    lua_getfield(L, 1, "pass_fds");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    luaL_argcheck(L, lua_istable(L, -1), 1, "pass_fds must be a list of descriptors");
    len = lua_objlen(L, -1);
    luaL_argcheck(L, len <= 16, 1, "at most 16 pass_fds");
    fds = calloc(len + 1, sizeof *fds);
    for (i = 0; fds != NULL && i < len; i++) {
        lua_rawgeti(L, -1, (int)i + 1);
        fds[i] = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    *n = fds != NULL ? len : 0;
    return fds;
}


static void
fill_opts(lua_State *L, relay_proc_opts *o, lproc *h)
{
    size_t len = 0;

    memset(o, 0, sizeof *o);
    lua_getfield(L, 1, "stdin");
    if (!lua_isnil(L, -1)) {
        luaL_argcheck(L, lua_type(L, -1) == LUA_TSTRING, 1, "stdin must be a string");
        o->stdin_data = lua_tolstring(L, -1, &len);
        o->stdin_len = len;
    }
    lua_pop(L, 1); /* the string stays referenced by the options table */
    lua_getfield(L, 1, "cwd");
    o->cwd = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    lua_pop(L, 1);
    o->timeout_s = opt_number(L, 1, "timeout", 0);
    o->grace_s = opt_number(L, 1, "grace", 2);
    o->drain_s = opt_number(L, 1, "drain", 2);
    o->kill_delay_s = opt_number(L, 1, "kill_delay", 0);
    o->line_max = (size_t)opt_number(L, 1, "line_max", 0);
    lua_getfield(L, 1, "keep_group");
    o->keep_group = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "control");
    o->control = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "deferred");
    o->deferred = lua_toboolean(L, -1);
    lua_pop(L, 1);
    fill_identity(L, o);
    o->on_line = on_line;
    o->on_done = on_done;
    o->on_hook = on_hook;
    o->ud = h;
}


/***
 * @function proc.spawn(opts)
 * Starts a child in its own process group.
 * opts: argv (list, required), env ({K=V}, nil = inherit), cwd, stdin (string),
 * timeout, grace, drain, kill_delay (seconds), line_max, keep_group,
 * cgroup_procs (list of cgroup.procs files to join before exec), then
 * pass_fds (list: they become fds 3, 4, ...), control (true: a control
 * socket as the next descriptor; its lines come to on_line as stream
 * "control", see relay/proc.h), nofile, no_core (rlimits),
 * die_with_parent (the kernel SIGKILLs the child when Relay ends),
 * deferred (a warm start: stdin open, no deadline until h:activate),
 * uid and gid (setgroups({}), setgid, setuid before exec),
 * on_line = function(stream, line, partial), term_argv, kill_argv (driver
 * hooks run at the TERM and KILL steps of the deadline).
 * @return handle, or nil, err when the host could not fork
 */
static int
lua_proc_spawn(lua_State *L)
{
    char **argv, **envp, **cgroups;
    int *fds;
    relay_proc_opts o;
    char err[256];
    lproc *h;

    luaL_checktype(L, 1, LUA_TTABLE);
    h = lua_newuserdata(L, sizeof *h);
    memset(h, 0, sizeof *h);
    h->self_ref = h->on_line_ref = LUA_NOREF;
    luaL_getmetatable(L, PROC_MT);
    lua_setmetatable(L, -2);
    lua_getfield(L, 1, "on_line");
    if (lua_isfunction(L, -1)) {
        h->on_line_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    } else {
        luaL_argcheck(L, lua_isnil(L, -1), 1, "on_line must be a function");
        lua_pop(L, 1);
    }
    h->term_argv = opt_strv(L, 1, "term_argv", 0);
    h->kill_argv = opt_strv(L, 1, "kill_argv", 0);
    fill_opts(L, &o, h);
    argv = opt_strv(L, 1, "argv", 1);
    envp = opt_env(L, 1);
    cgroups = opt_strv(L, 1, "cgroup_procs", 0);
    fds = opt_fds(L, &o.n_pass_fds);
    o.pass_fds = fds;
    o.argv = (const char *const *)argv;
    o.envp = (const char *const *)envp;
    o.cgroup_procs = (const char *const *)cgroups;
    h->p = relay_proc_spawn(relay_bridge_loop(), &o, err, sizeof err);
    strv_free(argv);
    strv_free(envp);
    strv_free(cgroups);
    free(fds);
    if (h->p == NULL) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    h->pid = relay_proc_pid(h->p);
    lua_pushvalue(L, -1);
    h->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 1;
}


static void
wait_cancel(void *owner)
{
    lproc *h = owner;

    h->waiting = 0;
}


/***
 * @function h:wait([timeout])
 * Parks the task until the child was reaped and its output drained.
 * @return {status=N|nil, signal=N|nil, timed_out=bool, duration_ms=N,
 *         start_error=string|nil}, or nil, "timeout" / nil, "busy"
 */
static int
lua_proc_wait(lua_State *L)
{
    lproc *h = check_proc(L, 1);
    double timeout = luaL_optnumber(L, 2, -1);

    if (h->done) {
        return push_report(L, &h->rep);
    }
    if (h->waiting) {
        lua_pushnil(L);
        lua_pushliteral(L, "busy");
        return 2;
    }
    h->token = relay_wait_begin(L, timeout, wait_cancel, h);
    h->waiting = 1;
    return relay_wait_yield(L);
}


static int
signal_arg(lua_State *L, int idx)
{
    static const char *const names[] = {"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", NULL};
    static const int nums[] = {SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

    if (lua_type(L, idx) == LUA_TNUMBER) {
        return (int)lua_tointeger(L, idx);
    }
    if (lua_isnoneornil(L, idx)) {
        return SIGTERM;
    }
    return nums[luaL_checkoption(L, idx, NULL, names)];
}


/***
 * @function h:kill([sig])
 * Sends sig (number or "TERM", "KILL", ...; default TERM) to the child's group.
 * @return true, or nil, "not running"
 */
static int
lua_proc_kill(lua_State *L)
{
    lproc *h = check_proc(L, 1);
    int sig = signal_arg(L, 2);

    if (h->p == NULL || relay_proc_kill(h->p, sig) != 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "not running");
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}


/***
 * @function h:terminate()
 * Runs the deadline sequence now (TERM, hooks, grace, KILL); the report
 * then says timed_out. Used by a forced shutdown.
 */
static int
lua_proc_terminate(lua_State *L)
{
    lproc *h = check_proc(L, 1);

    if (h->p != NULL) {
        relay_proc_terminate(h->p);
    }
    return 0;
}


/***
 * @function h:activate(opts)
 * Starts a deferred (warm) child's work: opts.start (the start record,
 * written on the control socket), opts.stdin, opts.timeout and opts.grace
 * (seconds, counted from now, like the duration).
 * @return true, or nil, err
 */
static int
lua_proc_activate(lua_State *L)
{
    lproc *h = check_proc(L, 1);
    size_t start_len = 0, in_len = 0;
    const char *start, *in;
    double timeout, grace;

    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "start");
    start = luaL_checklstring(L, -1, &start_len);
    lua_getfield(L, 2, "stdin");
    in = luaL_optlstring(L, -1, "", &in_len);
    timeout = opt_number(L, 2, "timeout", 0);
    grace = opt_number(L, 2, "grace", 2);
    if (h->p == NULL || relay_proc_activate(h->p, start, start_len, in, in_len, timeout, grace) != 0) {
        lua_pushnil(L);
        lua_pushstring(L, h->p == NULL ? "not running" : strerror(errno));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}


/***
 * @function h:close_control()
 * Closes Relay's end of the control socket: a warm relay-init still
 * waiting for its start record exits.
 */
static int
lua_proc_close_control(lua_State *L)
{
    lproc *h = check_proc(L, 1);

    if (h->p != NULL) {
        relay_proc_close_control(h->p);
    }
    return 0;
}


static int
lua_proc_index(lua_State *L)
{
    lproc *h = check_proc(L, 1);
    const char *k = luaL_checkstring(L, 2);

    if (strcmp(k, "pid") == 0) {
        lua_pushinteger(L, h->pid);
        return 1;
    }
    if (strcmp(k, "done") == 0) {
        lua_pushboolean(L, h->done);
        return 1;
    }
    luaL_getmetatable(L, PROC_MT);
    lua_getfield(L, -1, "methods");
    lua_getfield(L, -1, k);
    return 1;
}


static int
lua_proc_gc(lua_State *L)
{
    lproc *h = check_proc(L, 1);

    /* only reachable once done, or when the state closes at shutdown */
    if (h->p != NULL) {
        relay_proc_free(h->p);
        h->p = NULL;
    }
    if (h->on_line_ref != LUA_NOREF && !relay_bridge_shutting_down()) {
        luaL_unref(L, LUA_REGISTRYINDEX, h->on_line_ref);
    }
    h->on_line_ref = LUA_NOREF;
    strv_free(h->term_argv);
    strv_free(h->kill_argv);
    h->term_argv = h->kill_argv = NULL;
    return 0;
}


static int
lua_proc_tostring(lua_State *L)
{
    lproc *h = check_proc(L, 1);

    lua_pushfstring(L, "proc(%d%s)", (int)h->pid, h->done ? ", done" : "");
    return 1;
}


/***
 * @function proc.cgroup_warm(procs_path)
 * Writes this process's pid to procs_path (the cgroup.procs of its own
 * cgroup) from a thread, returning at once (relay/proc.h).
 * @return true, or nil, err when the thread could not start
 */
static int
lua_proc_cgroup_warm(lua_State *L)
{
    char err[128];

    if (relay_proc_cgroup_warm(luaL_checkstring(L, 1), err, sizeof err) != 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}


/***
 * @function proc.live_count()
 * @return the number of supervised children not yet freed (tests, metrics)
 */
static int
lua_proc_live_count(lua_State *L)
{
    lua_pushinteger(L, relay_proc_live_count());
    return 1;
}


int
luaopen_relay_core_proc(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"wait", lua_proc_wait},
        {"kill", lua_proc_kill},
        {"terminate", lua_proc_terminate},
        {"activate", lua_proc_activate},
        {"close_control", lua_proc_close_control},
        {NULL, NULL},
    };
    static const luaL_Reg meta[] = {
        {"__index", lua_proc_index},
        {"__gc", lua_proc_gc},
        {"__tostring", lua_proc_tostring},
        {NULL, NULL},
    };
    static const luaL_Reg funcs[] = {
        {"spawn", lua_proc_spawn},
        {"live_count", lua_proc_live_count},
        {"cgroup_warm", lua_proc_cgroup_warm},
        {NULL, NULL},
    };

    if (luaL_newmetatable(L, PROC_MT)) {
        luaL_register(L, NULL, meta);
        lua_newtable(L);
        luaL_register(L, NULL, methods);
        lua_setfield(L, -2, "methods");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    luaL_register(L, NULL, funcs);
    return 1;
}
