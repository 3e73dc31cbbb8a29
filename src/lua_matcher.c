/* Lua binding of the matcher: module "relay.core.matcher".
 * The only matcher file that sees the Lua API. It converts arguments and results
 * and nothing more: reading event files is match_scan.c's, output formats are
 * cmd/match.lua's. Data errors come back as nil, message; luaL_error is for
 * programming errors (bad argument types). */
#include "relay/json_scan.h"
#include "relay/match_scan.h"
#include "relay/matcher.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lua_common.h"
#include "lua_map_ahead.h"
#include "lua_rule_block.h"
#include "lua_stream_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MATCHER_MT "relay.core.matcher"
#define IDS_ON_STACK 64

int luaopen_relay_core_matcher(lua_State *L);


static relay_matcher **
check_box(lua_State *L)
{
    relay_matcher **box = luaL_checkudata(L, 1, MATCHER_MT);

    if (!*box) {
        luaL_error(L, "matcher already freed");
    }
    return box;
}


static int
nil_error(lua_State *L, const char *msg)
{
    lua_pushnil(L);
    lua_pushstring(L, msg);
    return 2;
}


/* The matcher at idx, for the stream batch's match (lua_stream_batch.c). */
relay_matcher *
relay_lua_check_matcher(lua_State *L, int idx)
{
    relay_matcher **box = luaL_checkudata(L, idx, MATCHER_MT);

    if (!*box) {
        luaL_error(L, "matcher already freed");
    }
    return *box;
}


/*** @function matcher.new
 * A new, empty matcher. Returns a userdata freed by the garbage collector. */
static int
l_new(lua_State *L)
{
    relay_matcher **box = lua_newuserdata(L, sizeof(*box));

    *box = NULL;
    luaL_getmetatable(L, MATCHER_MT);
    lua_setmetatable(L, -2);
    if (!(*box = relay_matcher_new())) {
        return luaL_error(L, "out of memory");
    }
    return 1;
}


/*** @function m:add(rule_json)
 * Add a rule in normal form. Returns its 0-based id, or nil, err. */
static int
l_add(lua_State *L)
{
    relay_matcher **box = check_box(L);
    size_t len;
    const char *rule = luaL_checklstring(L, 2, &len);
    char err[256];
    int id = relay_matcher_add(*box, rule, len, err, sizeof(err));

    if (id < 0) {
        return nil_error(L, err);
    }
    lua_pushinteger(L, id);
    return 1;
}


/*** @function m:add_many(rules)
 * Add an array of rules in normal form, in order (one call instead of one per rule).
 * Returns the number added, or nil, err, index (1-based) of the first refused rule;
 * the rules before it stay added. */
static int
l_add_many(lua_State *L)
{
    relay_matcher **box = check_box(L);
    size_t len, n, i;
    const char *rule;
    char err[256];

    luaL_checktype(L, 2, LUA_TTABLE);
    n = lua_objlen(L, 2);
    for (i = 1; i <= n; i++) {
        lua_rawgeti(L, 2, (int)i);
        if (!(rule = lua_tolstring(L, -1, &len))) {
            return luaL_error(L, "add_many: rules[%d] is not a string", (int)i);
        }
        if (relay_matcher_add(*box, rule, len, err, sizeof(err)) < 0) {
            lua_pushnil(L);
            lua_pushstring(L, err);
            lua_pushinteger(L, (lua_Integer)i);
            return 3;
        }
        lua_pop(L, 1);
    }
    lua_pushinteger(L, (lua_Integer)n);
    return 1;
}


/*** @function m:add_rules(block)
 * As add_many, for the rules of a rule block (yaml.load_app's bulk form). */
static int
l_add_rules(lua_State *L)
{
    relay_matcher **box = check_box(L);
    const relay_rule_block *block = relay_lua_check_rule_block(L, 2);
    char err[256];
    size_t i;

    if (relay_matcher_reserve(*box, block->count, err, sizeof(err)) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        lua_pushinteger(L, 1); /* no rule of the block could be added */
        return 3;
    }
    for (i = 0; i < block->count; i++) {
        if (relay_matcher_add_compiled(*box, relay_rule_block_json(block, i), block->entries[i].json_len, err,
                                       sizeof(err))
            < 0) {
            lua_pushnil(L);
            lua_pushstring(L, err);
            lua_pushinteger(L, (lua_Integer)i + 1);
            return 3;
        }
    }
    lua_pushinteger(L, (lua_Integer)block->count);
    return 1;
}


