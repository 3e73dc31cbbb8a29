/*
 * The Lua face of a file mapped ahead of its scan (include/relay/map_ahead.h;
 * lua_map_ahead.c): `relay match` starts one before it loads the rules and
 * passes it to the matcher's scan as opts.ahead.
 */
#ifndef RELAY_LUA_MAP_AHEAD_H
#define RELAY_LUA_MAP_AHEAD_H

#include <lua.h>

#include "relay/map_ahead.h"

/* The mapping of the handle at idx (NULL once closed); raises when the value
 * is not a handle. */
relay_map_ahead *relay_lua_check_map_ahead(lua_State *L, int idx);

#endif
