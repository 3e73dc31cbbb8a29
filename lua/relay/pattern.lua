--- Pattern validation: a YAML pattern node tree -> the matcher's normal form (JSON text).
--
-- Normal form (include/relay/matcher.h):
--   group       = {"<field>": [alternative, ...], ...}
--   alternative = {"eq": <string|number|true|false|null>} | {"prefix": s} | {"suffix": s}
--               | {"exists": bool} | {"gt"|"gte"|"lt"|"lte": number}
--               | {"gt"|"gte"|"lt"|"lte": {"now": <offset ms>}} | {"group": group}
--
-- Every rejection of a pattern that breaks docs/patterns.md is "FILE:LINE:COL: message",
-- pointing at the offending node and saying how to fix it.
-- Nothing is ever silently widened: whatever this module cannot classify exactly is an error.
--
-- Classification of a map inside a field's list (or a bare map value, which is shorthand
-- for a one-element list):
--   * one key whose value is a scalar -> an operator map; the key must be an operator
--     (a typo of one is reported as such; any other key is read as a nested field whose
--     condition is a scalar, which is reported as "must be a list");
--   * otherwise                        -> a nested group of fields (values are conditions),
--     where operator names are refused as field names.
--
-- The operators themselves are the matcher's (relay_matcher_ops in include/relay/matcher.h,
-- read here through relay.core.matcher's `operators`; src/pattern_compile.c reads the same
-- table). This module adds only words: OPERANDS says how each kind of operand is checked and
-- explained, FOREIGN how to write each foreign operator in Relay.
local core = require("relay.core.matcher")
local textutil = require("relay.text")
local yaml = require("relay.yaml")
local duration = require("relay.duration")

local _M = {}

local OPERATOR_LIST = {} -- the written operators, in the matcher's order (typo suggestions)
local OPERATORS = {}     -- written operator name -> its operand kind
for _, op in ipairs(core.operators) do
    if op.written then
        OPERATOR_LIST[#OPERATOR_LIST + 1] = op.name
        OPERATORS[op.name] = op.operand
    end
end

-- Other systems' operator names (the matcher's "foreign" rows), with Relay's equivalent.
local FOREIGN = {
    ["numeric"] = "use the comparison operators gt, gte, lt, lte, one per alternative, e.g. [{gt: 0}]",
    ["anything-but"] = "Relay has no negation: use a separate rule for the values you want, "
        .. "or {exists: false} to match absence",
    ["wildcard"] = "use {prefix: ...} or {suffix: ...}",
    ["equals-ignore-case"] = "list every accepted spelling as an alternative, e.g. [ok, OK, Ok]",
    ["cidr"] = "use {prefix: ...} on the address's string form, e.g. {prefix: \"10.0.\"}",
    ["$or"] = "write the alternatives as a list: field: [a, b], or several nested maps "
        .. "field: [{...}, {...}]",
}

local EQUALS_NAMES = { eq = true, equals = true, ["="] = true, ["=="] = true }
local YAML11_BOOLS = { yes = true, no = true, on = true, off = true, y = true, n = true }
local NOW_EXAMPLE = '"now()-5m"'
local PATTERN_ERROR = {} -- tag of the errors raised inside the walk


local function fail(ctx, node, label, fmt, ...)
    local msg = string.format(fmt, ...)
    if label then
        msg = label .. ": " .. msg
    end
    error({ [PATTERN_ERROR] = yaml.where(ctx.file, node) .. ": " .. msg }, 0)
end


local edit_distance = textutil.edit_distance

