/*
 * Helpers shared by the binding files.
 */
#include "lua_common.h"


void
relay_lua_new_class(lua_State *L, const char *class_name, const luaL_Reg *methods)
{
    if (luaL_newmetatable(L, class_name)) {
        luaL_register(L, NULL, methods);
        lua_pushvalue(L, -1);
        lua_setfield(L, -2, "__index");
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
