/*
 * relay.core.redis: Redis for Lua.
 *
 *   local client, err = redis.connect(addr, timeout[, max_reply_bytes])   -- async, yields
 *   local value, err, kind = client:call("XADD", ...)  -- yields the task
 *   local sync, err = redis.connect_blocking(addr, timeout)
 *
 * Replies map to Lua values: bulk strings → strings, integers → numbers,
 * arrays → tables, status → {ok = "OK"}, a null → redis.null (the same
 * lightuserdata as cjson.null), an error inside an array → {err = "…"}.
 * A top-level error reply returns nil, message, "reply"; a transport
 * failure (lost connection, timeout, not connected) nil, message, "io".
 * redis.reply_object_bytes: what each reply object counts against a
 * client's max_reply_bytes besides its own bytes.
 * An async call whose first word is redis.stream_batch returns a read of
 * one stream's entries as a stream batch (lua_stream_batch.c), which as a
 * later command word stands for the ids of its unmatched entries.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_bridge.h"
#include "lua_common.h"
#include "lua_stream_batch.h"
#include "relay/redis_client.h"

#define ASYNC_CLASS "relay.redis.async"
#define SYNC_CLASS "relay.redis.sync"
#define DEFAULT_TIMEOUT_S 10.0
#define MAX_ARGS 4096

typedef struct {
    relay_redis *conn;
    relay_wait_token connect_token;
    int connect_waiting;
    int self_ref;      /* anchors the userdata until the first handshake ends */
    int was_connected; /* a first handshake succeeded */
    int unreachable;   /* counted in clients_unreachable */
} async_client;

typedef struct {
    relay_redis_sync *conn;
    char where[512];
} sync_client;

typedef struct {
    relay_wait_token token;
    relay_redis_request *req;
    async_client *client;
    int stream_batch; /* the reply of a stream read becomes a batch */
} pending_call;

/* redis.stream_batch: a first command word asking for a stream batch. */
static const char stream_batch_marker;

/* Whether Redis is reachable, for the whole process (redis.reachable): an
 * async client counts as cut off from the moment it loses an established
 * connection or a command of it fails in transport (a watchdog's timeout
 * comes before the reset) until it is connected again or a reply arrives. */
static int clients_unreachable;
static char unreachable_error[768];


static void
set_unreachable(async_client *c, int unreachable, const char *error)
{
    if (unreachable && error != NULL) {
        snprintf(unreachable_error, sizeof(unreachable_error), "%s", error);
    }
    if (c->unreachable != unreachable) {
        c->unreachable = unreachable;
        clients_unreachable += unreachable ? 1 : -1;
    }
}


void
relay_lua_push_reply(lua_State *L, redisReply *reply, int top_level)
{
    switch (reply->type) {
    case REDIS_REPLY_STRING:
        lua_pushlstring(L, reply->str, reply->len);
        break;
    case REDIS_REPLY_INTEGER:
        lua_pushnumber(L, (lua_Number)reply->integer);
        break;
    case REDIS_REPLY_NIL:
        lua_pushlightuserdata(L, NULL);
        break;
    case REDIS_REPLY_STATUS:
        lua_createtable(L, 0, 1);
        lua_pushlstring(L, reply->str, reply->len);
        lua_setfield(L, -2, "ok");
        break;
    case REDIS_REPLY_ERROR:
        if (top_level) {
            lua_pushlstring(L, reply->str, reply->len);
        } else {
            lua_createtable(L, 0, 1);
            lua_pushlstring(L, reply->str, reply->len);
            lua_setfield(L, -2, "err");
        }
        break;
    case REDIS_REPLY_ARRAY:
        lua_checkstack(L, 4);
        lua_createtable(L, (int)reply->elements, 0);
        for (size_t i = 0; i < reply->elements; i++) {
            relay_lua_push_reply(L, reply->element[i], 0);
            lua_rawseti(L, -2, (int)i + 1);
            /* Each element goes as soon as Lua has its copy, so that a large
             * reply is never held twice over (both frees skip NULL). */
            relay_redis_free_reply(reply->element[i]);
            reply->element[i] = NULL;
        }
        break;
    default:
        lua_pushnil(L);
        break;
    }
}


/* Pushes the Lua result triple for a reply (or a transport error). An
 * array reply's elements are freed as they are converted. stream_batch: a
 * read of one stream's entries becomes a batch (lua_stream_batch.c). */
