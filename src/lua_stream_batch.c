/*
 * relay.core.redis's stream batch: a read of new entries
 * (client:call_timeout(t, redis.stream_batch, "XREADGROUP", …)) kept as
 * the hiredis reply of its entries. On the daemon's unmatched path an entry
 * became three Lua strings and two tables, was measured, matched and put in
 * a message table in Lua, and its id went back to C for the XACK: most of
 * the path's CPU. Here one call matches every entry whose fields are just
 * its event, and the XACK takes the ids of the unmatched ones straight from
 * the reply; every other entry (more fields, too large, matched, malformed)
 * is handed to Lua as before, through batch:entry(i).
 *
 *   batch:count()                 entries
 *   batch:last_id()               the last entry's id
 *   batch:match(matcher, max_event_bytes, now_ms, object_bytes, entry_limit)
 *       -> unmatched, largest, bytes, rest
 *     unmatched: entries taken as unmatched here (acknowledged by passing the
 *     batch as a command word); largest / bytes: the largest entry cost and
 *     the sum of them (relay.classify.measure's cost); rest: an array of the
 *     1-based indices of the other entries. Matching again forgets the last.
 *   batch:entry(i)                { id, fields } as relay.core.redis converts
 *                                 them; the entry's C copy is freed
 *   batch:entries()               every entry so (the whole reply's old form)
 *   batch:free()                  frees the reply now (else the collector does)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lua_common.h"
#include "lua_stream_batch.h"
#include "relay/redis_client.h"

#define BATCH_CLASS "relay.redis.stream_batch"

typedef struct {
    redisReply *entries; /* the reply's entries array; NULL once freed */
    size_t n;
    unsigned char unmatched[]; /* per entry: taken as unmatched by batch:match */
} stream_batch;


static stream_batch *
check_batch(lua_State *L, int idx)
{
    stream_batch *b = luaL_checkudata(L, idx, BATCH_CLASS);

    if (b->entries == NULL) {
        luaL_error(L, "stream batch already freed");
    }
    return b;
}


/* [stream name, entries] inside a one-element array: an XREADGROUP reply
 * of one stream that brought entries. */
static redisReply *
entries_of(redisReply *reply)
{
    redisReply *stream;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY || reply->elements != 1) {
        return NULL;
    }
    stream = reply->element[0];
    if (stream == NULL || stream->type != REDIS_REPLY_ARRAY || stream->elements != 2 || stream->element[1] == NULL
        || stream->element[1]->type != REDIS_REPLY_ARRAY || stream->element[1]->elements == 0) {
        return NULL;
    }
    return stream->element[1];
}


int
relay_stream_batch_push(lua_State *L, redisReply *reply)
{
    redisReply *entries = entries_of(reply);
    stream_batch *b;

    if (entries == NULL) {
        return 0;
    }
    b = lua_newuserdata(L, sizeof(*b) + entries->elements);
    b->entries = entries;
    b->n = entries->elements;
    memset(b->unmatched, 0, b->n);
    /* The batch owns the entries from now on: hiredis frees the rest
     * (relay_redis_free_reply skips NULL). */
    reply->element[0]->element[1] = NULL;
    luaL_getmetatable(L, BATCH_CLASS);
    lua_setmetatable(L, -2);
    return 1;
}


/* Entry i when it is [id, fields] with a string id, else NULL (a freed
 * entry too). */
static redisReply *
entry_at(const stream_batch *b, size_t i)
{
    redisReply *e = b->entries->element[i];

    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0] == NULL
        || e->element[0]->type != REDIS_REPLY_STRING) {
        return NULL;
    }
    return e;
}


/* relay.classify.measure's cost of an entry's fields (their bytes plus one
 * object each, and three for the entry's arrays and id); 0 when it has no
 * field list. *event_only: the fields are exactly "event" and its value. */
static size_t
cost_of(const redisReply *fields, size_t object_bytes, int *event_only)
{
    size_t bytes = 0;

    *event_only = 0;
    if (fields == NULL || fields->type != REDIS_REPLY_ARRAY) {
        return 0;
    }
    for (size_t i = 0; i < fields->elements; i++) {
        if (fields->element[i]->type != REDIS_REPLY_STRING) {
            return bytes + (fields->elements + 3) * object_bytes;
        }
        bytes += fields->element[i]->len;
    }
    *event_only =
        fields->elements == 2 && fields->element[0]->len == 5 && memcmp(fields->element[0]->str, "event", 5) == 0;
    return bytes + (fields->elements + 3) * object_bytes;
}


typedef struct {
    relay_matcher *matcher;
    size_t max_bytes, object_bytes, entry_limit;
    int64_t now_ms;
} match_args;


/* Whether entry e is an unmatched event: fields of just its event, no
 * larger than the limits relay.classify.too_large holds it to, matching no
 * rule and not malformed. *cost: its cost (0 without a field list). */
