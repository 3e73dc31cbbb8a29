/*
 * Helpers shared by the binding files (src/lua_*.c).
 */
#ifndef RELAY_LUA_COMMON_H
#define RELAY_LUA_COMMON_H

#include <lauxlib.h>
#include <lua.h>

/* Registers the class `class_name` once: its metatable holds methods (and
 * metamethods such as __gc and __tostring) and is its own __index. A class
 * without a __tostring gets one naming the class and the object's address.
 * Leaves the stack as is. */
void relay_lua_new_class(lua_State *L, const char *class_name, const luaL_Reg *methods);

/* relay_lua_new_class, then pushes a new module table holding functions. */
void relay_lua_new_module(lua_State *L, const char *class_name, const luaL_Reg *methods, const luaL_Reg *functions);

/* A lua_pcall message handler: the error message plus a traceback, for
 * every call into Lua from C (callbacks run on the main state). */
int relay_lua_traceback(lua_State *L);

/* The bindings' result convention: pushes true when rc is 0, else nil and
 * err. Returns the number of values pushed, for `return`. */
int relay_lua_push_status(lua_State *L, int rc, const char *err);

#endif