static int
push_result(lua_State *L, redisReply *reply, const char *io_error, int stream_batch)
{
    if (reply == NULL) {
        lua_pushnil(L);
        lua_pushstring(L, io_error ? io_error : "no reply");
        lua_pushliteral(L, "io");
        return 3;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        lua_pushnil(L);
        relay_lua_push_reply(L, reply, 1);
        lua_pushliteral(L, "reply");
        return 3;
    }
    if (!stream_batch || !relay_stream_batch_push(L, reply)) {
        relay_lua_push_reply(L, reply, 1);
    }
    return 1;
}


/* addr.tls (a table, possibly empty: {ca=, cert=, key=, servername=}) asks
 * for TLS. Its strings stay referenced by the address table. */
static void
read_tls(lua_State *L, int idx, relay_redis_addr *addr, relay_tls_options *tls)
{
    lua_getfield(L, idx, "tls");
    if (lua_istable(L, -1)) {
        memset(tls, 0, sizeof(*tls));
        lua_getfield(L, -1, "ca");
        tls->ca = lua_tostring(L, -1);
        lua_getfield(L, -2, "cert");
        tls->cert = lua_tostring(L, -1);
        lua_getfield(L, -3, "key");
        tls->key = lua_tostring(L, -1);
        lua_getfield(L, -4, "servername");
        tls->servername = lua_tostring(L, -1);
        lua_pop(L, 4);
        addr->tls = tls;
    }
    lua_pop(L, 1);
}


static void
read_addr(lua_State *L, int idx, relay_redis_addr *addr, relay_tls_options *tls)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    memset(addr, 0, sizeof(*addr));
    lua_getfield(L, idx, "path");
    addr->path = (char *)lua_tostring(L, -1);
    lua_getfield(L, idx, "host");
    addr->host = (char *)lua_tostring(L, -1);
    lua_getfield(L, idx, "port");
    addr->port = (int)lua_tointeger(L, -1);
    lua_getfield(L, idx, "user");
    addr->user = (char *)lua_tostring(L, -1);
    lua_getfield(L, idx, "password");
    addr->password = (char *)lua_tostring(L, -1);
    lua_getfield(L, idx, "db");
    addr->db = (int)lua_tointeger(L, -1);
    /* The strings stay referenced by the table at idx; callers copy them
     * before that table can be collected. */
    lua_pop(L, 6);
    if (addr->path == NULL && addr->host == NULL) {
        luaL_error(L, "redis address needs host or path");
    }
    read_tls(L, idx, addr, tls);
}


/* Pushes word i of the command (stack position first + i, or element i + 1
 * of the array at first). */
static void
push_word(lua_State *L, int first, int from_table, int i)
{
    if (from_table) {
        lua_rawgeti(L, first, i + 1);
    } else {
        lua_pushvalue(L, first + i);
    }
}


/* Collects the command words from stack positions first..top (or from the
 * array at position first when it is a table). Numbers that are integers are
 * written without an exponent; a stream batch stands for the ids of its
 * unmatched entries. */
static int
collect_argv(lua_State *L, int first, const char **argv, size_t *argvlen)
{
    int from_table = lua_istable(L, first);
    int n = from_table ? (int)lua_objlen(L, first) : lua_gettop(L) - first + 1;
    int out = 0;

    luaL_argcheck(L, n > 0 && n <= MAX_ARGS, first, "a command needs 1..4096 words");
    luaL_checkstack(L, n + 8, "too many redis command words");
    for (int i = 0; i < n; i++) {
        push_word(L, first, from_table, i);
        if (lua_type(L, -1) == LUA_TUSERDATA) {
            /* kept on the stack, and so alive, until the call ends */
            int ids = relay_stream_batch_ids(L, -1, argv + out, argvlen + out, MAX_ARGS - out);
            if (ids < 0) {
                return luaL_error(L, "redis command word %d: %s", i + 1,
                                  ids == -1 ? "a userdata other than a stream batch" : "too many ids");
            }
            out += ids;
            continue;
        }
        if (lua_type(L, -1) == LUA_TNUMBER) {
            lua_Number v = lua_tonumber(L, -1);
            if (v == floor(v) && fabs(v) < 9007199254740992.0) {
                char buf[32];
                snprintf(buf, sizeof(buf), "%.0f", v);
                lua_pop(L, 1);
                lua_pushstring(L, buf);
            }
        } else if (lua_type(L, -1) != LUA_TSTRING) {
            return luaL_error(L, "redis command word %d must be a string or number, got %s", i + 1,
                              luaL_typename(L, -1));
        }
        if (out == MAX_ARGS) {
            return luaL_error(L, "a command needs 1..4096 words");
        }
        /* Converted words are kept alive on the stack until the call ends. */
        argv[out] = lua_tolstring(L, -1, &argvlen[out]);
        out++;
    }
    return out;
}


