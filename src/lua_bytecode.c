/*
 * relay.core.bytecode: loads Lua modules from precompiled LuaJIT bytecode
 * instead of parsing their source. Parsing the ~220 KB a command like
 * `relay app invoke` loads (argparse alone is 58 KB) costs ~3 ms of every
 * start; loading the same as bytecode ~0.1 ms.
 *
 * The build writes one file per module (scripts/compile_bytecode.lua):
 *
 *     RELAYBC1 <size> <mtime_s> <mtime_ns> <inode> <source path>\n<string.dump of the chunk>
 *
 * The loader, placed before the standard Lua file loader, finds the module's
 * source on package.path as require would (the first template whose file
 * exists: one stat, where package.searchpath opens and closes each file),
 * and uses the bytecode only when the header names that very file with its
 * current size, modification time and inode, and the bytecode file is owned
 * by the source's owner or root and writable by nobody else. Anything else
 * (a source edited since the build, a missing or foreign file, a LuaJIT
 * that rejects the dump) falls through to the source: a stale cache is
 * never run. Debug information is kept, so tracebacks name the source file
 * and line as before. A module with no Lua source that is a submodule of an
 * all-in-one C library (luaposix's posix.errno in posix.so) is loaded from
 * that library here, as the standard C loaders would load it, without
 * their failed opens of every template first.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lua_common.h"

#define BYTECODE_MAGIC "RELAYBC1 "
#define BYTECODE_MAX_SIZE (16 * 1024 * 1024)


/* "<size> <mtime_s> <mtime_ns> <inode>" of a source file. The inode
 * catches a file replaced by another (git checkout, editors that rename)
 * within one tick of the coarse file clock. */
static void
signature_of(const struct stat *st, char *out, size_t outlen)
{
    snprintf(out, outlen, "%lld %lld %ld %llu", (long long)st->st_size, (long long)st->st_mtim.tv_sec,
             (long)st->st_mtim.tv_nsec, (unsigned long long)st->st_ino);
}


/* The whole bytecode file, if it is trustworthy for a source owned by
 * `owner`; NULL otherwise. The caller frees it. */
static char *
read_bytecode_file(const char *path, uid_t owner, size_t *len)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd < 0) {
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != owner && st.st_uid != 0)
        || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || st.st_size <= 0 || st.st_size > BYTECODE_MAX_SIZE) {
        close(fd);
        return NULL;
    }
    buf = malloc((size_t)st.st_size);
    while (buf != NULL && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            free(buf);
            buf = NULL;
            break;
        }
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return buf;
}


/* The bytecode after a header that matches "RELAYBC1 <signature> <source>\n",
 * or NULL. */
static const char *
matching_body(const char *buf, size_t len, const char *signature, const char *source, size_t *body_len)
{
    size_t magic = strlen(BYTECODE_MAGIC), sig = strlen(signature), src = strlen(source);
    size_t header = magic + sig + 1 + src + 1;

    if (len <= header || memcmp(buf, BYTECODE_MAGIC, magic) != 0 || memcmp(buf + magic, signature, sig) != 0
        || buf[magic + sig] != ' ' || memcmp(buf + magic + sig + 1, source, src) != 0 || buf[header - 1] != '\n') {
        return NULL;
    }
    *body_len = len - header;
    return buf + header;
}


/* The first template of package[field] ("path" or "cpath") whose file
 * exists for name, as package.searchpath finds it but with one stat per
 * candidate instead of an fopen (the stat is needed for the signature
 * anyway). 0 with out and st filled, -1 when there is none. */
static int
find_file(lua_State *L, const char *field, const char *name, char *out, size_t outlen, struct stat *st)
{
    const char *templates, *t, *end;

    lua_getglobal(L, "package");
    lua_getfield(L, -1, field);
    templates = lua_tostring(L, -1);
    lua_pop(L, 2); /* package[field] stays referenced by package */
    for (t = templates; t != NULL && *t != '\0'; t = *end == ';' ? end + 1 : end) {
        size_t n = 0;
        end = strchr(t, ';');
        if (end == NULL) {
            end = t + strlen(t);
        }
        for (const char *c = t; c < end && n + 1 < outlen; c++) {
            if (*c != '?') {
                out[n++] = *c;
                continue;
            }
            for (const char *m = name; *m != '\0' && n + 1 < outlen; m++) {
                out[n++] = *m == '.' ? '/' : *m;
            }
        }
        out[n] = '\0';
        if (n > 0 && n + 1 < outlen && stat(out, st) == 0 && S_ISREG(st->st_mode)) {
            return 0;
        }
    }
    return -1;
}


/* A module with no Lua source: what the standard loaders after this one
 * would find last, a submodule of an all-in-one C library (posix.errno in
 * posix.so), loaded by package.loadlib as they would, unless a C library
 * of its own comes first. They would get there only after ~20 failed
 * opens per module (every Lua and C template), ~0.1 ms each here. Pushes
 * the loader's answer: the luaopen_ function, or "" to fall through. */
