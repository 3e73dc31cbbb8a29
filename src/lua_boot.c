/*
 * The VM boot (see lua_boot.h): one LuaJIT state with the standard libraries,
 * the C modules as package.preload entries (loaded on first require), the Lua
 * tree first on package.path (served from the build's bytecode when it is
 * current, src/lua_bytecode.c), and relay.cli.main run as the main task of
 * the coroutine bridge.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lualib.h>

#include "lua_boot.h"
#include "lua_bridge.h"

/* EX_SOFTWARE: an error no command caught is a bug, not "not found" (1). */
#define EXIT_INTERNAL_ERROR 70

int luaopen_relay_core_loop(lua_State *L);
int luaopen_relay_core_log(lua_State *L);
int luaopen_relay_core_redis(lua_State *L);
int luaopen_relay_core_build(lua_State *L);
int luaopen_relay_core_matcher(lua_State *L);
int luaopen_relay_core_yaml(lua_State *L);
int luaopen_relay_core_proc(lua_State *L);
int luaopen_relay_core_http(lua_State *L);
int luaopen_relay_core_udp(lua_State *L);
int luaopen_relay_core_seccomp(lua_State *L);
int luaopen_relay_core_safefs(lua_State *L);
int luaopen_relay_core_notify(lua_State *L);
int luaopen_relay_core_heap(lua_State *L);
int luaopen_relay_core_map_ahead(lua_State *L);
/* relay.core.bytecode, and its loader first in package.loaders (lua_bytecode.c) */
void relay_bytecode_install(lua_State *L);

static const luaL_Reg CORE_MODULES[] = {
    {"relay.core.loop", luaopen_relay_core_loop},
    {"relay.core.log", luaopen_relay_core_log},
    {"relay.core.redis", luaopen_relay_core_redis},
    {"relay.core.build", luaopen_relay_core_build},
    {"relay.core.matcher", luaopen_relay_core_matcher},
    {"relay.core.yaml", luaopen_relay_core_yaml},
    {"relay.core.proc", luaopen_relay_core_proc},
    {"relay.core.http", luaopen_relay_core_http},
    {"relay.core.udp", luaopen_relay_core_udp},
    {"relay.core.seccomp", luaopen_relay_core_seccomp},
    {"relay.core.safefs", luaopen_relay_core_safefs},
    {"relay.core.notify", luaopen_relay_core_notify},
    /* for short-lived bulk commands only (relay match) */
    {"relay.core.heap", luaopen_relay_core_heap},
    {"relay.core.map_ahead", luaopen_relay_core_map_ahead},
    {NULL, NULL},
};


static int
file_exists(const char *path)
{
    return access(path, R_OK) == 0;
}


/* The installed tree sits beside the binary (<prefix>/bin/relay →
 * <prefix>/share/relay/lua); a binary in a build dir uses its source tree. */
static void
find_lua_dir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    char probe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            int len = snprintf(probe, sizeof(probe), "%s/../share/relay/lua", exe);
            if (len > 0 && (size_t)len < sizeof(probe) && (size_t)len < cap) {
                memcpy(out, probe, (size_t)len + 1);
                if (strlen(probe) + sizeof("/relay/cli.lua") < sizeof(probe)) {
                    strcat(probe, "/relay/cli.lua");
                    if (file_exists(probe)) {
                        return;
                    }
                }
            }
        }
    }
    snprintf(probe, sizeof(probe), "%s/relay/cli.lua", RELAY_SOURCE_LUA_DIR);
    snprintf(out, cap, "%s", file_exists(probe) ? RELAY_SOURCE_LUA_DIR : RELAY_INSTALL_LUA_DIR);
}


static void
set_package_path(lua_State *L, const char *lua_dir)
{
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", lua_dir, lua_dir, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 1);
    lua_pushstring(L, lua_dir);
    lua_setfield(L, -2, "relay_lua_dir");
    lua_pop(L, 1);
}


static void
register_core_modules(lua_State *L)
{
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    for (const luaL_Reg *m = CORE_MODULES; m->name != NULL; m++) {
        lua_pushcfunction(L, m->func);
        lua_setfield(L, -2, m->name);
    }
    lua_pop(L, 2);
}


static int
push_cli_main(lua_State *L, int argc, char **argv)
{
    lua_getglobal(L, "require");
    lua_pushliteral(L, "relay.cli");
    if (lua_pcall(L, 1, 1, 0) != 0) {
        fprintf(stderr, "relay: cannot load the Lua tree: %s\n", lua_tostring(L, -1));
        return -1;
    }
    lua_getfield(L, -1, "main");
    lua_remove(L, -2);
    lua_createtable(L, argc, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    return 0;
}


#if defined(__SANITIZE_ADDRESS__)
#define LEAKS_CHECKED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LEAKS_CHECKED 1
#endif
#endif

static int leave_state;


void
relay_boot_leave_state_at_exit(void)
{
#ifndef LEAKS_CHECKED
    leave_state = 1;
#endif
}


int
relay_boot_run(struct ev_loop *loop, int argc, char **argv)
{
    char lua_dir[PATH_MAX];
    lua_State *L;
    int exit_code = 0;

    L = luaL_newstate();
    if (L == NULL) {
        fprintf(stderr, "relay: cannot create the Lua state\n");
        return 2;
    }
    luaL_openlibs(L);
    find_lua_dir(lua_dir, sizeof(lua_dir));
    set_package_path(L, lua_dir);
    relay_bytecode_install(L);
    register_core_modules(L);
    relay_bridge_init(L, loop);

    if (push_cli_main(L, argc, argv) != 0) {
        exit_code = 2;
    } else if (relay_bridge_run_main(L, 1, &exit_code) != 0) {
        exit_code = EXIT_INTERNAL_ERROR;
    }

    fflush(stdout);
    /* Close Lua before the loop goes: __gc handlers may still stop watchers. */
    relay_bridge_shutdown();
    if (!leave_state) {
        lua_close(L);
    }
    return exit_code;
}
