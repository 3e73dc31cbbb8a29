--- A small deterministic JSON encoder for the configs the drivers write
-- (lua-cjson cannot tell an empty array from an empty object, and OCI
-- capability sets must be `[]`). Keys are sorted so output is stable.
local _M = {}

local ARRAY = {}
local CONSTANT = {}
-- The text of each table marked constant, made on its first encoding.
local constant_text = setmetatable({}, { __mode = "k" })

--- Marks t as a JSON array (needed only when it may be empty).
function _M.array(t)
    return setmetatable(t or {}, ARRAY)
end


--- Marks t, an object never changed again, as encoded once: each later
-- encoding reuses the first one's text (the seccomp profile, ~5 KB, is
-- the same in every config a process writes). text, when given, is that
-- encoding made elsewhere (relay.core.seccomp.profile_json).
function _M.constant(t, text)
    constant_text[t] = text
    return setmetatable(t, CONSTANT)
end


local ESCAPES = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
    ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }


local function escape(c)
    return ESCAPES[c] or string.format("\\u%04x", c:byte())
end


local function quote(s)
    -- most strings (syscall names, paths, keys) need no escape: skip gsub
    if not s:find('[%c"\\]') then
        return '"' .. s .. '"'
    end
    return '"' .. s:gsub('[%c"\\]', escape) .. '"'
end


local function is_array(t)
    if getmetatable(t) == ARRAY then
        return true
    end
    local n = #t
    if n == 0 then
        return false
    end
    for k in pairs(t) do
        if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then
            return false
        end
    end
    return true
end


local encode

local function encode_fresh(t, out)
    if is_array(t) then
        out[#out + 1] = "["
        for i = 1, #t do
            if i > 1 then
                out[#out + 1] = ","
            end
            encode(t[i], out)
        end
        out[#out + 1] = "]"
        return
    end
    local keys = {}
    for k in pairs(t) do
        keys[#keys + 1] = tostring(k)
    end
    table.sort(keys)
    out[#out + 1] = "{"
    for i, k in ipairs(keys) do
        if i > 1 then
            out[#out + 1] = ","
        end
        out[#out + 1] = quote(k)
        out[#out + 1] = ":"
        encode(t[k], out)
    end
    out[#out + 1] = "}"
end


local function encode_table(t, out)
    if getmetatable(t) ~= CONSTANT then
        return encode_fresh(t, out)
    end
    local text = constant_text[t]
    if not text then
        local own = {}
        encode_fresh(t, own)
        text = table.concat(own)
        constant_text[t] = text
    end
    out[#out + 1] = text
end


encode = function(v, out)
    local ty = type(v)
    if ty == "table" then
        encode_table(v, out)
    elseif ty == "string" then
        out[#out + 1] = quote(v)
    elseif ty == "number" then
        if v % 1 == 0 and v > -2 ^ 53 and v < 2 ^ 53 then
            out[#out + 1] = string.format("%d", v)
        else
            out[#out + 1] = string.format("%.17g", v)
        end
    elseif ty == "boolean" then
        out[#out + 1] = tostring(v)
    elseif v == nil then
        out[#out + 1] = "null"
    else
        error("json: cannot encode a " .. ty)
    end
end


function _M.encode(v)
    local out = {}
    encode(v, out)
    return table.concat(out)
end


return _M
