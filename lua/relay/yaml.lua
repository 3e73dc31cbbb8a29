--- YAML documents with marks, on top of the C module relay.core.yaml.
-- Nodes (see src/lua_yaml.c):
--   {kind="map", line=, col=, keys={nodes}, values={nodes}}
--   {kind="seq", line=, col=, items={nodes}}
--   {kind="scalar", line=, col=, value=<core-schema value>, text=<raw>, quoted=<bool>}
-- A null scalar's value is _M.null (equal to cjson.null).
-- Also the one JSON encoder for YAML values (numbers with full precision, which
-- lua-cjson 2.1 cannot do), used for pattern normal forms and schedule payloads.
local core = require("relay.core.yaml")

local _M = {}

_M.null = core.null

local MAX_EXACT = 2 ^ 53


--- "FILE:LINE:COL" of a node.
function _M.where(file, node)
    return string.format("%s:%d:%d", file, node.line, node.col)
end


--- Parse text; errors come back as "FILE:LINE:COL: message".
function _M.load(text, file)
    local root, err = core.load(text)
    if not root then
        return nil, (file or "<yaml>") .. ":" .. err
    end
    return root
end


--- As load, for an app template: entries of the root's events list that are certainly
-- valid come back precompiled (src/lua_yaml.c):
--   {kind="event", line=, col=, handler=, handler_line=, handler_col=, pattern_json=,
--    timeout=<node or nil>, retries=<node or nil>}
-- (pattern_json as relay.pattern.compile would return it); all others are plain nodes.
-- bulk: for a command that only matches, an events list whose every entry is a plain
-- handler and pattern comes back whole as {kind="rules", line=, col=, rules=<rule block>}.
-- (A binary built before load_app existed gets plain nodes: same results, slower.)
local core_load_app = core.load_app or core.load

function _M.load_app(text, file, bulk)
    local root, err = core_load_app(text, bulk)
    if not root then
        return nil, (file or "<yaml>") .. ":" .. err
    end
    return root
end


--- Read and parse a file; an unreadable file is "FILE: cannot read: reason".
function _M.load_file(path)
    local f, err = io.open(path, "rb")
    if not f then
        return nil, string.format("%s: cannot read: %s", path, err)
    end
    local text, rerr = f:read("*a")
    f:close()
    if not text then
        return nil, string.format("%s: cannot read: %s", path, rerr)
    end
    return _M.load(text, path)
end


function _M.is_null(node)
    return node.kind == "scalar" and node.value == _M.null
end


--- Value of a scalar as a string key or argument (raw text for plain scalars).
function _M.scalar_text(node)
    return node.text
end


local ESCAPES = {
    ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
    ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}


--- A JSON string literal (bytes >= 0x20 other than " and \ pass through).
function _M.json_string(s)
    return '"' .. s:gsub('[%c"\\]', function(c)
        return ESCAPES[c] or string.format("\\u%04x", c:byte())
    end) .. '"'
end


--- A JSON number with full double precision; integers print exactly.
-- @return text, or nil, reason for NaN and infinities
function _M.json_number(n)
    if n ~= n then
        return nil, "NaN cannot be represented in JSON"
    end
    if n == math.huge or n == -math.huge then
        return nil, "an infinite number cannot be represented in JSON"
    end
    if n % 1 == 0 and n > -MAX_EXACT and n < MAX_EXACT then
        return string.format("%d", n)
    end
    -- The shortest text that reads back as the same double.
    for _, fmt in ipairs({ "%.15g", "%.16g" }) do
        local text = string.format(fmt, n)
        if tonumber(text) == n then
            return text
        end
    end
    return string.format("%.17g", n)
end


--- A YAML node rendered back as compact flow YAML, for "write ..." hints.
function _M.render(node)
    if node.kind == "scalar" then
        if node.quoted or (type(node.value) == "string" and node.text:find("[,%[%]{}:#]")) then
            return _M.json_string(node.text)
        end
        return node.text
    elseif node.kind == "seq" then
        local parts = {}
        for i, item in ipairs(node.items) do
            parts[i] = _M.render(item)
        end
        return "[" .. table.concat(parts, ", ") .. "]"
    end
    local parts = {}
    for i, key in ipairs(node.keys) do
        parts[i] = _M.render(key) .. ": " .. _M.render(node.values[i])
    end
    return "{" .. table.concat(parts, ", ") .. "}"
end


--- A short description of a node for error messages.
function _M.describe(node)
    if node.kind == "map" then
        return #node.keys == 0 and "an empty map" or "a map"
    elseif node.kind == "seq" then
        return #node.items == 0 and "an empty list" or "a list"
    end
    local v = node.value
    if v == _M.null then
        return "null"
    elseif type(v) == "boolean" then
        return tostring(v)
    elseif type(v) == "number" then
        return "the number " .. node.text
    end
    return "the string " .. _M.json_string(v)
end


--- Convert a node to a plain Lua value: maps become tables keyed by the keys' text,
-- sequences arrays, null _M.null.
function _M.to_plain(node)
    if node.kind == "scalar" then
        return node.value
    end
    local out = {}
    if node.kind == "seq" then
        for i, item in ipairs(node.items) do
            out[i] = _M.to_plain(item)
        end
    else
        for i, key in ipairs(node.keys) do
            out[key.text] = _M.to_plain(node.values[i])
        end
    end
    return out
end


--- Encode a node as JSON text, keeping map order and the map/list distinction.
-- @return text, or nil, reason, node (the node that cannot be represented)
function _M.to_json(node)
    if node.kind == "scalar" then
        local v = node.value
        if v == _M.null then
            return "null"
        elseif type(v) == "boolean" then
            return tostring(v)
        elseif type(v) == "number" then
            local text, err = _M.json_number(v)
            return text, err, node
        end
        return _M.json_string(v)
    end
    local parts = {}
    if node.kind == "seq" then
        for i, item in ipairs(node.items) do
            local text, err, bad = _M.to_json(item)
            if not text then
                return nil, err, bad
            end
            parts[i] = text
        end
        return "[" .. table.concat(parts, ",") .. "]"
    end
    local seen = {}
    for i, key in ipairs(node.keys) do
        if seen[key.text] then
            return nil, string.format("duplicate key %s (first at %d:%d)", _M.json_string(key.text),
                seen[key.text].line, seen[key.text].col), key
        end
        seen[key.text] = key
        local text, err, bad = _M.to_json(node.values[i])
        if not text then
            return nil, err, bad
        end
        parts[i] = _M.json_string(key.text) .. ":" .. text
    end
    return "{" .. table.concat(parts, ",") .. "}"
end


return _M
