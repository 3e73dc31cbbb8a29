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
#include "relay/yaml_doc.h"

#include <lauxlib.h>
#include <lua.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TREE_GUARD "relay.core.yaml.tree"

int luaopen_relay_core_yaml(lua_State *L);


/* Stack slots (relative to tree_ctx.base) of the strings every node uses: pushed once
 * per load, so each field store is a pushvalue + rawset instead of hashing the name. */
enum {
    S_KIND, S_LINE, S_COL, S_VALUE, S_TEXT, S_QUOTED, S_KEYS, S_VALUES, S_ITEMS,
    S_SCALAR, S_MAP, S_SEQ, S_EVENT, S_HANDLER, S_HANDLER_LINE, S_HANDLER_COL,
    S_PATTERN_JSON, S_TIMEOUT, S_RETRIES, S_COUNT
};

static const char *const slot_names[S_COUNT] = {
    "kind", "line", "col", "value", "text", "quoted", "keys", "values", "items",
    "scalar", "map", "seq", "event", "handler", "handler_line", "handler_col",
    "pattern_json", "timeout", "retries",
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
 * Precompiled event entries (yaml.load_app). The common entry -- a map of handler,
 * pattern and optionally timeout/retries, whose handler is a valid name and whose
 * pattern only uses plain literals, prefix/suffix strings, exists booleans, numeric
 * comparisons and nested groups -- is turned into its normal form here, as
 * lua/relay/pattern.lua would, instead of into ~17 Lua tables. Anything else (every
 * error, now() operands, unusual shapes) is left to the Lua validator as a plain node,
 * so messages and results stay exactly those of pattern.lua; spec/unit/23-yaml_app_spec.lua
 * checks both paths agree.
 */
typedef struct {
    char *data;
    size_t len, cap;
} jbuf;

#define FAST_MAX_FIELDS 32

static const char *const fast_operators[] = {"prefix", "suffix", "exists", "gt", "gte", "lt", "lte", NULL};
static const char *const fast_foreign[] = {"numeric", "anything-but", "wildcard", "equals-ignore-case",
                                           "cidr", "$or", NULL};
static const char *const fast_event_keys[] = {"handler", "pattern", "timeout", "retries", NULL};


static int
jb_put(jbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 256;
        char *d;
        while (b->len + n + 1 > ncap) {
            ncap *= 2;
        }
        if ((d = realloc(b->data, ncap)) == NULL) {
            return -1;
        }
        b->data = d;
        b->cap = ncap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}


#define JB_LIT(b, s) jb_put((b), (s), sizeof(s) - 1)


/* As yaml.json_string: '"', '\\' and control bytes (0x00-0x1f, 0x7f) escaped. */
static int
jb_string(jbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t i, run = 0;
    char esc[6];

    if (JB_LIT(b, "\"") != 0) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        size_t elen = 2;
        if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f) {
            continue;
        }
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        default:
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            e = esc;
            elen = 6;
        }
        if (jb_put(b, s + run, i - run) != 0 || jb_put(b, e, elen) != 0) {
            return -1;
        }
        run = i + 1;
    }
    if (jb_put(b, s + run, n - run) != 0) {
        return -1;
    }
    return JB_LIT(b, "\"");
}


/* As yaml.json_number; -1 for NaN and infinities (the Lua path reports those). */
static int
jb_number(jbuf *b, double n)
{
    static const char *const fmts[] = {"%.15g", "%.16g", "%.17g"};
    char text[40];
    int i, len = 0;

    if (n != n || isinf(n)) {
        return -1;
    }
    if (n == floor(n) && n > -9007199254740992.0 && n < 9007199254740992.0) {
        len = snprintf(text, sizeof(text), "%lld", (long long)n);
        return jb_put(b, text, (size_t)len);
    }
    for (i = 0; i < 3; i++) {
        len = snprintf(text, sizeof(text), fmts[i], n);
        if (i == 2 || strtod(text, NULL) == n) {
            break;
        }
    }
    return jb_put(b, text, (size_t)len);
}


static int
is_word(const relay_yaml_node *node, const char *const *words)
{
    for (; *words != NULL; words++) {
        if (strlen(*words) == node->len && memcmp(node->text, *words, node->len) == 0) {
            return 1;
        }
    }
    return 0;
}


static int fast_group(jbuf *b, const relay_yaml_node *map);


/* A one-key map whose value is a scalar: an operator alternative (pattern.lua
 * operator_alternative), numbers only for the comparisons. */
