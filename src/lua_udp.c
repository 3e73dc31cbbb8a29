/*
 * relay.core.udp: fire-and-forget UDP (src/udp.c) for the hook sandbox.
 */
#include <string.h>

#include "lua_bridge.h"
#include "lua_common.h"
#include "relay/udp.h"

#define UDP_MT "relay.core.udp.socket"

typedef struct {
    relay_udp *u;
} ludp;


static ludp *
check_udp(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, UDP_MT);
}


/***
 * @function udp.open(host, port, allow_names)
 * A connected non-blocking datagram socket. Without allow_names host must
 * be numeric (or "localhost"): resolving a name could block the loop.
 * @return socket, or nil, err
 */
static int
lua_udp_open(lua_State *L)
{
    const char *host = luaL_checkstring(L, 1);
    int port = (int)luaL_checkinteger(L, 2);
    int allow_names = lua_toboolean(L, 3);
    char err[256];
    ludp *s = lua_newuserdata(L, sizeof(*s));

    s->u = NULL;
    luaL_getmetatable(L, UDP_MT);
    lua_setmetatable(L, -2);
    s->u = relay_udp_open(host, port, allow_names, err, sizeof(err));
    if (s->u == NULL) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    return 1;
}


/***
 * @function sock:send(data)
 * Never blocks. @return true if sent, false if dropped (counted)
 */
static int
lua_udp_send(lua_State *L)
{
    ludp *s = check_udp(L, 1);
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);

    if (s->u == NULL) {
        return luaL_error(L, "udp socket is closed");
    }
    lua_pushboolean(L, relay_udp_send(s->u, data, len));
    return 1;
}


/***
 * @function sock:counts()
 * @return sent, dropped
 */
static int
lua_udp_counts(lua_State *L)
{
    ludp *s = check_udp(L, 1);
    uint64_t sent = 0, dropped = 0;

    if (s->u != NULL) {
        relay_udp_counts(s->u, &sent, &dropped);
    }
    lua_pushnumber(L, (lua_Number)sent);
    lua_pushnumber(L, (lua_Number)dropped);
    return 2;
}


/***
 * @function tostring(sock)
 * @return "relay.core.udp.socket (sent N, dropped N)", or "(closed)"
 */
static int
lua_udp_tostring(lua_State *L)
{
    ludp *s = check_udp(L, 1);
    uint64_t sent = 0, dropped = 0;

    if (s->u == NULL) {
        lua_pushliteral(L, UDP_MT " (closed)");
        return 1;
    }
    relay_udp_counts(s->u, &sent, &dropped);
    lua_pushfstring(L, UDP_MT " (sent %f, dropped %f)", (lua_Number)sent, (lua_Number)dropped);
    return 1;
}


/***
 * @function sock:close()
 */
static int
lua_udp_close(lua_State *L)
{
    ludp *s = check_udp(L, 1);

    relay_udp_close(s->u);
    s->u = NULL;
    return 0;
}


int
luaopen_relay_core_udp(lua_State *L)
{
    static const luaL_Reg functions[] = {
        {"open", lua_udp_open},
        {NULL, NULL},
    };
    static const luaL_Reg methods[] = {
        {"send", lua_udp_send},  {"counts", lua_udp_counts},       {"close", lua_udp_close},
        {"__gc", lua_udp_close}, {"__tostring", lua_udp_tostring}, {NULL, NULL},
    };

    relay_lua_new_module(L, UDP_MT, methods, functions);
    return 1;
}