/*** @function m:compile()
 * Build the index now (match() would do it lazily). Returns true or nil, err. */
static int
l_compile(lua_State *L)
{
    relay_matcher **box = check_box(L);
    char err[256];

    if (relay_matcher_compile(*box, err, sizeof(err)) < 0) {
        return nil_error(L, err);
    }
    lua_pushboolean(L, 1);
    return 1;
}


/*** @function m:count()
 * Number of rules added. */
static int
l_count(lua_State *L)
{
    relay_matcher **box = check_box(L);

    lua_pushinteger(L, (lua_Integer)relay_matcher_count(*box));
    return 1;
}


static int64_t
opt_int64(lua_State *L, int idx, int64_t dflt)
{
    return lua_isnoneornil(L, idx) ? dflt : (int64_t)luaL_checknumber(L, idx);
}


static size_t
check_size(lua_State *L, int idx)
{
    lua_Number n = luaL_checknumber(L, idx);

    if (n < 0) {
        luaL_argerror(L, idx, "must not be negative");
    }
    return n >= (lua_Number)SIZE_MAX ? SIZE_MAX : (size_t)n;
}


/*** @function m:match(event, max_bytes, now_ms)
 * Match one event (JSON text). Returns an array of 0-based rule ids in
 * ascending order (possibly empty), or nil, reason when malformed. */
static int
l_match(lua_State *L)
{
    relay_matcher **box = check_box(L);
    size_t len, max_bytes = check_size(L, 3);
    const char *event = luaL_checklstring(L, 2, &len);
    int64_t now_ms = opt_int64(L, 4, 0);
    uint32_t small[IDS_ON_STACK], *ids = small;
    char reason[256];
    int n, i;

    n = relay_matcher_match(*box, event, len, max_bytes, now_ms, ids, IDS_ON_STACK, reason, sizeof(reason));
    if (n < 0) {
        return nil_error(L, reason);
    }
    if (n > IDS_ON_STACK) {
        if (!(ids = malloc((size_t)n * sizeof(*ids)))) {
            return luaL_error(L, "out of memory");
        }
        relay_matcher_match(*box, event, len, max_bytes, now_ms, ids, (size_t)n, reason, sizeof(reason));
    }
    lua_createtable(L, n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
    if (ids != small) {
        free(ids);
    }
    return 1;
}


/*** @function matcher.validate_object(text, max_bytes)
 * Check that text is one valid JSON object. Returns true or nil, reason. */
static int
l_validate_object(lua_State *L)
{
    size_t len, max_bytes = check_size(L, 2);
    const char *text = luaL_checklstring(L, 1, &len);
    char reason[256];

    if (relay_json_validate_object(text, len, max_bytes, reason, sizeof(reason)) < 0) {
        return nil_error(L, reason);
    }
    lua_pushboolean(L, 1);
    return 1;
}


/*** @function __gc
 * Free the matcher; idempotent. */
static int
l_gc(lua_State *L)
{
    relay_matcher **box = luaL_checkudata(L, 1, MATCHER_MT);

    relay_matcher_free(*box);
    *box = NULL;
    return 0;
}


/* Matches reach Lua in batches of up to SCAN_BATCH (line, rule id) pairs: one
 * protected call per batch instead of one per event, and the Lua loop over a
 * batch is compiled. */
#define SCAN_BATCH 1024

/* State of one m:scan() call: the Lua state its callbacks run on, the batch
 * being filled, and whether a callback raised (its error is kept on the stack
 * until the scan has freed its memory). */
typedef struct scan_call {
    lua_State *L;
    int on_match, on_malformed, on_wait; /* stack indices, 0 when absent */
    int lines, ids;                      /* stack indices of the batch tables */
    int n;                               /* pairs in the batch */
    int failed;
} scan_call;


/* Call the function at stack index fn with nargs arguments on top; on error keep
 * the message on the stack and stop the scan. */
static int
scan_callback(scan_call *call, int fn, int nargs)
{
    lua_State *L = call->L;

    lua_pushvalue(L, fn);
    lua_insert(L, -(nargs + 1));
    if (lua_pcall(L, nargs, 0, 0) != 0) {
        call->failed = 1;
        return 1;
    }
    return 0;
}


static int
scan_flush(scan_call *call)
{
    int n = call->n;

    if (n == 0 || call->failed) {
        return call->failed;
    }
    call->n = 0;
    lua_pushvalue(call->L, call->lines);
    lua_pushvalue(call->L, call->ids);
    lua_pushinteger(call->L, n);
    return scan_callback(call, call->on_match, 3);
}


static int
scan_on_match(void *ctx, long long line, const uint32_t *ids, size_t nids)
{
    scan_call *call = ctx;
    lua_State *L = call->L;
    size_t i;

    for (i = 0; i < nids; i++) {
        call->n++;
        lua_pushnumber(L, (lua_Number)line);
        lua_rawseti(L, call->lines, call->n);
        lua_pushinteger(L, (lua_Integer)ids[i]);
        lua_rawseti(L, call->ids, call->n);
        if (call->n == SCAN_BATCH && scan_flush(call) != 0) {
            return 1;
        }
    }
    return 0;
}


static int
scan_on_malformed(void *ctx, long long line, const char *reason)
{
    scan_call *call = ctx;

    /* Matches of earlier lines first, so output keeps the order of the input. */
    if (call->on_match != 0 && scan_flush(call) != 0) {
        return 1;
    }
    lua_pushnumber(call->L, (lua_Number)line);
    lua_pushstring(call->L, reason);
    return scan_callback(call, call->on_malformed, 2);
}


/* The input has nothing more for now: the matches so far reach Lua before the
 * scan waits, then on_wait (which may write them out) runs. */
static int
scan_on_wait(void *ctx)
{
    scan_call *call = ctx;

    if (call->on_match != 0 && scan_flush(call) != 0) {
        return 1;
    }
    return call->on_wait != 0 ? scan_callback(call, call->on_wait, 0) : 0;
}


static int
opt_function(lua_State *L, int opts, const char *name)
{
    lua_getfield(L, opts, name);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    if (!lua_isfunction(L, -1)) {
        luaL_error(L, "scan: opts.%s must be a function", name);
    }
    return lua_gettop(L);
}


static lua_Number
opt_number(lua_State *L, int opts, const char *name, lua_Number dflt)
{
    lua_Number v = dflt;

    lua_getfield(L, opts, name);
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) {
            luaL_error(L, "scan: opts.%s must be a number", name);
        }
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}


