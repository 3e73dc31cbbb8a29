/*
 * relay.core.map_ahead: a file mapped and faulted in on a helper thread
 * while the command loads its rules (include/relay/map_ahead.h). For the
 * short-lived `relay match` only.
 */
#include "lua_map_ahead.h"

#include "lua_boot.h"
#include "lua_common.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>

#define MAP_AHEAD_MT "relay.map_ahead"


relay_map_ahead *
relay_lua_check_map_ahead(lua_State *L, int idx)
{
    relay_map_ahead **box = luaL_checkudata(L, idx, MAP_AHEAD_MT);

    return *box;
}


/***
 * @function map_ahead.start(file)
 * Map the open regular file `file` and start faulting it in; hand the
 * result to m:scan as opts.ahead.
 * @return a handle, or nil when the file is not worth it (not a regular
 *   file, under 8 MiB, read faster than mapped here, not in the page cache)
 *   or cannot be mapped: the scan then does as without.
 */
static int
l_start(lua_State *L)
{
    FILE **file = luaL_checkudata(L, 1, LUA_FILEHANDLE);
    relay_map_ahead **box;

    if (*file == NULL) {
        return luaL_argerror(L, 1, "attempt to use a closed file");
    }
    box = lua_newuserdata(L, sizeof(*box));
    *box = NULL;
    luaL_getmetatable(L, MAP_AHEAD_MT);
    lua_setmetatable(L, -2);
    if ((*box = relay_map_ahead_start(fileno(*file), 1)) == NULL) {
        lua_pushnil(L);
    }
    return 1;
}


/*** @function h:close()
 * Stop the helper and unmap what the scan did not take over (also on
 * collection). */
static int
l_close(lua_State *L)
{
    relay_map_ahead **box = luaL_checkudata(L, 1, MAP_AHEAD_MT);

    relay_map_ahead_free(*box);
    *box = NULL;
    return 0;
}


static const luaL_Reg methods[] = {
    {"close", l_close},
    {"__gc", l_close},
    {NULL, NULL},
};

static const luaL_Reg functions[] = {
    {"start", l_start},
    {NULL, NULL},
};


int
luaopen_relay_core_map_ahead(lua_State *L)
{
    relay_lua_new_module(L, MAP_AHEAD_MT, methods, functions);
    return 1;
}
