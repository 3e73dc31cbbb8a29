/*
 * The Lua face of a rule block (include/relay/rule_block.h; lua_rule_block.c):
 * yaml.load_app hands one out for an app's events list on a bulk load, and the
 * matcher's add_rules reads the patterns from it.
 */
#ifndef RELAY_LUA_RULE_BLOCK_H
#define RELAY_LUA_RULE_BLOCK_H

#include <lua.h>

#include "relay/rule_block.h"

/* Registers the block class (once, from luaopen_relay_core_yaml). */
void relay_lua_rule_block_register(lua_State *L);

/* Pushes a new block userdata holding the memory of *block, which it takes
 * over (*block is zeroed). When it raises (out of memory), *block is still
 * the caller's. */
void relay_lua_push_rule_block(lua_State *L, relay_rule_block *block);

/* The block at idx; raises when the value is not one. */
const relay_rule_block *relay_lua_check_rule_block(lua_State *L, int idx);

#endif
