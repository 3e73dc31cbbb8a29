/*
 * relay.core.seccomp: the default seccomp policy (src/seccomp_policy.c) as an
 * OCI `linux.seccomp` table for runc, and as a BPF file for bwrap --seccomp.
 *
 * Every list in the returned table is a non-empty sequence, which
 * relay.runtime.json encodes as a JSON array without json.array().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "lua_common.h"
#include "relay/seccomp_policy.h"


static relay_seccomp_kind
check_kind(lua_State *L, int idx)
{
    const char *text = luaL_optstring(L, idx, "allowlist");
    relay_seccomp_kind kind = RELAY_SECCOMP_ALLOWLIST;

    if (relay_seccomp_kind_parse(text, &kind) != 0) {
        luaL_argerror(L, idx, "expected \"allowlist\" or \"denylist\"");
    }
    return kind;
}


/* Sets t[action_key] and, for ERRNO, t[errno_key] on the table on top. */
static void
set_action(lua_State *L, relay_seccomp_action action, int errno_ret, const char *action_key, const char *errno_key)
{
    if (action == RELAY_SECCOMP_ACT_ALLOW) {
        lua_pushliteral(L, "SCMP_ACT_ALLOW");
        lua_setfield(L, -2, action_key);
        return;
    }
    lua_pushliteral(L, "SCMP_ACT_ERRNO");
    lua_setfield(L, -2, action_key);
    lua_pushinteger(L, errno_ret);
    lua_setfield(L, -2, errno_key);
}


/* Pushes a sequence of the strings list() yields. The scratch array is a
 * userdata so that a Lua allocation error cannot leak it. */
static void
push_strings(lua_State *L, size_t (*list)(const char **, size_t, void *), void *ud)
{
    size_t n = list(NULL, 0, ud);
    const char **names = lua_newuserdata(L, (n > 0 ? n : 1) * sizeof(*names));

    list(names, n, ud);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_remove(L, -2);
}


static size_t
list_names(const char **out, size_t cap, void *ud)
{
    return relay_seccomp_names(*(relay_seccomp_kind *)ud, out, cap);
}


static size_t
list_arches(const char **out, size_t cap, void *ud)
{
    (void)ud;
    return relay_seccomp_architectures(out, cap);
}


/* {names = {name}, action = ..., args = {{index, value, valueTwo, op}}} */
static void
push_rule(lua_State *L, const relay_seccomp_rule *r)
{
    static const char *const ops[] = {
        [RELAY_SECCOMP_CMP_EQ] = "SCMP_CMP_EQ",
        [RELAY_SECCOMP_CMP_GT] = "SCMP_CMP_GT",
        [RELAY_SECCOMP_CMP_MASKED_EQ] = "SCMP_CMP_MASKED_EQ",
    };

    lua_createtable(L, 0, 4);
    lua_createtable(L, 1, 0);
    lua_pushstring(L, r->name);
    lua_rawseti(L, -2, 1);
    lua_setfield(L, -2, "names");
    set_action(L, r->action, r->errno_ret, "action", "errnoRet");
    if (!r->has_arg) {
        return;
    }
    lua_createtable(L, 1, 0);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)r->arg_index);
    lua_setfield(L, -2, "index");
    lua_pushnumber(L, (lua_Number)r->value);
    lua_setfield(L, -2, "value");
    if (r->op == RELAY_SECCOMP_CMP_MASKED_EQ) {
        lua_pushnumber(L, (lua_Number)r->value_two);
        lua_setfield(L, -2, "valueTwo");
    }
    lua_pushstring(L, ops[r->op]);
    lua_setfield(L, -2, "op");
    lua_rawseti(L, -2, 1);
    lua_setfield(L, -2, "args");
}


/* syscalls: the plain names as one entry, then one entry per rule. */
static void
push_syscalls(lua_State *L, relay_seccomp_kind kind)
{
    const relay_seccomp_profile *p = relay_seccomp_profile_get(kind);
    int n = 0;

    lua_createtable(L, (int)p->nrules + 1, 0);
    lua_createtable(L, 0, 3);
    push_strings(L, list_names, &kind);
    lua_setfield(L, -2, "names");
    set_action(L, p->names_action, p->names_errno, "action", "errnoRet");
    lua_rawseti(L, -2, ++n);
    for (size_t i = 0; i < p->nrules; i++) {
        if (relay_seccomp_name_known(p->rules[i].name)) {
            push_rule(L, &p->rules[i]);
            lua_rawseti(L, -2, ++n);
        }
    }
}


/***
 * @function seccomp.profile([kind])
 * kind is "allowlist" (the default) or "denylist".
 * @return the OCI runtime-spec linux.seccomp object, as a fresh table
 */
static int
lua_seccomp_profile(lua_State *L)
{
    relay_seccomp_kind kind = check_kind(L, 1);
    const relay_seccomp_profile *p = relay_seccomp_profile_get(kind);

    lua_createtable(L, 0, 4);
    set_action(L, p->default_action, p->default_errno, "defaultAction", "defaultErrnoRet");
    if (relay_seccomp_architectures(NULL, 0) > 0) {
        /* absent means the native one; an empty table would encode as {} */
        push_strings(L, list_arches, NULL);
        lua_setfield(L, -2, "architectures");
    }
    push_syscalls(L, kind);
    lua_setfield(L, -2, "syscalls");
    return 1;
}


/***
 * @function seccomp.write_bpf(path[, kind])
 * Compiles the profile to classic BPF for bwrap --seccomp FD into a new file
 * (mode 0600; an existing path, symlink or not, is an error).
 * @return true, or nil, err
 */
static int
lua_seccomp_write_bpf(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    relay_seccomp_kind kind = check_kind(L, 2);
    char err[256];
    int fd, rc, closed;

    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot create %s: %s", path, strerror(errno));
        return 2;
    }
    rc = relay_seccomp_write_bpf_kind(kind, fd, err, sizeof(err));
    closed = close(fd);
    if (rc == 0 && closed != 0) {
        snprintf(err, sizeof(err), "cannot write %s: %s", path, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        /* A truncated program must not be found and loaded by a later run. */
        unlink(path);
    }
    return relay_lua_push_status(L, rc, err);
}


int
luaopen_relay_core_seccomp(lua_State *L)
{
    static const luaL_Reg functions[] = {
        {"profile", lua_seccomp_profile},
        {"write_bpf", lua_seccomp_write_bpf},
        {NULL, NULL},
    };

    lua_newtable(L);
    luaL_register(L, NULL, functions);
    return 1;
}