static int
unmatched_entry(const match_args *a, const redisReply *e, size_t *cost)
{
    const redisReply *fields = e ? e->element[1] : NULL;
    const redisReply *event;
    uint32_t id;
    char reason[256];
    int event_only;

    *cost = cost_of(fields, a->object_bytes, &event_only);
    if (!event_only) {
        return 0;
    }
    event = fields->element[1];
    if (event->len > a->max_bytes || *cost > a->entry_limit) {
        return 0;
    }
    return relay_matcher_match(a->matcher, event->str, event->len, a->max_bytes, a->now_ms, &id, 1, reason,
                               sizeof(reason))
           == 0;
}


static int
batch_match(lua_State *L)
{
    stream_batch *b = check_batch(L, 1);
    match_args a = {relay_lua_check_matcher(L, 2), (size_t)luaL_checknumber(L, 3), (size_t)luaL_checknumber(L, 5),
                    (size_t)luaL_checknumber(L, 6), (int64_t)luaL_checknumber(L, 4)};
    size_t unmatched = 0, largest = 0, bytes = 0, cost;
    int rest = 0;

    lua_createtable(L, 0, 0);
    for (size_t i = 0; i < b->n; i++) {
        redisReply *e = entry_at(b, i);

        b->unmatched[i] = (unsigned char)unmatched_entry(&a, e, &cost);
        unmatched += b->unmatched[i];
        largest = cost > largest ? cost : largest;
        bytes += cost;
        if (!b->unmatched[i] && b->entries->element[i] != NULL) {
            lua_pushinteger(L, (lua_Integer)i + 1);
            lua_rawseti(L, -2, ++rest);
        }
    }
    lua_pushnumber(L, (lua_Number)unmatched);
    lua_pushnumber(L, (lua_Number)largest);
    lua_pushnumber(L, (lua_Number)bytes);
    lua_pushvalue(L, -4);
    return 4;
}


/* Pushes entry i (0-based) as relay.core.redis converts it and frees its C
 * copy: a large event is never held twice. */
static void
push_entry(lua_State *L, stream_batch *b, size_t i)
{
    redisReply *e = b->entries->element[i];

    if (e == NULL) {
        lua_pushnil(L);
        return;
    }
    relay_lua_push_reply(L, e, 0);
    relay_redis_free_reply(e);
    b->entries->element[i] = NULL;
    b->unmatched[i] = 0;
}


static int
batch_entry(lua_State *L)
{
    stream_batch *b = check_batch(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);

    luaL_argcheck(L, i >= 1 && (size_t)i <= b->n, 2, "no such entry");
    push_entry(L, b, (size_t)i - 1);
    return 1;
}


static int
batch_entries(lua_State *L)
{
    stream_batch *b = check_batch(L, 1);

    lua_createtable(L, (int)b->n, 0);
    for (size_t i = 0; i < b->n; i++) {
        push_entry(L, b, i);
        lua_rawseti(L, -2, (int)i + 1);
    }
    return 1;
}


static int
batch_count(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)check_batch(L, 1)->n);
    return 1;
}


static int
batch_last_id(lua_State *L)
{
    stream_batch *b = check_batch(L, 1);
    redisReply *e = entry_at(b, b->n - 1);

    if (e == NULL) {
        lua_pushnil(L);
    } else {
        lua_pushlstring(L, e->element[0]->str, e->element[0]->len);
    }
    return 1;
}


static int
batch_free(lua_State *L)
{
    stream_batch *b = luaL_checkudata(L, 1, BATCH_CLASS);

    if (b->entries != NULL) {
        relay_redis_free_reply(b->entries);
        b->entries = NULL;
    }
    return 0;
}


int
relay_stream_batch_ids(lua_State *L, int idx, const char **argv, size_t *argvlen, int room)
{
    stream_batch *b = lua_touserdata(L, idx);
    int n = 0, same;

    if (b == NULL || !lua_getmetatable(L, idx)) {
        return -1;
    }
    luaL_getmetatable(L, BATCH_CLASS);
    same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    if (!same || b->entries == NULL) {
        return -1;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (b->unmatched[i]) {
            if (n == room) {
                return -2;
            }
            argv[n] = b->entries->element[i]->element[0]->str;
            argvlen[n++] = b->entries->element[i]->element[0]->len;
        }
    }
    return n;
}


static const luaL_Reg methods[] = {
    {"match", batch_match},     {"entry", batch_entry}, {"entries", batch_entries}, {"count", batch_count},
    {"last_id", batch_last_id}, {"free", batch_free},   {"__gc", batch_free},       {NULL, NULL},
};


void
relay_stream_batch_register(lua_State *L)
{
    relay_lua_new_class(L, BATCH_CLASS, methods);
}