static int
fast_operator(jbuf *b, const relay_yaml_node *key, const relay_yaml_node *value)
{
    relay_yaml_value v;

    relay_yaml_resolve(value, &v);
    if (key->text[0] == 'p' || key->text[0] == 's') {
        if (v.type != RELAY_YAML_STR) {
            return -1;
        }
        return jb_put(b, "{\"", 2) || jb_put(b, key->text, key->len) || jb_put(b, "\":", 2)
               || jb_string(b, value->text, value->len) || JB_LIT(b, "}");
    }
    if (key->text[0] == 'e') {
        if (v.type != RELAY_YAML_BOOL) {
            return -1;
        }
        return v.boolean ? JB_LIT(b, "{\"exists\":true}") : JB_LIT(b, "{\"exists\":false}");
    }
    if (v.type != RELAY_YAML_INT && v.type != RELAY_YAML_FLOAT) {
        return -1;
    }
    return jb_put(b, "{\"", 2) || jb_put(b, key->text, key->len) || jb_put(b, "\":", 2)
           || jb_number(b, v.number) || JB_LIT(b, "}");
}


/* A map inside a field's list (pattern.lua map_alternative), valid cases only. */
static int
fast_map_alternative(jbuf *b, const relay_yaml_node *map)
{
    const relay_yaml_node *key, *value;
    size_t i;

    if (map->count == 0) {
        return -1;
    }
    for (i = 0; i < map->count; i++) {
        if (is_word(relay_yaml_map_key(map, i), fast_operators) && map->count > 1) {
            return -1;
        }
    }
    key = relay_yaml_map_key(map, 0);
    value = relay_yaml_map_value(map, 0);
    if (map->count == 1 && is_word(key, fast_operators)) {
        if (value->kind != RELAY_YAML_SCALAR || is_word(key, fast_foreign)) {
            return -1;
        }
        return fast_operator(b, key, value);
    }
    if (map->count == 1 && value->kind == RELAY_YAML_SCALAR) {
        return -1;
    }
    return JB_LIT(b, "{\"group\":") || fast_group(b, map) || JB_LIT(b, "}");
}


static int
fast_alternative(jbuf *b, const relay_yaml_node *node)
{
    relay_yaml_value v;

    if (node->kind == RELAY_YAML_MAP) {
        return fast_map_alternative(b, node);
    }
    if (node->kind != RELAY_YAML_SCALAR) {
        return -1;
    }
    relay_yaml_resolve(node, &v);
    if (JB_LIT(b, "{\"eq\":") != 0) {
        return -1;
    }
    switch (v.type) {
    case RELAY_YAML_NULL:
        return JB_LIT(b, "null}");
    case RELAY_YAML_BOOL:
        return v.boolean ? JB_LIT(b, "true}") : JB_LIT(b, "false}");
    case RELAY_YAML_INT:
    case RELAY_YAML_FLOAT:
        return jb_number(b, v.number) || JB_LIT(b, "}");
    case RELAY_YAML_STR:
        break;
    }
    return jb_string(b, node->text, node->len) || JB_LIT(b, "}");
}


/* A field's condition: a non-empty list, or a map standing for a one-element list. */
static int
fast_condition(jbuf *b, const relay_yaml_node *node)
{
    size_t i;

    if (node->kind == RELAY_YAML_MAP) {
        return JB_LIT(b, "[") || fast_alternative(b, node) || JB_LIT(b, "]");
    }
    if (node->kind != RELAY_YAML_SEQ || node->count == 0 || JB_LIT(b, "[") != 0) {
        return -1;
    }
    for (i = 0; i < node->count; i++) {
        if ((i > 0 && JB_LIT(b, ",") != 0) || fast_alternative(b, node->items[i]) != 0) {
            return -1;
        }
    }
    return JB_LIT(b, "]");
}


/* A group of fields (pattern.lua compile_group): no operator or foreign names, no
 * field named twice. */
static int
fast_group(jbuf *b, const relay_yaml_node *map)
{
    const relay_yaml_node *key;
    size_t i, j;

    if (map->count > FAST_MAX_FIELDS || JB_LIT(b, "{") != 0) {
        return -1;
    }
    for (i = 0; i < map->count; i++) {
        key = relay_yaml_map_key(map, i);
        if (is_word(key, fast_operators) || is_word(key, fast_foreign)) {
            return -1;
        }
        for (j = 0; j < i; j++) {
            const relay_yaml_node *prev = relay_yaml_map_key(map, j);
            if (prev->len == key->len && memcmp(prev->text, key->text, key->len) == 0) {
                return -1;
            }
        }
        if ((i > 0 && JB_LIT(b, ",") != 0) || jb_string(b, key->text, key->len) != 0 || JB_LIT(b, ":") != 0
            || fast_condition(b, relay_yaml_map_value(map, i)) != 0) {
            return -1;
        }
    }
    return JB_LIT(b, "}");
}


/* [A-Za-z0-9_.-]+ and a string by the core schema. */
static int
fast_handler_ok(const relay_yaml_node *node)
{
    relay_yaml_value v;
    size_t i;

    if (node->kind != RELAY_YAML_SCALAR || node->len == 0) {
        return 0;
    }
    relay_yaml_resolve(node, &v);
    if (v.type != RELAY_YAML_STR) {
        return 0;
    }
    for (i = 0; i < node->len; i++) {
        unsigned char c = (unsigned char)node->text[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'
              || c == '.' || c == '-')) {
            return 0;
        }
    }
    return 1;
}


