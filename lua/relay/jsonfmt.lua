--- Pretty-printing of JSON text by re-indenting its tokens: key order,
-- number spelling and escapes stay exactly as written. Text that is not
-- JSON is returned indented as it is.
local matcher = require("relay.core.matcher")

local _M = {}


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