static async_client *
check_async(lua_State *L)
{
    async_client *c = luaL_checkudata(L, 1, ASYNC_CLASS);

    if (c->conn == NULL) {
        luaL_error(L, "redis client is closed");
    }
    return c;
}


static void
call_answered(void *privdata, redisReply *reply, const char *error)
{
    pending_call *call = privdata;
    lua_State *mailbox = relay_wait_mailbox(call->token);

    if (call->client != NULL) {
        set_unreachable(call->client, reply == NULL, error);
    }
    if (mailbox != NULL) {
        /* Convert now: hiredis frees the reply when this callback returns. */
        push_result(mailbox, reply, error, call->stream_batch);
        relay_wait_complete(call->token, NULL, NULL);
    }
    free(call);
}


static void
call_abandoned(void *owner)
{
    pending_call *call = owner;

    relay_redis_cancel(call->req);
    free(call);
}


static int
async_call_with(lua_State *L, double timeout_s, int first_word)
{
    async_client *c = check_async(L);
    const char *argv[MAX_ARGS];
    size_t argvlen[MAX_ARGS];
    char err[512];
    int stream_batch = lua_touserdata(L, first_word) == &stream_batch_marker;
    int argc = collect_argv(L, first_word + stream_batch, argv, argvlen);
    pending_call *call = calloc(1, sizeof(*call));

    if (call == NULL) {
        return luaL_error(L, "out of memory");
    }
    call->client = c;
    call->stream_batch = stream_batch;
    call->req = relay_redis_command(c->conn, argc, argv, argvlen, timeout_s, call_answered, call, err, sizeof(err));
    if (call->req == NULL) {
        free(call);
        lua_pushnil(L);
        lua_pushstring(L, err);
        lua_pushliteral(L, "io");
        return 3;
    }
    call->token = relay_wait_begin(L, -1, call_abandoned, call);
    return relay_wait_yield(L);
}


/***
 * @function client:call(word, ...)
 * Sends one command and parks the task until its reply (10 s watchdog).
 * Words may also be given as one array table.
 * @return value | nil, err, kind ("reply" or "io")
 */
static int
lua_redis_async_call(lua_State *L)
{
    return async_call_with(L, DEFAULT_TIMEOUT_S, 2);
}


/***
 * @function client:call_timeout(seconds, word, ...)
 * Like call with an explicit watchdog (blocking reads: BLOCK + margin).
 */
static int
lua_redis_async_call_timeout(lua_State *L)
{
    double timeout_s = luaL_checknumber(L, 2);

    luaL_argcheck(L, timeout_s > 0, 2, "timeout must be positive");
    return async_call_with(L, timeout_s, 3);
}


static void
connect_state_changed(void *ud, int connected, const char *error)
{
    async_client *c = ud;

    if (connected || c->was_connected) {
        set_unreachable(c, !connected, error);
    }
    c->was_connected |= connected;
    if (!c->connect_waiting) {
        return;
    }
    c->connect_waiting = 0;
    if (connected) {
        lua_State *mailbox = relay_wait_mailbox(c->connect_token);
        if (mailbox != NULL) {
            lua_rawgeti(mailbox, LUA_REGISTRYINDEX, c->self_ref);
            relay_wait_complete(c->connect_token, NULL, NULL);
        }
    } else {
        /* The client is handed back too so that the caller closes it: it
         * cannot be freed here, inside a hiredis callback. */
        lua_State *mailbox = relay_wait_mailbox(c->connect_token);
        if (mailbox != NULL) {
            lua_pushnil(mailbox);
            lua_pushstring(mailbox, error ? error : "cannot connect");
            lua_rawgeti(mailbox, LUA_REGISTRYINDEX, c->self_ref);
            relay_wait_complete(c->connect_token, NULL, NULL);
        }
    }
    luaL_unref(relay_bridge_main_state(), LUA_REGISTRYINDEX, c->self_ref);
    c->self_ref = LUA_NOREF;
}


static void
connect_abandoned(void *owner)
{
    async_client *c = owner;
    relay_redis *conn = c->conn;

    /* Timed out: called from the bridge's timer, outside hiredis, so the
     * connection can go now rather than retry in the background. */
    c->connect_waiting = 0;
    c->conn = NULL;
    relay_redis_free(conn);
    luaL_unref(relay_bridge_main_state(), LUA_REGISTRYINDEX, c->self_ref);
    c->self_ref = LUA_NOREF;
}


