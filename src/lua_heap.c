/*
 * relay.core.heap: heap set-up for short-lived bulk commands (src/heap_reserve.c).
 */
#include "lua_boot.h"
#include "lua_common.h"
#include "relay/heap_reserve.h"


/***
 * @function heap.reserve(bytes)
 * Grows the C heap by `bytes` at once, pre-populated, and keeps it: for a
 * command about to build a large structure and exit, never for the daemon.
 * @return the bytes populated (0: not possible here; nothing changed for the worse)
 */
static int
lua_heap_reserve(lua_State *L)
{
    lua_Number bytes = luaL_checknumber(L, 1);

    /* the C side caps far lower: this only keeps the conversion defined */
    if (!(bytes > 0)) {
        bytes = 0;
    } else if (bytes > 1e12) {
        bytes = 1e12;
    }
    lua_pushnumber(L, (lua_Number)relay_heap_reserve((size_t)bytes));
    return 1;
}


/***
 * @function heap.leave_at_exit()
 * The Lua state is not closed when the command returns: the process's end
 * gives back everything it holds at once (src/lua_boot.h).
 */
static int
lua_heap_leave_at_exit(lua_State *L)
{
    (void)L;
    relay_boot_leave_state_at_exit();
    return 0;
}


int
luaopen_relay_core_heap(lua_State *L)
{
    static const luaL_Reg functions[] = {
        {"reserve", lua_heap_reserve},
        {"leave_at_exit", lua_heap_leave_at_exit},
        {NULL, NULL},
    };

    lua_newtable(L);
    luaL_register(L, NULL, functions);
    return 1;
}
