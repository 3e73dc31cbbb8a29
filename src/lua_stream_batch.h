/*
 * A read of new stream entries kept as hiredis left it (relay.core.redis's
 * stream batch; lua_stream_batch.c): its unmatched entries are matched and
 * acknowledged without a Lua value per entry.
 */
#ifndef RELAY_LUA_STREAM_BATCH_H
#define RELAY_LUA_STREAM_BATCH_H

#include <hiredis/hiredis.h>
#include <lua.h>

#include "relay/matcher.h"

/* Registers the batch class (once, from luaopen_relay_core_redis). */
void relay_stream_batch_register(lua_State *L);

/* When reply is an XREADGROUP reply of one stream, pushes a batch that takes
 * the reply's entries array over (the rest of the reply stays with hiredis)
 * and returns 1; else pushes nothing and returns 0. */
int relay_stream_batch_push(lua_State *L, redisReply *reply);

/* When the value at idx is a batch, writes the ids of its unmatched entries
 * (see batch:match) to argv/argvlen, at most room of them, and returns how
 * many; -1 when it is not a batch, -2 when they do not fit. The pointers
 * stay valid while the batch is neither freed nor collected. */
int relay_stream_batch_ids(lua_State *L, int idx, const char **argv, size_t *argvlen, int room);

/* relay.core.redis's conversion of a reply to Lua values (lua_redis.c);
 * frees an array's elements as it converts them. */
void relay_lua_push_reply(lua_State *L, redisReply *reply, int top_level);

/* The matcher userdata at idx (lua_matcher.c); raises when it is not one. */
relay_matcher *relay_lua_check_matcher(lua_State *L, int idx);

#endif