static int
load_from_c_root(lua_State *L, const char *name)
{
    char root[256], path[4096], symbol[300];
    const char *dot = strchr(name, '.');
    struct stat st;
    size_t n = dot != NULL ? (size_t)(dot - name) : 0;

    if (n == 0 || n >= sizeof root || find_file(L, "cpath", name, path, sizeof path, &st) == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    memcpy(root, name, n);
    root[n] = '\0';
    if (find_file(L, "cpath", root, path, sizeof path, &st) != 0
        || (size_t)snprintf(symbol, sizeof symbol, "luaopen_%s", name) >= sizeof symbol) {
        lua_pushliteral(L, "");
        return 1;
    }
    for (char *c = symbol; *c != '\0'; c++) {
        *c = *c == '.' ? '_' : *c;
    }
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loadlib");
    lua_pushstring(L, path);
    lua_pushstring(L, symbol);
    lua_call(L, 2, 1);
    if (!lua_isfunction(L, -1)) {
        lua_pushliteral(L, "");
    }
    return 1;
}


/* The loader: upvalue 1 is the bytecode directory. Returns the module's
 * chunk, or a message (as package.loaders do) so require tries the next. */
static int
bytecode_loader(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    const char *dir = lua_tostring(L, lua_upvalueindex(1));
    char signature[96], source[4096], path[4096], chunkname[4096 + 1];
    const char *body;
    struct stat st;
    size_t len = 0, body_len = 0;
    uid_t owner = 0;
    char *buf;
    int rc;

    if (strchr(name, '/') != NULL) {
        lua_pushliteral(L, "");
        return 1;
    }
    if (find_file(L, "path", name, source, sizeof source, &st) != 0) {
        return load_from_c_root(L, name);
    }
    if ((size_t)snprintf(path, sizeof path, "%s/%s.bc", dir, name) >= sizeof path) {
        lua_pushliteral(L, "");
        return 1;
    }
    owner = st.st_uid;
    signature_of(&st, signature, sizeof signature);
    buf = read_bytecode_file(path, owner, &len);
    body = buf != NULL ? matching_body(buf, len, signature, source, &body_len) : NULL;
    if (body == NULL) {
        free(buf);
        lua_pushliteral(L, "");
        return 1;
    }
    snprintf(chunkname, sizeof chunkname, "@%s", source);
    rc = luaL_loadbuffer(L, body, body_len, chunkname);
    free(buf);
    if (rc != 0) {
        lua_pop(L, 1);
        lua_pushliteral(L, "");
    }
    return 1;
}


/***
 * @function bytecode.loader(dir)
 * A package.loaders function serving modules from the bytecode files in dir.
 */
static int
lua_bytecode_loader(lua_State *L)
{
    luaL_checkstring(L, 1);
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, bytecode_loader, 1);
    return 1;
}


/***
 * @function bytecode.signature(path)
 * "<size> <mtime_s> <mtime_ns> <inode>" of a source file (the header's), or nil.
 */
static int
lua_bytecode_signature(lua_State *L)
{
    char signature[96];
    struct stat st;

    if (stat(luaL_checkstring(L, 1), &st) != 0 || !S_ISREG(st.st_mode)) {
        lua_pushnil(L);
        return 1;
    }
    signature_of(&st, signature, sizeof signature);
    lua_pushstring(L, signature);
    return 1;
}


static int
luaopen_relay_core_bytecode(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"loader", lua_bytecode_loader},
        {"signature", lua_bytecode_signature},
        {NULL, NULL},
    };

    lua_newtable(L);
    luaL_register(L, NULL, fns);
    lua_pushliteral(L, BYTECODE_MAGIC);
    lua_setfield(L, -2, "MAGIC");
#ifdef RELAY_BYTECODE_DIR
    lua_pushliteral(L, RELAY_BYTECODE_DIR);
    lua_setfield(L, -2, "dir");
#endif
    return 1;
}


/* Registers relay.core.bytecode in package.preload and, unless
 * RELAY_NO_BYTECODE is set or the build made no bytecode, puts its loader
 * before the Lua file loader. */
void
relay_bytecode_install(lua_State *L)
{
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, luaopen_relay_core_bytecode);
    lua_setfield(L, -2, "relay.core.bytecode");
    lua_pop(L, 2);
#ifdef RELAY_BYTECODE_DIR
    const char *off = getenv("RELAY_NO_BYTECODE");
    struct stat st;

    if ((off != NULL && off[0] != '\0') || stat(RELAY_BYTECODE_DIR, &st) != 0 || !S_ISDIR(st.st_mode)) {
        return;
    }
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaders");
    /* after package.preload (1), before the Lua file loader (2) */
    for (int i = (int)lua_objlen(L, -1); i >= 2; i--) {
        lua_rawgeti(L, -1, i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushliteral(L, RELAY_BYTECODE_DIR);
    lua_pushcclosure(L, bytecode_loader, 1);
    lua_rawseti(L, -2, 2);
    lua_pop(L, 2);
#endif
}
