--- JSON output of the CLI: encoding with empty lists, and pretty-printing
-- of JSON text by re-indenting its tokens (key order, number spelling and
-- escapes stay exactly as written; text that is not JSON is returned
-- indented as it is).
local cjson = require("cjson")
local matcher = require("relay.core.matcher")

local _M = {}

-- Debian's lua-cjson 2.1.0 has no array_mt and encodes an empty table as
-- {}: an empty list goes out as this placeholder string, then becomes [].
local EMPTY_LIST = "\0relay-empty-list\0"
local EMPTY_LIST_JSON = cjson.encode(EMPTY_LIST):gsub("%p", "%%%0")


--- cjson.encode(object), where each of list_keys naming an empty table is
-- encoded as [] (object itself is not changed).
function _M.encode(object, list_keys)
    local copy = {}
    for k, v in pairs(object) do
        copy[k] = v
    end
    for _, key in ipairs(list_keys) do
        if type(copy[key]) == "table" and next(copy[key]) == nil then
            copy[key] = EMPTY_LIST
        end
    end
    return (cjson.encode(copy):gsub(EMPTY_LIST_JSON, "[]"))
end


local function skip_string(text, i)
    local j = i + 1
    while j <= #text do
        local c = text:sub(j, j)
        if c == "\\" then
            j = j + 2
        elseif c == '"' then
            return j
        else
            j = j + 1
        end
    end
    return #text
end


--- Indents valid JSON with two spaces a level, each line prefixed by prefix.
function _M.pretty(text, prefix)
    prefix = prefix or ""
    local valid = matcher.validate_object(text, #text + 1)
    if not valid and not (text:match("^%s*%[") and matcher.validate_object('{"a":' .. text .. "}", #text + 8)) then
        return prefix .. text
    end
    local out, depth, i = { prefix }, 0, 1
    local function newline()
        out[#out + 1] = "\n" .. prefix .. string.rep("  ", depth)
    end
    while i <= #text do
        local c = text:sub(i, i)
        if c == '"' then
            local j = skip_string(text, i)
            out[#out + 1] = text:sub(i, j)
            i = j
        elseif c == "{" or c == "[" then
            local close = c == "{" and "}" or "]"
            local after = text:match("^%s*(.)", i + 1)
            if after == close then
                out[#out + 1] = c .. close
                i = text:find(close, i + 1, true)
            else
                out[#out + 1] = c
                depth = depth + 1
                newline()
            end
        elseif c == "}" or c == "]" then
            depth = depth - 1
            newline()
            out[#out + 1] = c
        elseif c == "," then
            out[#out + 1] = ","
            newline()
        elseif c == ":" then
            out[#out + 1] = ": "
        elseif not c:match("%s") then
            out[#out + 1] = c
        end
        i = i + 1
    end
    return table.concat(out)
end


return _M