/***
 * @function redis.connect(addr, timeout, max_reply_bytes)
 * Opens an async client and parks the task until the first handshake
 * succeeds or fails. addr = {host=, port=, path=, user=, password=, db=,
 * tls=} (tls: a table {ca=, cert=, key=, servername=}, any of them nil, for
 * TLS; see relay/tls.h).
 * Afterwards the client reconnects by itself with capped backoff.
 * max_reply_bytes (optional) caps what one reply may hold while it is read
 * (redis.reply_object_bytes per object on top of its bytes); a command
 * whose reply is larger fails with "reply too large …" and the connection
 * is reset.
 * @return client | nil, err[, client to close]
 */
static int
lua_redis_connect(lua_State *L)
{
    relay_redis_addr addr;
    relay_tls_options tls;
    double timeout_s = luaL_optnumber(L, 2, 5.0);
    lua_Number max_reply = luaL_optnumber(L, 3, 0);
    char err[512];
    async_client *c;

    read_addr(L, 1, &addr, &tls);
    c = lua_newuserdata(L, sizeof(*c));
    memset(c, 0, sizeof(*c));
    c->self_ref = LUA_NOREF;
    luaL_getmetatable(L, ASYNC_CLASS);
    lua_setmetatable(L, -2);
    luaL_argcheck(L, max_reply >= 0, 3, "must not be negative");
    c->conn = relay_redis_new(relay_bridge_loop(), &addr, connect_state_changed, c, err, sizeof(err));
    if (c->conn == NULL) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    relay_redis_limit_reply(c->conn, (size_t)max_reply);
    lua_pushvalue(L, -1);
    c->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    c->connect_waiting = 1;
    c->connect_token = relay_wait_begin(L, timeout_s, connect_abandoned, c);
    return relay_wait_yield(L);
}


/***
 * @function client:connected()
 */
static int
lua_redis_async_connected(lua_State *L)
{
    async_client *c = luaL_checkudata(L, 1, ASYNC_CLASS);

    lua_pushboolean(L, c->conn != NULL && relay_redis_is_connected(c->conn));
    return 1;
}


/***
 * @function client:info()
 * @return {address=, connected=, reconnects=, last_error=}
 */
static int
lua_redis_async_info(lua_State *L)
{
    async_client *c = check_async(L);

    lua_createtable(L, 0, 4);
    lua_pushstring(L, relay_redis_describe(c->conn));
    lua_setfield(L, -2, "address");
    lua_pushboolean(L, relay_redis_is_connected(c->conn));
    lua_setfield(L, -2, "connected");
    lua_pushnumber(L, (lua_Number)relay_redis_reconnect_count(c->conn));
    lua_setfield(L, -2, "reconnects");
    lua_pushstring(L, relay_redis_last_error(c->conn));
    lua_setfield(L, -2, "last_error");
    return 1;
}


/***
 * @function client:close()
 * Fails every pending command with "closed" and closes the connection.
 */
static int
lua_redis_async_close(lua_State *L)
{
    async_client *c = luaL_checkudata(L, 1, ASYNC_CLASS);

    if (c->conn != NULL) {
        relay_redis *conn = c->conn;
        c->conn = NULL;
        relay_redis_free(conn); /* answers its pending calls: "closed" */
    }
    set_unreachable(c, 0, NULL);
    return 0;
}


/***
 * @function redis.reachable()
 * Whether Redis is reachable as far as this process's async clients know:
 * false from an established connection's loss or a command's transport
 * failure until the client is connected again or a reply arrives.
 * @return true | false, the last transport error
 */
