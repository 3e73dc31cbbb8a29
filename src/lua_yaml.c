/*
 * Lua binding of yaml_doc: module "relay.core.yaml".
 *
 * A document becomes a tree of plain tables that keep order and marks:
 *   {kind="map",    line=, col=, keys={key nodes...}, values={value nodes...}}
 *   {kind="seq",    line=, col=, items={nodes...}}
 *   {kind="scalar", line=, col=, value=<core-schema value>, text=<raw>, quoted=<bool>}
 * A null scalar's value is yaml.null (a NULL lightuserdata, equal to cjson.null), since
 * nil cannot sit in a table.
 */
#include "relay/pattern_compile.h"
#include "relay/rule_block.h"
#include "relay/yaml_doc.h"

#include <lauxlib.h>
#include <lua.h>

#include <string.h>

#include "lua_rule_block.h"

#define TREE_GUARD "relay.core.yaml.tree"

int luaopen_relay_core_yaml(lua_State *L);


/* Stack slots (relative to tree_ctx.base) of the strings every node uses: pushed once
 * per load, so each field store is a pushvalue + rawset instead of hashing the name. */
enum {
    S_KIND,
    S_LINE,
    S_COL,
    S_VALUE,
    S_TEXT,
    S_QUOTED,
    S_KEYS,
    S_VALUES,
    S_ITEMS,
    S_SCALAR,
    S_MAP,
    S_SEQ,
    S_EVENT,
    S_HANDLER,
    S_HANDLER_LINE,
    S_HANDLER_COL,
    S_PATTERN_JSON,
    S_TIMEOUT,
    S_RETRIES,
    S_RULES,
    S_COUNT
};

static const char *const slot_names[S_COUNT] = {
    "kind", "line", "col",   "value",   "text",         "quoted",      "keys",         "values",  "items",   "scalar",
    "map",  "seq",  "event", "handler", "handler_line", "handler_col", "pattern_json", "timeout", "retries", "rules",
};

typedef struct {
    lua_State *L;
    int base; /* absolute index of slot_names[0] */
} tree_ctx;


static void
push_slots(lua_State *L, tree_ctx *t)
{
    int i;

    luaL_checkstack(L, S_COUNT + 8, "YAML document too deep");
    t->L = L;
    t->base = lua_gettop(L) + 1;
    for (i = 0; i < S_COUNT; i++) {
        lua_pushstring(L, slot_names[i]);
    }
}


/* t[slot] = value on top of the stack; the table sits just below it. */
static void
set_slot(const tree_ctx *t, int slot)
{
    lua_pushvalue(t->L, t->base + slot);
    lua_insert(t->L, -2);
    lua_rawset(t->L, -3);
}


/* Stack: map node, keys list, values list -> map node with both stored. */
static void
set_map_lists(const tree_ctx *t)
{
    lua_pushvalue(t->L, t->base + S_VALUES);
    lua_insert(t->L, -2);
    lua_rawset(t->L, -4);
    set_slot(t, S_KEYS);
}


static void
set_int_slot(const tree_ctx *t, int slot, int v)
{
    lua_pushvalue(t->L, t->base + slot);
    lua_pushinteger(t->L, v);
    lua_rawset(t->L, -3);
}


static void
set_mark(const tree_ctx *t, const relay_yaml_node *node, int kind_slot)
{
    lua_pushvalue(t->L, t->base + S_KIND);
    lua_pushvalue(t->L, t->base + kind_slot);
    lua_rawset(t->L, -3);
    set_int_slot(t, S_LINE, node->line);
    set_int_slot(t, S_COL, node->col);
}


static void
push_scalar_value(lua_State *L, const relay_yaml_node *node)
{
    relay_yaml_value v;

    relay_yaml_resolve(node, &v);
    switch (v.type) {
    case RELAY_YAML_NULL:
        lua_pushlightuserdata(L, NULL);
        break;
    case RELAY_YAML_BOOL:
        lua_pushboolean(L, v.boolean);
        break;
    case RELAY_YAML_INT:
    case RELAY_YAML_FLOAT:
        lua_pushnumber(L, v.number);
        break;
    case RELAY_YAML_STR:
        lua_pushlstring(L, node->text, node->len);
        break;
    }
}


static void
push_scalar(const tree_ctx *t, const relay_yaml_node *node)
{
    lua_State *L = t->L;

    lua_createtable(L, 0, 6);
    set_mark(t, node, S_SCALAR);
    lua_pushvalue(L, t->base + S_TEXT);
    lua_pushlstring(L, node->text, node->len);
    lua_rawset(L, -3);
    lua_pushvalue(L, t->base + S_VALUE);
    if (node->quoted || node->str_tag) {
        /* Always a string: the same interned text. */
        lua_pushvalue(L, t->base + S_TEXT);
        lua_rawget(L, -3);
    } else {
        push_scalar_value(L, node);
    }
    lua_rawset(L, -3);
    lua_pushvalue(L, t->base + S_QUOTED);
    lua_pushboolean(L, node->quoted);
    lua_rawset(L, -3);
}


