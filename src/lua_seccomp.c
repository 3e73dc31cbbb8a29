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


/* The strings list() yields, in a userdata pushed on the stack (a Lua
 * error then leaks nothing). bound, when not 0, is at least their number:
 * one pass of list() instead of two (each resolves every name in
 * libseccomp). */
static const char **
collect_strings(lua_State *L, size_t (*list)(const char **, size_t, void *), void *ud, size_t bound, size_t *n)
{
    size_t cap = bound > 0 ? bound : list(NULL, 0, ud);
    const char **names = lua_newuserdata(L, (cap > 0 ? cap : 1) * sizeof(*names));

    *n = list(names, cap, ud);
    return names;
}


/* Pushes a sequence of the strings list() yields. */
static void
push_strings(lua_State *L, size_t (*list)(const char **, size_t, void *), void *ud, size_t bound)
{
    size_t n;
    const char **names = collect_strings(L, list, ud, bound, &n);

    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_remove(L, -2);
}


/* How many plain names kind has, known to libseccomp or not. */
static size_t
names_bound(relay_seccomp_kind kind)
{
    const relay_seccomp_profile *p = relay_seccomp_profile_get(kind);
    size_t n = 0;

    while (p->names[n] != NULL) {
        n++;
    }
    return n;
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
    push_strings(L, list_names, &kind, names_bound(kind));
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
        push_strings(L, list_arches, NULL, 0);
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


/* ---- the same profile as JSON text ---- */

/* A JSON string: the names here are identifiers, but escape what JSON needs. */
static void
add_json_string(luaL_Buffer *b, const char *s)
{
    char esc[8];

    luaL_addchar(b, '"');
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            luaL_addchar(b, '\\');
            luaL_addchar(b, (char)c);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            luaL_addstring(b, esc);
        } else {
            luaL_addchar(b, (char)c);
        }
    }
    luaL_addchar(b, '"');
}


/* "key": then a number as relay.runtime.json writes a Lua number (a
 * double): integral values below 2^53 in full, others as %.17g. */
static void
add_json_number(luaL_Buffer *b, const char *key, double v)
{
    char num[40];

    if (v == (double)(long long)v && v > -9007199254740992.0 && v < 9007199254740992.0) {
        snprintf(num, sizeof num, "%lld", (long long)v);
    } else {
        snprintf(num, sizeof num, "%.17g", v);
    }
    add_json_string(b, key);
    luaL_addchar(b, ':');
    luaL_addstring(b, num);
}


static void
add_json_action_value(luaL_Buffer *b, const char *key, relay_seccomp_action action)
{
    add_json_string(b, key);
    luaL_addchar(b, ':');
    add_json_string(b, action == RELAY_SECCOMP_ACT_ALLOW ? "SCMP_ACT_ALLOW" : "SCMP_ACT_ERRNO");
}


/* {"action":..,"args":[..],"errnoRet":N,"names":[name]}: keys sorted, as the
 * Lua encoder writes the table push_rule makes. */
static void
add_json_rule(luaL_Buffer *b, const relay_seccomp_rule *r)
{
    static const char *const ops[] = {
        [RELAY_SECCOMP_CMP_EQ] = "SCMP_CMP_EQ",
        [RELAY_SECCOMP_CMP_GT] = "SCMP_CMP_GT",
        [RELAY_SECCOMP_CMP_MASKED_EQ] = "SCMP_CMP_MASKED_EQ",
    };

    luaL_addchar(b, '{');
    add_json_action_value(b, "action", r->action);
    if (r->has_arg) {
        luaL_addstring(b, ",\"args\":[{");
        add_json_number(b, "index", r->arg_index);
        luaL_addchar(b, ',');
        add_json_string(b, "op");
        luaL_addchar(b, ':');
        add_json_string(b, ops[r->op]);
        luaL_addchar(b, ',');
        add_json_number(b, "value", (double)r->value);
        if (r->op == RELAY_SECCOMP_CMP_MASKED_EQ) {
            luaL_addchar(b, ',');
            add_json_number(b, "valueTwo", (double)r->value_two);
        }
        luaL_addstring(b, "}]");
    }
    if (r->action != RELAY_SECCOMP_ACT_ALLOW) {
        luaL_addchar(b, ',');
        add_json_number(b, "errnoRet", r->errno_ret);
    }
    luaL_addstring(b, ",\"names\":[");
    add_json_string(b, r->name);
    luaL_addstring(b, "]}");
}


static void
add_json_strings(luaL_Buffer *b, const char **names, size_t n)
{
    luaL_addchar(b, '[');
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            luaL_addchar(b, ',');
        }
        add_json_string(b, names[i]);
    }
    luaL_addchar(b, ']');
}


/***
 * @function seccomp.profile_json([kind])
 * The text relay.runtime.json makes of seccomp.profile(kind), without the
 * ~0.5 ms a fresh process spends encoding the table.
 */
static int
lua_seccomp_profile_json(lua_State *L)
{
    relay_seccomp_kind kind = check_kind(L, 1);
    const relay_seccomp_profile *p = relay_seccomp_profile_get(kind);
    size_t n_arches, n_names;
    const char **arches = collect_strings(L, list_arches, NULL, 0, &n_arches);
    const char **names = collect_strings(L, list_names, &kind, names_bound(kind), &n_names);
    luaL_Buffer b;

    luaL_buffinit(L, &b);
    luaL_addchar(&b, '{');
    if (n_arches > 0) {
        add_json_string(&b, "architectures");
        luaL_addchar(&b, ':');
        add_json_strings(&b, arches, n_arches);
        luaL_addchar(&b, ',');
    }
    add_json_action_value(&b, "defaultAction", p->default_action);
    if (p->default_action != RELAY_SECCOMP_ACT_ALLOW) {
        luaL_addchar(&b, ',');
        add_json_number(&b, "defaultErrnoRet", p->default_errno);
    }
    luaL_addstring(&b, ",\"syscalls\":[{");
    add_json_action_value(&b, "action", p->names_action);
    if (p->names_action != RELAY_SECCOMP_ACT_ALLOW) {
        luaL_addchar(&b, ',');
        add_json_number(&b, "errnoRet", p->names_errno);
    }
    luaL_addstring(&b, ",\"names\":");
    add_json_strings(&b, names, n_names);
    luaL_addchar(&b, '}');
    for (size_t i = 0; i < p->nrules; i++) {
        if (relay_seccomp_name_known(p->rules[i].name)) {
            luaL_addchar(&b, ',');
            add_json_rule(&b, &p->rules[i]);
        }
    }
    luaL_addstring(&b, "]}");
    luaL_pushresult(&b);
    return 1;
}


int
luaopen_relay_core_seccomp(lua_State *L)
{
    static const luaL_Reg functions[] = {
        {"profile", lua_seccomp_profile},
        {"profile_json", lua_seccomp_profile_json},
        {"write_bpf", lua_seccomp_write_bpf},
        {NULL, NULL},
    };

    lua_newtable(L);
    luaL_register(L, NULL, functions);
    return 1;
}