static int
lua_redis_reachable(lua_State *L)
{
    if (clients_unreachable == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    lua_pushstring(L, unreachable_error);
    return 2;
}


/***
 * @function redis.connect_blocking(addr, timeout)
 * A blocking client for short CLI commands; connect and every command are
 * bounded by timeout (default 5 s).
 * @return client | nil, err
 */
static int
lua_redis_connect_blocking(lua_State *L)
{
    relay_redis_addr addr;
    relay_tls_options tls;
    double timeout_s = luaL_optnumber(L, 2, 5.0);
    char err[768];
    sync_client *c;
    relay_redis_sync *conn;

    read_addr(L, 1, &addr, &tls);
    conn = relay_redis_connect_blocking(&addr, timeout_s, err, sizeof(err));
    if (conn == NULL) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    c = lua_newuserdata(L, sizeof(*c));
    c->conn = conn;
    relay_redis_addr_describe(&addr, c->where, sizeof(c->where));
    luaL_getmetatable(L, SYNC_CLASS);
    lua_setmetatable(L, -2);
    return 1;
}


/***
 * @function sync:call(word, ...)
 * @return value | nil, err, kind
 */
static int
lua_redis_sync_call(lua_State *L)
{
    sync_client *c = luaL_checkudata(L, 1, SYNC_CLASS);
    const char *argv[MAX_ARGS];
    size_t argvlen[MAX_ARGS];
    redisReply *reply;
    char err[768];
    int argc, nret;

    if (c->conn == NULL) {
        return luaL_error(L, "redis client is closed");
    }
    if (relay_redis_sync_error(c->conn) != NULL) {
        snprintf(err, sizeof(err), "redis connection to %s is broken: %s", c->where, relay_redis_sync_error(c->conn));
        return push_result(L, NULL, err, 0);
    }
    argc = collect_argv(L, 2, argv, argvlen);
    reply = relay_redis_sync_command(c->conn, argc, argv, argvlen);
    if (reply == NULL) {
        const char *why = relay_redis_sync_error(c->conn);
        snprintf(err, sizeof(err), "redis at %s: %s", c->where, why ? why : "no reply");
        return push_result(L, NULL, err, 0);
    }
    nret = push_result(L, reply, NULL, 0);
    freeReplyObject(reply);
    return nret;
}


/***
 * @function sync:close()
 */
static int
lua_redis_sync_close(lua_State *L)
{
    sync_client *c = luaL_checkudata(L, 1, SYNC_CLASS);

    if (c->conn != NULL) {
        relay_redis_sync_free(c->conn);
        c->conn = NULL;
    }
    return 0;
}


/***
 * @function tostring(client)
 * @return "relay.redis.async (<address>, connected|disconnected)", or "(closed)"
 */
static int
lua_redis_async_tostring(lua_State *L)
{
    async_client *c = luaL_checkudata(L, 1, ASYNC_CLASS);

    if (c->conn == NULL) {
        lua_pushliteral(L, ASYNC_CLASS " (closed)");
    } else {
        lua_pushfstring(L, ASYNC_CLASS " (%s, %s)", relay_redis_describe(c->conn),
                        relay_redis_is_connected(c->conn) ? "connected" : "disconnected");
    }
    return 1;
}


/***
 * @function tostring(sync)
 * @return "relay.redis.sync (<address>)", or "(closed)"
 */
static int
lua_redis_sync_tostring(lua_State *L)
{
    sync_client *c = luaL_checkudata(L, 1, SYNC_CLASS);

    if (c->conn == NULL) {
        lua_pushliteral(L, SYNC_CLASS " (closed)");
    } else {
        lua_pushfstring(L, SYNC_CLASS " (%s)", c->where);
    }
    return 1;
}


int
luaopen_relay_core_redis(lua_State *L)
{
    static const luaL_Reg async_methods[] = {
        {"call", lua_redis_async_call},           {"call_timeout", lua_redis_async_call_timeout},
        {"connected", lua_redis_async_connected}, {"info", lua_redis_async_info},
        {"close", lua_redis_async_close},         {"__gc", lua_redis_async_close},
        {"__tostring", lua_redis_async_tostring}, {NULL, NULL},
    };
    static const luaL_Reg sync_methods[] = {
        {"call", lua_redis_sync_call},
        {"close", lua_redis_sync_close},
        {"__gc", lua_redis_sync_close},
        {"__tostring", lua_redis_sync_tostring},
        {NULL, NULL},
    };
    static const luaL_Reg functions[] = {
        {"connect", lua_redis_connect},
        {"connect_blocking", lua_redis_connect_blocking},
        {"reachable", lua_redis_reachable},
        {NULL, NULL},
    };

    relay_lua_new_class(L, ASYNC_CLASS, async_methods);
    relay_lua_new_module(L, SYNC_CLASS, sync_methods, functions);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    lua_pushinteger(L, RELAY_REDIS_REPLY_OBJECT_BYTES);
    lua_setfield(L, -2, "reply_object_bytes");
    relay_stream_batch_register(L);
    lua_pushlightuserdata(L, (void *)&stream_batch_marker);
    lua_setfield(L, -2, "stream_batch");
    return 1;
}