/* Find handler/pattern/timeout/retries of an entry; 0 when any other key is present
 * or handler or pattern is missing. */
static int
fast_entry_fields(const relay_yaml_node *entry, const relay_yaml_node *out[4])
{
    size_t i;
    int k;

    memset(out, 0, 4 * sizeof(*out));
    if (entry->kind != RELAY_YAML_MAP) {
        return 0;
    }
    for (i = 0; i < entry->count; i++) {
        const relay_yaml_node *key = relay_yaml_map_key(entry, i);
        for (k = 0; fast_event_keys[k] != NULL; k++) {
            if (strlen(fast_event_keys[k]) == key->len && memcmp(key->text, fast_event_keys[k], key->len) == 0) {
                break;
            }
        }
        if (fast_event_keys[k] == NULL || out[k] != NULL) {
            return 0;
        }
        out[k] = relay_yaml_map_value(entry, i);
    }
    return out[0] != NULL && out[1] != NULL;
}


/* Push the compiled form of an events entry, or its plain node when the Lua validator
 * must look at it:
 *   {kind="event", line=, col=, handler=, handler_line=, handler_col=, pattern_json=,
 *    timeout=<node or nil>, retries=<node or nil>} */
static void
push_event_entry(const tree_ctx *t, const relay_yaml_node *entry, jbuf *b)
{
    lua_State *L = t->L;
    const relay_yaml_node *f[4];

    b->len = 0;
    if (!fast_entry_fields(entry, f) || !fast_handler_ok(f[0]) || f[1]->kind != RELAY_YAML_MAP
        || f[1]->count == 0 || fast_group(b, f[1]) != 0) {
        push_node(t, entry);
        return;
    }
    lua_createtable(L, 0, 7); /* timeout/retries are rare: let them grow the table */
    set_mark(t, entry, S_EVENT);
    lua_pushvalue(L, t->base + S_HANDLER);
    lua_pushlstring(L, f[0]->text, f[0]->len);
    lua_rawset(L, -3);
    set_int_slot(t, S_HANDLER_LINE, f[0]->line);
    set_int_slot(t, S_HANDLER_COL, f[0]->col);
    lua_pushvalue(L, t->base + S_PATTERN_JSON);
    lua_pushlstring(L, b->data, b->len);
    lua_rawset(L, -3);
    if (f[2] != NULL) {
        push_node(t, f[2]);
        set_slot(t, S_TIMEOUT);
    }
    if (f[3] != NULL) {
        push_node(t, f[3]);
        set_slot(t, S_RETRIES);
    }
}


/* The root of an app template: as push_node, but the items of the events list go
 * through push_event_entry. */
static void
push_app_root(const tree_ctx *t, const relay_yaml_node *root, jbuf *b)
{
    lua_State *L = t->L;
    const relay_yaml_node *key, *value;
    size_t i, j;

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
        } else {
            lua_createtable(L, 0, 4);
            set_mark(t, value, S_SEQ);
            lua_createtable(L, (int)value->count, 0);
            for (j = 0; j < value->count; j++) {
                push_event_entry(t, value->items[j], b);
                lua_rawseti(L, -2, (int)j + 1);
            }
            set_slot(t, S_ITEMS);
        }
        lua_rawseti(L, -2, (int)i + 1);
    }
    set_map_lists(t);
}


/* Owns the C tree and the JSON buffer while Lua tables are built: conversion may raise
 * (out of memory), and then __gc frees them. */
typedef struct {
    relay_yaml_node *root;
    jbuf buf;
} load_guard;


static void
guard_release(load_guard *g)
{
    relay_yaml_free(g->root);
    g->root = NULL;
    free(g->buf.data);
    g->buf.data = NULL;
    g->buf.len = g->buf.cap = 0;
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
        push_app_root(&t, root, &guard->buf);
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
 * @function yaml.load_app(text)
 * As yaml.load, for an app template: each entry of the root map's events list that
 * is certainly valid comes back precompiled as
 * {kind="event", line, col, handler, handler_line, handler_col, pattern_json,
 * timeout=<node|nil>, retries=<node|nil>}; every other entry is a plain node.
 */
static int
lua_yaml_load_app(lua_State *L)
{
    return load_common(L, 1);
}


static int
lua_yaml_guard_gc(lua_State *L)
{
    load_guard *guard = luaL_checkudata(L, 1, TREE_GUARD);

    guard_release(guard);
    return 0;
}


int
luaopen_relay_core_yaml(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"load", lua_yaml_load}, {"load_app", lua_yaml_load_app}, {NULL, NULL}};

    luaL_newmetatable(L, TREE_GUARD);
    lua_pushcfunction(L, lua_yaml_guard_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    lua_createtable(L, 0, 3);
    luaL_register(L, NULL, funcs);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    lua_pushinteger(L, RELAY_YAML_MAX_DEPTH);
    lua_setfield(L, -2, "MAX_DEPTH");
    return 1;
}