/* opts.access: "auto" (the default), "read" or "map" (RELAY_MATCH_ACCESS_*). */
static int
opt_access(lua_State *L, int opts)
{
    static const char *const names[] = {"auto", "read", "map", NULL};
    static const int values[] = {RELAY_MATCH_ACCESS_AUTO, RELAY_MATCH_ACCESS_READ, RELAY_MATCH_ACCESS_MAP};
    int i;

    lua_getfield(L, opts, "access");
    i = lua_isnil(L, -1) ? 0 : luaL_checkoption(L, -1, NULL, names);
    lua_pop(L, 1);
    return values[i];
}


/*** @function m:scan(file, opts)
 * Match every line of an open file (io.open(path, "rb"), io.stdin) as one event,
 * without a Lua call per line: the reading and matching of include/relay/match_scan.h.
 * @param file a Lua file handle, read to its end and left open
 * A regular file is split into byte ranges whose lines are matched on threads =
 * opts.threads (default 0: one per CPU); the callbacks still run here, on this thread,
 * in line order.
 * @param opts max_bytes (default 1 MiB), now_ms (default 0), threads (default 0),
 *   access ("auto", "read" or "map": how a regular file's bytes are reached; auto maps
 *   it where that is faster on this host), ahead (a relay.core.map_ahead handle made
 *   for this file before: its mapping is taken over when the scan maps);
 *   on_match(lines, ids, n): matches in input order, in batches: for i = 1..n, the
 *   event on line lines[i] matched the rule with 0-based id ids[i] (an event matching
 *   several rules gives several pairs, ids ascending). The two tables are reused for
 *   every batch: read them before returning. Absent, matches are only counted;
 *   on_malformed(line, reason): per malformed line, after the matches of the lines
 *   before it; absent, such lines are skipped;
 *   on_wait(): a pipe, socket or terminal has nothing more to read for now; called
 *   before the scan waits for it, after the batch of matches so far (which is handed
 *   over then, not only when full), so that a live filter can write its output out.
 * @return matched_events, total_lines; or nil, err on a read error. An error raised
 *   by a callback stops the scan and is raised again once the scan's memory is free. */
