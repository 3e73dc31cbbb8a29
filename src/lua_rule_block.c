/* A rule block as a Lua value (src/lua_rule_block.h):
 *   #block                   the number of rules
 *   block:handler(i)         rule i's handler name (1-based)
 *   block:pattern(i)         rule i's pattern in normal form (JSON)
 *   block:mark(i)            line, col of rule i's entry in its template
 */
#include "lua_rule_block.h"

#include "lua_common.h"

#include <lauxlib.h>

#include <string.h>

#define RULE_BLOCK_CLASS "relay.core.yaml.rules"


const relay_rule_block *
relay_lua_check_rule_block(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, RULE_BLOCK_CLASS);
}


/* The 0-based rule for argument 2, a 1-based index. */
static size_t
check_rule(lua_State *L, const relay_rule_block **block)
{
    lua_Number i;

    *block = relay_lua_check_rule_block(L, 1);
    i = luaL_checknumber(L, 2);
    luaL_argcheck(L, i >= 1 && i <= (lua_Number)(*block)->count && i == (lua_Number)(size_t)i, 2, "no such rule");
    return (size_t)i - 1;
}


/* Rule i's handler name (json = 0) or pattern (json = 1). */
static int
push_rule_text(lua_State *L, int json)
{
    const relay_rule_block *block;
    size_t i = check_rule(L, &block);
    const relay_rule_block_entry *e = &block->entries[i];

    lua_pushlstring(L, block->text + (json ? e->json_off : e->handler_off), json ? e->json_len : e->handler_len);
    return 1;
}


static int
block_handler(lua_State *L)
{
    return push_rule_text(L, 0);
}


static int
block_pattern(lua_State *L)
{
    return push_rule_text(L, 1);
}


static int
block_mark(lua_State *L)
{
    const relay_rule_block *block;
    size_t i = check_rule(L, &block);

    lua_pushinteger(L, block->entries[i].line);
    lua_pushinteger(L, block->entries[i].col);
    return 2;
}


static int
block_len(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)relay_lua_check_rule_block(L, 1)->count);
    return 1;
}


static int
block_gc(lua_State *L)
{
    relay_rule_block_free(luaL_checkudata(L, 1, RULE_BLOCK_CLASS));
    return 0;
}


static int
block_tostring(lua_State *L)
{
    size_t n = relay_lua_check_rule_block(L, 1)->count;

    lua_pushfstring(L, RULE_BLOCK_CLASS " (%d rule%s)", (int)n, n == 1 ? "" : "s");
    return 1;
}


void
relay_lua_rule_block_register(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"handler", block_handler}, {"pattern", block_pattern},     {"mark", block_mark}, {"__len", block_len},
        {"__gc", block_gc},         {"__tostring", block_tostring}, {NULL, NULL}};

    relay_lua_new_class(L, RULE_BLOCK_CLASS, methods);
}


void
relay_lua_push_rule_block(lua_State *L, relay_rule_block *block)
{
    relay_rule_block *held;

    /* lua_newuserdata can raise (out of memory): the take-over comes after it, so
     * a raise leaves the block with its owner. */
    luaL_getmetatable(L, RULE_BLOCK_CLASS);
    held = lua_newuserdata(L, sizeof(*held));
    lua_insert(L, -2);
    lua_setmetatable(L, -2);
    *held = *block;
    memset(block, 0, sizeof(*block));
}
