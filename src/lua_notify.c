/*
 * relay.core.notify: the service manager's readiness protocol (src/notify.c).
 * The environment is read once, when the module is first required, and the
 * variables are removed then, so children started afterwards never see them.
 */
#include <stdio.h>

#include "lua_common.h"
#include "relay/notify.h"

static relay_notify_target target;
static char open_err[256];


/***
 * @function notify.send(state)
 * One datagram ("READY=1", "STOPPING=1\nSTATUS=draining", ...); a no-op
 * without NOTIFY_SOCKET. Never blocks.
 * @return true, or nil, err
 */
static int
lua_notify_send(lua_State *L)
{
    const char *state = luaL_checkstring(L, 1);
    char err[256];

    return relay_lua_push_status(L, relay_notify_send(&target, state, err, sizeof(err)), err);
}


/***
 * The module table: send(state), plus what the environment said when it
 * was loaded: enabled (a socket to notify), watchdog_usec (a number, or nil
 * when no watchdog watches this process), error (why a variable was
 * unusable, or nil).
 */
int
luaopen_relay_core_notify(lua_State *L)
{
    static const luaL_Reg functions[] = {
        {"send", lua_notify_send},
        {NULL, NULL},
    };

    open_err[0] = '\0';
    if (relay_notify_from_env(&target, 1, open_err, sizeof(open_err)) != 0 && open_err[0] == '\0') {
        snprintf(open_err, sizeof(open_err), "unusable notify variables");
    }
    lua_newtable(L);
    luaL_register(L, NULL, functions);
    lua_pushboolean(L, target.addr_len != 0);
    lua_setfield(L, -2, "enabled");
    if (target.watchdog_usec > 0) {
        lua_pushnumber(L, (lua_Number)target.watchdog_usec);
        lua_setfield(L, -2, "watchdog_usec");
    }
    if (open_err[0] != '\0') {
        lua_pushstring(L, open_err);
        lua_setfield(L, -2, "error");
    }
    return 1;
}
