/*
 * relay.core.safefs: filesystem changes that never follow a symlink
 * (src/safe_fs.c), for preparing rootfs and bundle directories as root.
 * Every function returns true (or a value), or nil, err.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lua_common.h"
#include "relay/safe_fs.h"


/***
 * @function safefs.mkdir_beneath(root, rel, mode)
 * Creates root/rel (and parents) without following symlinks; sets mode.
 */
static int
lua_safefs_mkdir_beneath(lua_State *L)
{
    char err[512];
    int rc = relay_safe_mkdir(luaL_checkstring(L, 1), luaL_checkstring(L, 2), (mode_t)luaL_checkinteger(L, 3), err,
                              sizeof(err));

    return relay_lua_push_status(L, rc, err);
}


/***
 * @function safefs.touch_beneath(root, rel, mode)
 * Creates the empty regular file root/rel if missing, never via a symlink.
 */
static int
lua_safefs_touch_beneath(lua_State *L)
{
    char err[512];
    int rc = relay_safe_touch(luaL_checkstring(L, 1), luaL_checkstring(L, 2), (mode_t)luaL_checkinteger(L, 3), err,
                              sizeof(err));

    return relay_lua_push_status(L, rc, err);
}


/***
 * @function safefs.write_new(path, data, mode)
 * Writes a file that must not exist yet (never through a symlink).
 */
static int
lua_safefs_write_new(lua_State *L)
{
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);
    char err[512];
    int rc = relay_safe_write_new(luaL_checkstring(L, 1), data, len, (mode_t)luaL_checkinteger(L, 3), err, sizeof(err));

    return relay_lua_push_status(L, rc, err);
}


/***
 * @function safefs.private_dir(path, mode)
 * A directory owned by this user with exactly mode (created if missing).
 */
static int
lua_safefs_private_dir(lua_State *L)
{
    char err[512];
    int rc = relay_safe_private_dir(luaL_checkstring(L, 1), (mode_t)luaL_checkinteger(L, 2), err, sizeof(err));

    return relay_lua_push_status(L, rc, err);
}


/***
 * @function safefs.open_path(root [, rel])
 * @return an O_PATH fd (close-on-exec) of root/rel, or nil, err
 */
static int
lua_safefs_open_path(lua_State *L)
{
    char err[512];
    int fd = relay_safe_open_path(luaL_checkstring(L, 1), luaL_optstring(L, 2, NULL), err, sizeof(err));

    if (fd < 0) {
        return relay_lua_push_status(L, -1, err);
    }
    lua_pushinteger(L, fd);
    return 1;
}


/***
 * @function safefs.open_read(path)
 * @return a read-only fd (close-on-exec, never through a final symlink), or nil, err
 */
static int
lua_safefs_open_read(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_pushinteger(L, fd);
    return 1;
}


/***
 * @function safefs.close(fd)
 */
static int
lua_safefs_close(lua_State *L)
{
    close((int)luaL_checkinteger(L, 1));
    return 0;
}


/***
 * @function safefs.lstat(path)
 * @return { type = "file"|"dir"|"link"|"other", uid, gid, mode }, or nil, err
 */
static int
lua_safefs_lstat(lua_State *L)
{
    struct stat st;
    const char *path = luaL_checkstring(L, 1);
    const char *type = "other";

    if (lstat(path, &st) != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    if (S_ISREG(st.st_mode)) {
        type = "file";
    } else if (S_ISDIR(st.st_mode)) {
        type = "dir";
    } else if (S_ISLNK(st.st_mode)) {
        type = "link";
    }
    lua_createtable(L, 0, 4);
    lua_pushstring(L, type);
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, (lua_Integer)st.st_uid);
    lua_setfield(L, -2, "uid");
    lua_pushinteger(L, (lua_Integer)st.st_gid);
    lua_setfield(L, -2, "gid");
    lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
    lua_setfield(L, -2, "mode");
    return 1;
}


static const luaL_Reg SAFEFS_FUNCTIONS[] = {
    {"mkdir_beneath", lua_safefs_mkdir_beneath},
    {"touch_beneath", lua_safefs_touch_beneath},
    {"write_new", lua_safefs_write_new},
    {"private_dir", lua_safefs_private_dir},
    {"open_path", lua_safefs_open_path},
    {"open_read", lua_safefs_open_read},
    {"close", lua_safefs_close},
    {"lstat", lua_safefs_lstat},
    {NULL, NULL},
};


int
luaopen_relay_core_safefs(lua_State *L)
{
    lua_newtable(L);
    luaL_register(L, NULL, SAFEFS_FUNCTIONS);
    return 1;
}
