/*
 * Helpers shared by the binding files.
 */
#include "lua_common.h"


/* "<class name> (0x...)": the class name is the closure's upvalue. */
static int
default_tostring(lua_State *L)
{
    lua_pushfstring(L, "%s (%p)", lua_tostring(L, lua_upvalueindex(1)), lua_touserdata(L, 1));
    return 1;
}


void
relay_lua_new_class(lua_State *L, const char *class_name, const luaL_Reg *methods)
{
    if (luaL_newmetatable(L, class_name)) {
        luaL_register(L, NULL, methods);
        lua_pushvalue(L, -1);
        lua_setfield(L, -2, "__index");
        lua_getfield(L, -1, "__tostring");
        if (lua_isnil(L, -1)) {
            lua_pushstring(L, class_name);
            lua_pushcclosure(L, default_tostring, 1);
            lua_setfield(L, -3, "__tostring");
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}


void
relay_lua_new_module(lua_State *L, const char *class_name, const luaL_Reg *methods, const luaL_Reg *functions)
{
    relay_lua_new_class(L, class_name, methods);
    lua_newtable(L);
    luaL_register(L, NULL, functions);
}


int
relay_lua_traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);

    luaL_traceback(L, L, msg != NULL ? msg : "(error object is not a string)", 1);
    return 1;
}


int
relay_lua_push_status(lua_State *L, int rc, const char *err)
{
    if (rc != 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}
