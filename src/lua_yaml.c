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

#define TREE_GUARD "relay.core.yaml.tree"

int luaopen_relay_core_yaml(lua_State *L);


static void
set_mark(lua_State *L, const relay_yaml_node *node, const char *kind)
{
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
    lua_pushinteger(L, node->line);
    lua_setfield(L, -2, "line");
    lua_pushinteger(L, node->col);
    lua_setfield(L, -2, "col");
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


/* Depth is bounded by RELAY_YAML_MAX_DEPTH, so recursion here is bounded too. */
static void
push_node(lua_State *L, const relay_yaml_node *node)
{
    size_t i;

    luaL_checkstack(L, 6, "YAML document too deep");
    if (node->kind == RELAY_YAML_SCALAR) {
        lua_createtable(L, 0, 6);
        set_mark(L, node, "scalar");
        push_scalar_value(L, node);
        lua_setfield(L, -2, "value");
        lua_pushlstring(L, node->text, node->len);
        lua_setfield(L, -2, "text");
        lua_pushboolean(L, node->quoted);
        lua_setfield(L, -2, "quoted");
        return;
    }
    if (node->kind == RELAY_YAML_SEQ) {
        lua_createtable(L, 0, 4);
        set_mark(L, node, "seq");
        lua_createtable(L, (int)node->count, 0);
        for (i = 0; i < node->count; i++) {
            push_node(L, node->items[i]);
            lua_rawseti(L, -2, (int)i + 1);
        }
        lua_setfield(L, -2, "items");
        return;
    }
    lua_createtable(L, 0, 5);
    set_mark(L, node, "map");
    lua_createtable(L, (int)node->count, 0);
    lua_createtable(L, (int)node->count, 0);
    for (i = 0; i < node->count; i++) {
        push_node(L, relay_yaml_map_key(node, i));
        lua_rawseti(L, -3, (int)i + 1);
        push_node(L, relay_yaml_map_value(node, i));
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -3, "values");
    lua_setfield(L, -2, "keys");
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
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    char err[RELAY_YAML_ERR_MAX];
    relay_yaml_node *root = NULL, **guard;

    if (relay_yaml_parse(text, len, &root, err, sizeof(err)) != 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    if (root == NULL) {
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
        return 1;
    }
    /* push_node may raise (out of memory): a guard userdata owns the tree meanwhile, so
     * its __gc frees the tree if the conversion never returns here. */
    guard = lua_newuserdata(L, sizeof(*guard));
    *guard = root;
    luaL_getmetatable(L, TREE_GUARD);
    lua_setmetatable(L, -2);
    push_node(L, root);
    relay_yaml_free(root);
    *guard = NULL;
    lua_remove(L, -2);
    return 1;
}


static int
lua_yaml_guard_gc(lua_State *L)
{
    relay_yaml_node **guard = luaL_checkudata(L, 1, TREE_GUARD);

    relay_yaml_free(*guard);
    *guard = NULL;
    return 0;
}


int
luaopen_relay_core_yaml(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"load", lua_yaml_load}, {NULL, NULL}};

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