/* Depth is bounded by RELAY_YAML_MAX_DEPTH, so recursion here is bounded too. */
static void
push_node(const tree_ctx *t, const relay_yaml_node *node)
{
    lua_State *L = t->L;
    size_t i;

    luaL_checkstack(L, 8, "YAML document too deep");
    if (node->kind == RELAY_YAML_SCALAR) {
        push_scalar(t, node);
        return;
    }
    if (node->kind == RELAY_YAML_SEQ) {
        lua_createtable(L, 0, 4);
        set_mark(t, node, S_SEQ);
        lua_createtable(L, (int)node->count, 0);
        for (i = 0; i < node->count; i++) {
            push_node(t, node->items[i]);
            lua_rawseti(L, -2, (int)i + 1);
        }
        set_slot(t, S_ITEMS);
        return;
    }
    lua_createtable(L, 0, 5);
    set_mark(t, node, S_MAP);
    lua_createtable(L, (int)node->count, 0);
    lua_createtable(L, (int)node->count, 0);
    for (i = 0; i < node->count; i++) {
        push_node(t, relay_yaml_map_key(node, i));
        lua_rawseti(L, -3, (int)i + 1);
        push_node(t, relay_yaml_map_value(node, i));
        lua_rawseti(L, -2, (int)i + 1);
    }
    set_map_lists(t);
}


/*
 * Precompiled event entries (yaml.load_app). The common entry is turned into its normal
 * form by pattern_compile (include/relay/pattern_compile.h), as lua/relay/pattern.lua
 * would, instead of into ~17 Lua tables. Anything it defers (every error, now()
 * operands, unusual shapes) is left to the Lua validator as a plain node, so messages
 * and results stay exactly those of pattern.lua; spec/unit/23-yaml_app_spec.lua checks
 * both paths agree.
 */


/* Push the compiled form of an events entry, or its plain node when the Lua validator
 * must look at it:
 *   {kind="event", line=, col=, handler=, handler_line=, handler_col=, pattern_json=,
 *    timeout=<node or nil>, retries=<node or nil>} */
static void
push_event_entry(const tree_ctx *t, const relay_yaml_node *entry, relay_pattern_buf *b)
{
    lua_State *L = t->L;
    relay_pattern_entry e;

    if (relay_pattern_compile_entry(entry, &e, b) != 0) {
        push_node(t, entry);
        return;
    }
    lua_createtable(L, 0, 7); /* timeout/retries are rare: let them grow the table */
    set_mark(t, entry, S_EVENT);
    lua_pushvalue(L, t->base + S_HANDLER);
    lua_pushlstring(L, e.handler->text, e.handler->len);
    lua_rawset(L, -3);
    set_int_slot(t, S_HANDLER_LINE, e.handler->line);
    set_int_slot(t, S_HANDLER_COL, e.handler->col);
    lua_pushvalue(L, t->base + S_PATTERN_JSON);
    lua_pushlstring(L, b->data, b->len);
    lua_rawset(L, -3);
    if (e.timeout != NULL) {
        push_node(t, e.timeout);
        set_slot(t, S_TIMEOUT);
    }
    if (e.retries != NULL) {
        push_node(t, e.retries);
        set_slot(t, S_RETRIES);
    }
}


/* Owns the C tree, the JSON buffer and a rule block not yet handed to Lua while Lua
 * tables are built: conversion may raise (out of memory), and then __gc frees them. */
typedef struct {
    relay_yaml_node *root;
    relay_pattern_buf buf;
    relay_rule_block rules;
} load_guard;


static void
guard_release(load_guard *g)
{
    relay_yaml_free(g->root);
    g->root = NULL;
    relay_pattern_buf_free(&g->buf);
    relay_rule_block_free(&g->rules);
}


/* The items of the events list, each through push_event_entry. */
static void
push_events(const tree_ctx *t, const relay_yaml_node *events, relay_pattern_buf *b)
{
    size_t j;

    lua_createtable(t->L, 0, 4);
    set_mark(t, events, S_SEQ);
    lua_createtable(t->L, (int)events->count, 0);
    for (j = 0; j < events->count; j++) {
        push_event_entry(t, events->items[j], b);
        lua_rawseti(t->L, -2, (int)j + 1);
    }
    set_slot(t, S_ITEMS);
}


/* The whole events list as one rule block when it qualifies (include/relay/
 * rule_block.h): {kind="rules", line=, col=, rules=<block>}; else as push_events. */
static void
push_events_bulk(const tree_ctx *t, const relay_yaml_node *events, load_guard *g)
{
    if (relay_rule_block_build(&g->rules, events, &g->buf) != 0) {
        push_events(t, events, &g->buf);
        return;
    }
    lua_createtable(t->L, 0, 4);
    set_mark(t, events, S_RULES);
    lua_pushvalue(t->L, t->base + S_RULES);
    relay_lua_push_rule_block(t->L, &g->rules);
    lua_rawset(t->L, -3);
}