--- The known operator closest to `word`, if it is close enough to be a typo: one edit
-- away, or two for the long operator names (so "last" is not taken for "lt").
local function suggest_operator(word)
    local lower = word:lower()
    local best, best_d
    for _, op in ipairs(OPERATOR_LIST) do
        local d = edit_distance(lower, op)
        if not best_d or d < best_d then
            best, best_d = op, d
        end
    end
    if best_d <= 1 or (best_d == 2 and #word >= 5 and #best >= 5) then
        return best
    end
end


local function check_foreign(ctx, map, label)
    for _, key in ipairs(map.keys) do
        local hint = FOREIGN[key.text]
        if hint then
            fail(ctx, key, label, "%s is not a Relay operator; %s", key.text, hint)
        end
    end
end


local eq_alternative, operator_alternative, compile_group


local function check_finite(ctx, node, label, what)
    local v = node.value
    if v ~= v or v == math.huge or v == -math.huge then
        fail(ctx, node, label, "%s must be a finite number, not %s", what, node.text)
    end
end


function eq_alternative(ctx, node, label)
    local v = node.value
    if v == yaml.null then
        return '{"eq":null}'
    elseif type(v) == "boolean" then
        return '{"eq":' .. tostring(v) .. "}"
    elseif type(v) == "number" then
        check_finite(ctx, node, label, "a literal")
        return '{"eq":' .. yaml.json_number(v) .. "}"
    end
    return '{"eq":' .. yaml.json_string(v) .. "}"
end


--- Parse the exact now() syntax: "now()", "now()-D", "now()+D". Returns the offset in ms,
-- or nil, reason (reason nil when the text is not now() syntax at all).
local function parse_now(text)
    if text == "now()" then
        return 0
    end
    local sign, dur = text:match("^now%(%)([+-])(.*)$")
    if not sign then
        return nil
    end
    local ms, err = duration.parse_duration(dur)
    if not ms then
        return nil, err
    end
    return sign == "-" and -ms or ms
end


--- A string operand of gt/gte/lt/lte that is not exact now() syntax: explain the fix.
local function bad_temporal(ctx, node, label, op)
    local text = node.value
    local squashed = text:gsub("%s+", "")
    if squashed:lower():sub(1, 3) == "now" then
        local fixed = "now" .. squashed:sub(4)
        if not fixed:find("^now%(%)") then
            fixed = fixed:gsub("^now", "now()")
        end
        local ms, err = parse_now(fixed)
        if ms then
            fail(ctx, node, label, "%s is not valid now() syntax; write %s: %s", yaml.json_string(text),
                op, yaml.json_string(fixed))
        elseif err then
            fail(ctx, node, label, "bad duration in %s: %s", yaml.json_string(text), err)
        end
        fail(ctx, node, label, "%s is not valid now() syntax; write now(), now()-D or now()+D "
            .. "with D a duration like 5m or 1h30m, e.g. %s", yaml.json_string(text), NOW_EXAMPLE)
    end
    if text:find("^%d%d%d%d%-%d%d%-%d%d") then
        fail(ctx, node, label, "literal timestamps are not accepted (%s); only now()-relative cutoffs "
            .. "are, e.g. %s: %s", yaml.json_string(text), op, NOW_EXAMPLE)
    end
    local number = tonumber(text)
    if number and text:find("^%s*[-+]?[%d.]") then
        fail(ctx, node, label, "%s takes a number, not a string; write {%s: %s} without quotes",
            op, op, text)
    end
    fail(ctx, node, label, "%s takes a number or a now()-relative string such as %s, not %s",
        op, NOW_EXAMPLE, yaml.describe(node))
end


local function comparison(ctx, op, node, label)
    local v = node.value
    if type(v) == "number" then
        check_finite(ctx, node, label, op .. "'s operand")
        return string.format('{"%s":%s}', op, yaml.json_number(v))
    elseif type(v) == "string" then
        local ms, err = parse_now(v)
        if ms then
            return string.format('{"%s":{"now":%s}}', op, yaml.json_number(ms))
        elseif err then
            fail(ctx, node, label, "bad duration in %s: %s", yaml.json_string(v), err)
        end
        bad_temporal(ctx, node, label, op)
    end
    fail(ctx, node, label, "%s takes a number or a now()-relative string such as %s, not %s",
        op, NOW_EXAMPLE, yaml.describe(node))
end


local function string_operand(ctx, op, value, label)
    local v = value.value
    if type(v) ~= "string" then
        if v == yaml.null then
            fail(ctx, value, label, "%s takes a string, not null", op)
        end
        fail(ctx, value, label, "%s takes a string, not %s; write {%s: %s}", op,
            yaml.describe(value), op, yaml.json_string(value.text))
    end
    return string.format('{"%s":%s}', op, yaml.json_string(v))
end


local function boolean_operand(ctx, op, value, label)
    local v = value.value
    if type(v) ~= "boolean" then
        local note = ""
        if value.kind == "scalar" and not value.quoted and YAML11_BOOLS[value.text:lower()] then
            note = " (YAML 1.2 reads " .. value.text .. " as a string; write true or false)"
        end
        fail(ctx, value, label, "%s takes true or false, not %s%s", op, yaml.describe(value), note)
    end
    return string.format('{"%s":%s}', op, tostring(v))
end


--- Per operand kind of a written operator: compile(ctx, op, scalar node, label) -> normal form,
-- failing with a message that says how to fix the operand; `list` is the fix for a list operand
-- (nil: one alternative per item).
local OPERANDS = {
    string = { compile = string_operand },
    boolean = { compile = boolean_operand, list = "%s takes true or false, not a list; write {%s: true}" },
    threshold = { compile = comparison },
}
for name, operand in pairs(OPERATORS) do
    assert(OPERANDS[operand], "relay.pattern: no messages for the operand of " .. name)
end
for _, op in ipairs(core.operators) do
    assert(op.operand ~= "foreign" or FOREIGN[op.name], "relay.pattern: no hint for " .. op.name)
end
for name in pairs(FOREIGN) do
    local known = false
    for _, op in ipairs(core.operators) do
        known = known or (op.name == name and op.operand == "foreign")
    end
    assert(known, "relay.pattern: " .. name .. " is not a foreign operator of the matcher")
end


function operator_alternative(ctx, key, value, label)
    return OPERANDS[OPERATORS[key.text]].compile(ctx, key.text, value, label)
end


--- An operator key whose value is a list or a map: an operator used as a field name.
local function operator_misuse(ctx, key, value, label)
    local op = key.text
    if value.kind == "seq" then
        local list_fix = OPERANDS[OPERATORS[op]].list
        if list_fix then
            fail(ctx, value, label, list_fix, op, op)
        end
        local alts = {}
        for i, item in ipairs(value.items) do
            alts[i] = "{" .. op .. ": " .. yaml.render(item) .. "}"
        end
        if #alts == 1 then
            fail(ctx, value, label, "%s takes a single scalar, not a list; write %s", op, alts[1])
        end
        fail(ctx, value, label, "%s takes a single scalar, not a list; write each operand as its own "
            .. "alternative: [%s]", op, table.concat(alts, ", "))
    end
    fail(ctx, key, label, "%s is an operator and cannot be a nested field name; an operator takes "
        .. "a single scalar, e.g. {%s: ...}", op, op)
end


local function map_alternative(ctx, node, label)
    if #node.keys == 0 then
        fail(ctx, node, label, "an empty map matches nothing; give a nested field or an operator")
    end
    check_foreign(ctx, node, label)
    local key, value = node.keys[1], node.values[1]
    if #node.keys == 1 then
        if value.kind == "scalar" then
            if OPERATORS[key.text] then
                return operator_alternative(ctx, key, value, label)
            end
            if EQUALS_NAMES[key.text:lower()] then
                fail(ctx, key, label, "there is no equals operator; a bare literal is equality: write [%s]",
                    yaml.render(value))
            end
            local guess = suggest_operator(key.text)
            if guess then
                local nested = ""
                if #key.text <= 3 then
                    nested = string.format(" (a nested field is written {%s: [%s]})", yaml.render(key),
                        yaml.render(value))
                end
                fail(ctx, key, label, "unknown operator %s; did you mean %s?%s", yaml.json_string(key.text),
                    guess, nested)
            end
            -- Not operator-like: a nested field whose condition is a scalar (compile_group says so).
        elseif OPERATORS[key.text] then
            operator_misuse(ctx, key, value, label)
        end
    else
        local ops, all_scalar = {}, true
        for i, k in ipairs(node.keys) do
            if OPERATORS[k.text] then
                ops[#ops + 1] = k
            end
            all_scalar = all_scalar and node.values[i].kind == "scalar"
        end
        if #ops == #node.keys and all_scalar then
            local alts = {}
            for i, k in ipairs(node.keys) do
                alts[i] = "{" .. k.text .. ": " .. yaml.render(node.values[i]) .. "}"
            end
            fail(ctx, node, label, "an operator map holds exactly one operator; write them as separate "
                .. "alternatives: [%s]", table.concat(alts, ", "))
        elseif #ops > 0 then
            fail(ctx, ops[1], label, "%s is an operator and cannot be a nested field name; write it as "
                .. "its own alternative, e.g. [{%s: ...}, {...}]", ops[1].text, ops[1].text)
        end
    end
    return '{"group":' .. compile_group(ctx, node) .. "}"
end


local function alternative(ctx, node, label)
    if node.kind == "scalar" then
        return eq_alternative(ctx, node, label)
    elseif node.kind == "seq" then
        fail(ctx, node, label, "a list inside a list is not allowed; each alternative is a scalar, "
            .. "a one-operator map or a nested map")
    end
    return map_alternative(ctx, node, label)
end


local function condition(ctx, name, node)
    if node.kind == "scalar" then
        if node.value == yaml.null then
            fail(ctx, node, name, "a null condition is not allowed; write a list of alternatives "
                .. "(use [null] to match a JSON null)")
        end
        fail(ctx, node, name, "a field condition must be a list; write [%s]", yaml.render(node))
    end
    local items = node.kind == "seq" and node.items or { node }
    if #items == 0 then
        fail(ctx, node, name, "an empty list matches nothing; give at least one alternative")
    end
    local alts = {}
    for i, item in ipairs(items) do
        alts[i] = alternative(ctx, item, name)
    end
    return "[" .. table.concat(alts, ",") .. "]"
end


function compile_group(ctx, node)
    check_foreign(ctx, node, nil)
    local seen, fields = {}, {}
    for i, key in ipairs(node.keys) do
        local name = key.text
        if OPERATORS[name] then
            fail(ctx, key, nil, "%s is an operator and cannot be a field name here; an operator goes "
                .. "inside a field's list, e.g. field: [{%s: ...}]", name, name)
        end
        if seen[name] then
            fail(ctx, key, nil, "duplicate field %s (first at %d:%d)", yaml.json_string(name),
                seen[name].line, seen[name].col)
        end
        seen[name] = key
        fields[i] = yaml.json_string(name) .. ":" .. condition(ctx, name, node.values[i])
    end
    return "{" .. table.concat(fields, ",") .. "}"
end


--- Validate a pattern node and return its normal form.
-- @param node the value of `pattern:` (a yaml node)
-- @param file the file name used in errors
-- @return JSON text, or nil, "FILE:LINE:COL: message"
function _M.compile(node, file)
    local ctx = { file = file or "<pattern>" }
    local ok, res = pcall(function()
        if node.kind ~= "map" then
            if yaml.is_null(node) then
                fail(ctx, node, nil, "the pattern is empty; write a map of field conditions, "
                    .. "e.g. status: [COMPLETED]")
            end
            fail(ctx, node, nil, "a pattern must be a map of field conditions, e.g. status: [COMPLETED]; "
                .. "got %s", yaml.describe(node))
        end
        if #node.keys == 0 then
            fail(ctx, node, nil, "an empty pattern is not allowed; give at least one field condition")
        end
        return compile_group(ctx, node)
    end)
    if ok then
        return res
    end
    if type(res) == "table" and res[PATTERN_ERROR] then
        return nil, res[PATTERN_ERROR]
    end
    error(res, 0)
end


--- The `pattern:` key of a file that holds a template's entry rather than
-- the pattern itself: compiled as given it would silently match nothing.
local function wrapped_pattern_key(root)
    if root.kind ~= "map" then
        return nil
    end
    for i, key in ipairs(root.keys) do
        if key.text == "pattern" and root.values[i].kind == "map" then
            return key
        end
    end
    return nil
end


--- Read a YAML file holding one pattern (the value of `pattern:`) and compile it.
function _M.load_file(path)
    local root, err = yaml.load_file(path)
    if not root then
        return nil, err
    end
    local key = wrapped_pattern_key(root)
    if key then
        return nil, yaml.where(path, key) .. ": this file holds a `pattern:` key; a --pattern file holds "
            .. "the pattern itself (the value of pattern:), so remove that line and unindent the rest "
            .. "(a field named pattern is matched with a list, e.g. pattern: [x])"
    end
    return _M.compile(root, path)
end


_M.OPERATORS = OPERATOR_LIST
_M.FOREIGN = FOREIGN
_M.suggest_operator = suggest_operator

return _M
