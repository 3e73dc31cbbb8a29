/*
 * relay.core.log: the Lua face of the log sink (src/log.c).
 */
#include <stdlib.h>

#include "lua_bridge.h"
#include "lua_common.h"
#include "relay/log.h"

static const char *const LEVEL_NAMES[] = {"debug", "info", "warn", "error", NULL};


/***
 * @function log.configure(level, json)
 * @param level "debug"|"info"|"warn"|"error"
 * @param json boolean: one JSON object per line
 */
static int
lua_log_configure(lua_State *L)
{
    int level = luaL_checkoption(L, 1, NULL, LEVEL_NAMES);

    relay_log_configure((relay_log_level)level, lua_toboolean(L, 2));
    return 0;
}


/***
 * @function log.enabled(level)
 * @return whether records of that level are written
 */
static int
lua_log_enabled(lua_State *L)
{
    lua_pushboolean(L, relay_log_enabled((relay_log_level)luaL_checkoption(L, 1, NULL, LEVEL_NAMES)));
    return 1;
}


/***
 * @function log.write(level, msg, rendered_fields)
 * Writes one record; rendered_fields is already in the current format.
 */
static int
write_with(lua_State *L, void (*writer)(relay_log_level, const char *, size_t, const char *, size_t))
{
    int level = luaL_checkoption(L, 1, NULL, LEVEL_NAMES);
    size_t msg_len, fields_len = 0;
    const char *msg = luaL_checklstring(L, 2, &msg_len);
    const char *fields = luaL_optlstring(L, 3, NULL, &fields_len);

    writer((relay_log_level)level, msg, msg_len, fields, fields_len);
    return 0;
}


static int
lua_log_write(lua_State *L)
{
    return write_with(L, relay_log_write);
}


/***
 * @function log.write_output(level, msg, rendered_fields)
 * write for a line of handler output: it may fill only part of the
 * asynchronous sink's buffer, so that Relay's own records still fit.
 */
static int
lua_log_write_output(lua_State *L)
{
    return write_with(L, relay_log_write_output);
}


/***
 * @function log.start_async(buffer_bytes)
 * From now on records are queued (at most buffer_bytes) and written by the
 * sink's own thread; what does not fit is dropped and counted.
 * @return true | nil, err
 */
static int
lua_log_start_async(lua_State *L)
{
    lua_Number bytes = luaL_checknumber(L, 1);

    luaL_argcheck(L, bytes >= 4096, 1, "needs at least 4096 bytes");
    return relay_lua_push_status(L, relay_log_start_async((size_t)bytes), "cannot start the log writer");
}


/***
 * @function log.flush(timeout_s)
 * Waits up to timeout_s (default 2) for the queued records to be written.
 */
static int
lua_log_flush(lua_State *L)
{
    relay_log_flush(luaL_optnumber(L, 1, RELAY_LOG_EXIT_FLUSH_S));
    return 0;
}


/***
 * @function log.dropped()
 * @return records, bytes dropped since the start
 */
static int
lua_log_dropped(lua_State *L)
{
    unsigned long long records, bytes;

    relay_log_dropped(&records, &bytes);
    lua_pushnumber(L, (lua_Number)records);
    lua_pushnumber(L, (lua_Number)bytes);
    return 2;
}


/***
 * @function log.raw_line(prefix, line)
 * Writes prefix .. line .. "\n" with one write (handler output, text mode).
 */
static int
lua_log_raw_line(lua_State *L)
{
    size_t prefix_len, line_len;
    const char *prefix = luaL_checklstring(L, 1, &prefix_len);
    const char *line = luaL_checklstring(L, 2, &line_len);

    relay_log_raw_line(prefix, prefix_len, line, line_len);
    return 0;
}


/***
 * @function log.json_quote(s)
 * @return s as a JSON string literal; invalid UTF-8 becomes U+FFFD
 */
static int
lua_log_json_quote(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    size_t need = relay_json_quote(s, len, NULL, 0);
    char *out = malloc(need);

    if (out == NULL) {
        return luaL_error(L, "out of memory");
    }
    relay_json_quote(s, len, out, need);
    lua_pushlstring(L, out, need);
    free(out);
    return 1;
}


/***
 * @function log.is_json()
 */
static int
lua_log_is_json(lua_State *L)
{
    lua_pushboolean(L, relay_log_json());
    return 1;
}


int
luaopen_relay_core_log(lua_State *L)
{
    static const luaL_Reg functions[] = {
        {"configure", lua_log_configure},
        {"enabled", lua_log_enabled},
        {"write", lua_log_write},
        {"write_output", lua_log_write_output},
        {"start_async", lua_log_start_async},
        {"flush", lua_log_flush},
        {"dropped", lua_log_dropped},
        {"raw_line", lua_log_raw_line},
        {"json_quote", lua_log_json_quote},
        {"is_json", lua_log_is_json},
        {NULL, NULL},
    };

    lua_newtable(L);
    luaL_register(L, NULL, functions);
    return 1;
}
