/*
 * relay.core.http: the metrics/health responder (src/http_server.c) for Lua.
 *
 * The Lua handler runs on the main state from a loop callback, never inside
 * a task: anything that would wait raises the bridge's "can only run inside
 * a relay task" error instead of parking. An error in the
 * handler is logged and answered with 500.
 */
#include <string.h>

#include "lua_bridge.h"
#include "lua_common.h"
#include "relay/http_server.h"
#include "relay/log.h"

#define SERVER_MT "relay.core.http.server"

typedef struct {
    relay_http_server *srv;
    int handler_ref;
    int top; /* main-state stack top to restore after the body was copied */
    int in_handler;
} lserver;


static void
call_handler(void *ud, const char *method, const char *path, relay_http_response *resp)
{
    lserver *ls = ud;
    lua_State *L = relay_bridge_main_state();

    ls->top = -1;
    if (L == NULL || relay_bridge_shutting_down() || ls->handler_ref == LUA_NOREF) {
        resp->status = 503;
        resp->body = "shutting down\n";
        resp->body_len = strlen(resp->body);
        return;
    }
    ls->top = lua_gettop(L);
    ls->in_handler = 1;
    lua_pushcfunction(L, relay_lua_traceback);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ls->handler_ref);
    lua_pushstring(L, method);
    lua_pushstring(L, path);
    if (lua_pcall(L, 2, 3, ls->top + 1) != 0) {
        relay_log_error("http handler for %s: %s", path, lua_tostring(L, -1));
        return; /* status stays 0: the server answers 500 */
    }
    resp->status = (int)lua_tointeger(L, -3);
    resp->content_type = lua_tostring(L, -2);
    resp->body = lua_tolstring(L, -1, &resp->body_len);
}


/* The body was copied: drop the handler's results from the main stack. */
static void
handler_done(void *ud)
{
    lserver *ls = ud;
    lua_State *L = relay_bridge_main_state();

    if (L != NULL && ls->top >= 0) {
        lua_settop(L, ls->top);
    }
    ls->in_handler = 0;
}


static lserver *
check_server(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, SERVER_MT);
}


/***
 * @function http.listen(host, port, handler)
 * Serves HTTP on host:port from the loop. handler(method, path) returns
 * status, content_type, body; it must not wait (it runs outside any task).
 * opts (4th, optional): max_request_bytes, timeout (s), max_connections.
 * @return server, or nil, err when the address cannot be bound
 */
static int
lua_http_listen(lua_State *L)
{
    const char *host = luaL_checkstring(L, 1);
    int port = (int)luaL_checkinteger(L, 2);
    relay_http_limits lim = {0, 0, 0};
    char err[256];
    lserver *ls;

    luaL_argcheck(L, port >= 0 && port <= 65535, 2, "port out of range");
    luaL_checktype(L, 3, LUA_TFUNCTION);
    if (lua_istable(L, 4)) {
        lua_getfield(L, 4, "max_request_bytes");
        lim.max_request_bytes = (size_t)luaL_optinteger(L, -1, 0);
        lua_getfield(L, 4, "timeout");
        lim.timeout_s = luaL_optnumber(L, -1, 0);
        lua_getfield(L, 4, "max_connections");
        lim.max_connections = (int)luaL_optinteger(L, -1, 0);
        lua_pop(L, 3);
    }
    ls = lua_newuserdata(L, sizeof(*ls));
    memset(ls, 0, sizeof(*ls));
    ls->handler_ref = LUA_NOREF;
    luaL_getmetatable(L, SERVER_MT);
    lua_setmetatable(L, -2);
    ls->srv =
        relay_http_listen(relay_bridge_loop(), host, port, &lim, call_handler, handler_done, ls, err, sizeof(err));
    if (ls->srv == NULL) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushvalue(L, 3);
    ls->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 1;
}


/***
 * @function server:port()
 * @return the bound port
 */
static int
lua_http_port(lua_State *L)
{
    lserver *ls = check_server(L, 1);

    luaL_argcheck(L, ls->srv != NULL, 1, "server is closed");
    lua_pushinteger(L, relay_http_port(ls->srv));
    return 1;
}


/***
 * @function server:connections()
 * @return connections open now
 */
static int
lua_http_connections(lua_State *L)
{
    lserver *ls = check_server(L, 1);

    lua_pushinteger(L, ls->srv != NULL ? relay_http_connections(ls->srv) : 0);
    return 1;
}


/***
 * @function tostring(server)
 * @return "relay.core.http.server (port N)", or "(closed)"
 */
static int
lua_http_tostring(lua_State *L)
{
    lserver *ls = check_server(L, 1);

    if (ls->srv == NULL) {
        lua_pushliteral(L, SERVER_MT " (closed)");
    } else {
        lua_pushfstring(L, SERVER_MT " (port %d)", relay_http_port(ls->srv));
    }
    return 1;
}


static void
server_close(lua_State *L, lserver *ls)
{
    if (ls->srv != NULL) {
        relay_http_close(ls->srv);
        ls->srv = NULL;
    }
    if (ls->handler_ref != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, ls->handler_ref);
        ls->handler_ref = LUA_NOREF;
    }
}


/***
 * @function server:close()
 * Stops listening and closes every connection. Idempotent.
 */
static int
lua_http_close(lua_State *L)
{
    lserver *ls = check_server(L, 1);

    if (ls->in_handler) {
        return luaL_error(L, "http server cannot be closed from its own handler");
    }
    server_close(L, ls);
    return 0;
}


static int
lua_http_gc(lua_State *L)
{
    lserver *ls = check_server(L, 1);

    /* The boot (lua_boot.c) closes the Lua state before main.c destroys
     * the loop, so the watchers can still be stopped and the server freed
     * here, also while shutting down. */
    if (!ls->in_handler) {
        server_close(L, ls);
    }
    return 0;
}


int
luaopen_relay_core_http(lua_State *L)
{
    static const luaL_Reg functions[] = {
        {"listen", lua_http_listen},
        {NULL, NULL},
    };
    static const luaL_Reg methods[] = {
        {"port", lua_http_port}, {"connections", lua_http_connections}, {"close", lua_http_close},
        {"__gc", lua_http_gc},   {"__tostring", lua_http_tostring},     {NULL, NULL},
    };

    relay_lua_new_module(L, SERVER_MT, methods, functions);
    return 1;
}