static int
l_scan(lua_State *L)
{
    relay_matcher **box = check_box(L);
    FILE **file = luaL_checkudata(L, 2, LUA_FILEHANDLE);
    relay_match_scan_opts opts = {0, 0, 0, 0, RELAY_MATCH_ACCESS_AUTO, NULL};
    relay_match_scan_sink sink = {NULL, NULL, NULL, NULL};
    relay_match_scan_counts counts;
    scan_call call = {L, 0, 0, 0, 0, 0, 0, 0};
    char err[256];
    int rc;

    if (*file == NULL) {
        return luaL_argerror(L, 2, "attempt to use a closed file");
    }
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    opts.max_bytes = (size_t)opt_number(L, 3, "max_bytes", 1 << 20);
    opts.now_ms = (int64_t)opt_number(L, 3, "now_ms", 0);
    opts.threads = (int)opt_number(L, 3, "threads", 0);
    opts.access = opt_access(L, 3);
    lua_getfield(L, 3, "ahead");
    opts.ahead = lua_isnil(L, -1) ? NULL : relay_lua_check_map_ahead(L, lua_gettop(L));
    lua_pop(L, 1); /* the handle stays referenced by opts for the call */
    if ((call.on_match = opt_function(L, 3, "on_match")) != 0) {
        sink.on_match = scan_on_match;
    }
    if ((call.on_malformed = opt_function(L, 3, "on_malformed")) != 0) {
        sink.on_malformed = scan_on_malformed;
    }
    if ((call.on_wait = opt_function(L, 3, "on_wait")) != 0 || call.on_match != 0) {
        sink.on_wait = scan_on_wait;
    }
    lua_createtable(L, SCAN_BATCH, 0);
    call.lines = lua_gettop(L);
    lua_createtable(L, SCAN_BATCH, 0);
    call.ids = lua_gettop(L);
    sink.ctx = &call;
    rc = relay_match_scan(*box, *file, &opts, &sink, &counts, err, sizeof(err));
    if (call.on_match != 0) {
        scan_flush(&call); /* what was matched before the end, or before a read error */
    }
    if (call.failed) {
        return lua_error(L);
    }
    if (rc < 0) {
        return nil_error(L, err);
    }
    lua_pushnumber(L, (lua_Number)counts.matched);
    lua_pushnumber(L, (lua_Number)counts.total);
    return 2;
}


/*** @function matcher.operators
 * The pattern language's operators (relay_matcher_ops, include/relay/matcher.h), in
 * their order: an array of {name = "prefix", operand = "string", written = true};
 * operand is literal, string, boolean, threshold, group or foreign. */
static void
push_operators(lua_State *L)
{
    const relay_matcher_op *op;
    int i = 0;

    lua_newtable(L);
    for (op = relay_matcher_ops; op->name != NULL; op++) {
        lua_createtable(L, 0, 3);
        lua_pushlstring(L, op->name, op->len);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, relay_matcher_operand_name((relay_matcher_operand)op->operand));
        lua_setfield(L, -2, "operand");
        lua_pushboolean(L, op->written);
        lua_setfield(L, -2, "written");
        lua_rawseti(L, -2, ++i);
    }
}


static int
l_tostring(lua_State *L)
{
    relay_matcher **box = luaL_checkudata(L, 1, MATCHER_MT);

    if (*box == NULL) {
        lua_pushliteral(L, MATCHER_MT " (freed)");
    } else {
        lua_pushfstring(L, MATCHER_MT " (%d rule%s)", (int)relay_matcher_count(*box),
                        relay_matcher_count(*box) == 1 ? "" : "s");
    }
    return 1;
}


static const luaL_Reg methods[] = {
    {"add", l_add},         {"add_many", l_add_many},   {"add_rules", l_add_rules},
    {"compile", l_compile}, {"count", l_count},         {"match", l_match},
    {"scan", l_scan},       {"__tostring", l_tostring}, {"__gc", l_gc},
    {NULL, NULL},
};

static const luaL_Reg functions[] = {
    {"new", l_new},
    {"validate_object", l_validate_object},
    {NULL, NULL},
};


int
luaopen_relay_core_matcher(lua_State *L)
{
    relay_lua_new_module(L, MATCHER_MT, methods, functions);
    push_operators(L);
    lua_setfield(L, -2, "operators");
    return 1;
}
