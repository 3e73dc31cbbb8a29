/*
 * relay.core.build: what this binary was built with (relay version).
 */
#include <stdio.h>

#include <hiredis/hiredis.h>
#include <luajit.h>
#include <yaml.h>

#include "lua_bridge.h"


static void
set_string(lua_State *L, const char *key, const char *value)
{
    lua_pushstring(L, value);
    lua_setfield(L, -2, key);
}


int
luaopen_relay_core_build(lua_State *L)
{
    char buf[64];

    lua_newtable(L);
    set_string(L, "version", RELAY_VERSION);
    set_string(L, "luajit", LUAJIT_VERSION);
    snprintf(buf, sizeof(buf), "%d.%d.%d", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    set_string(L, "hiredis", buf);
    snprintf(buf, sizeof(buf), "%d.%d", ev_version_major(), ev_version_minor());
    set_string(L, "libev", buf);
    set_string(L, "libyaml", yaml_get_version_string());
#ifdef RELAY_TEST_CONSTANTS
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    lua_setfield(L, -2, "test_constants");
#if defined(__SANITIZE_ADDRESS__)
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    lua_setfield(L, -2, "sanitized");
    return 1;
}