/* The root of an app template: as push_node, but the events list goes through
 * push_events, or push_events_bulk for a bulk load. */
static void
push_app_root(const tree_ctx *t, const relay_yaml_node *root, load_guard *g, int bulk)
{
    lua_State *L = t->L;
    const relay_yaml_node *key, *value;
    size_t i;

    if (root->kind != RELAY_YAML_MAP) {
        push_node(t, root);
        return;
    }
    lua_createtable(L, 0, 5);
    set_mark(t, root, S_MAP);
    lua_createtable(L, (int)root->count, 0);
    lua_createtable(L, (int)root->count, 0);
    for (i = 0; i < root->count; i++) {
        key = relay_yaml_map_key(root, i);
        value = relay_yaml_map_value(root, i);
        push_node(t, key);
        lua_rawseti(L, -3, (int)i + 1);
        if (value->kind != RELAY_YAML_SEQ || key->len != 6 || memcmp(key->text, "events", 6) != 0) {
            push_node(t, value);
        } else if (bulk) {
            push_events_bulk(t, value, g);
        } else {
            push_events(t, value, &g->buf);
        }
        lua_rawseti(L, -2, (int)i + 1);
    }
    set_map_lists(t);
}


static void
push_empty_document(lua_State *L)
{
    lua_createtable(L, 0, 6);
    lua_pushliteral(L, "scalar");
    lua_setfield(L, -2, "kind");
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "line");
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "col");
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "value");
    lua_pushliteral(L, "");
    lua_setfield(L, -2, "text");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "quoted");
}


/* app: 0 a plain document, 1 an app template, 2 an app template for a bulk load. */
static int
load_common(lua_State *L, int app)
{
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    char err[RELAY_YAML_ERR_MAX];
    relay_yaml_node *root = NULL;
    load_guard *guard;
    tree_ctx t;

    if (relay_yaml_parse(text, len, &root, err, sizeof(err)) != 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    if (root == NULL) {
        push_empty_document(L);
        return 1;
    }
    guard = lua_newuserdata(L, sizeof(*guard));
    memset(guard, 0, sizeof(*guard));
    guard->root = root;
    luaL_getmetatable(L, TREE_GUARD);
    lua_setmetatable(L, -2);
    push_slots(L, &t);
    if (app) {
        push_app_root(&t, root, guard, app == 2);
    } else {
        push_node(&t, root);
    }
    guard_release(guard);
    lua_replace(L, t.base - 1);
    lua_settop(L, t.base - 1);
    return 1;
}


/***
 * @function yaml.load(text)
 * Parse one YAML document.
 * @param {string} text the YAML source
 * @return {table} the root node (an empty document is a null scalar at 1:1)
 * @return nil, "line:col: message" when the text is not acceptable YAML
 */
static int
lua_yaml_load(lua_State *L)
{
    return load_common(L, 0);
}


/***
 * @function yaml.load_app(text[, bulk])
 * As yaml.load, for an app template: each entry of the root map's events list that
 * is certainly valid comes back precompiled as
 * {kind="event", line, col, handler, handler_line, handler_col, pattern_json,
 * timeout=<node|nil>, retries=<node|nil>}; every other entry is a plain node.
 * @param {boolean} bulk for a bulk load (relay match): an events list that qualifies
 *   (include/relay/rule_block.h) comes back whole as {kind="rules", line, col,
 *   rules=<rule block: #rules, rules:handler(i), rules:pattern(i), rules:mark(i)>}
 */
static int
lua_yaml_load_app(lua_State *L)
{
    return load_common(L, lua_toboolean(L, 2) ? 2 : 1);
}


static int
lua_yaml_guard_gc(lua_State *L)
{
    load_guard *guard = luaL_checkudata(L, 1, TREE_GUARD);

    guard_release(guard);
    return 0;
}


/* The guard lives only while load() builds the tree; its name says so when a
 * traceback or a debugger shows it. */
static int
lua_yaml_guard_tostring(lua_State *L)
{
    load_guard *guard = luaL_checkudata(L, 1, TREE_GUARD);

    lua_pushstring(L, guard->root != NULL ? TREE_GUARD " (held)" : TREE_GUARD " (released)");
    return 1;
}


int
luaopen_relay_core_yaml(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"load", lua_yaml_load}, {"load_app", lua_yaml_load_app}, {NULL, NULL}};

    relay_lua_rule_block_register(L);
    luaL_newmetatable(L, TREE_GUARD);
    lua_pushcfunction(L, lua_yaml_guard_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, lua_yaml_guard_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_createtable(L, 0, 3);
    luaL_register(L, NULL, funcs);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    lua_pushinteger(L, RELAY_YAML_MAX_DEPTH);
    lua_setfield(L, -2, "MAX_DEPTH");
    return 1;
}
