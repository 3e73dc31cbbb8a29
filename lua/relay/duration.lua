--- Durations and sizes as written in template.yaml and the environment.
-- Durations: one or more <digits><unit> parts, units ms, s, m, h, d, largest unit first,
-- each unit at most once, no spaces, no signs, no fractions: `500ms`, `20s`, `1h30m`, `1d`.
-- Sizes: `512Ki`, `256Mi`, `1Gi`, `1Ti` or plain bytes (`1048576`).
-- Both return nil, reason on bad input; callers add where the value came from.
local _M = {}

local UNIT_MS = { ms = 1, s = 1000, m = 60000, h = 3600000, d = 86400000 }
local UNIT_RANK = { d = 1, h = 2, m = 3, s = 4, ms = 5 }
local SIZE_UNIT = { Ki = 1024, Mi = 1024 ^ 2, Gi = 1024 ^ 3, Ti = 1024 ^ 4 }
local MAX_EXACT = 2 ^ 53

local EXAMPLES = "e.g. 500ms, 20s, 5m, 1h30m, 1d"


--- Parse a duration string into milliseconds.
-- @return integer ms, or nil, reason
function _M.parse_duration(text)
    if type(text) ~= "string" then
        return nil, "expected a duration string (" .. EXAMPLES .. ")"
    end
    if text == "" then
        return nil, "empty duration (" .. EXAMPLES .. ")"
    end
    if text:find("%s") then
        return nil, string.format("%q: durations have no spaces (%s)", text, EXAMPLES)
    end
    local total, pos, last_rank = 0, 1, 0
    while pos <= #text do
        local digits, unit, nxt = text:match("^(%d+)(%a+)()", pos)
        if not digits then
            if text:match("^%d+$", pos) then
                return nil, string.format("%q: missing unit after %s (units ms, s, m, h, d; %s)",
                    text, text:sub(pos), EXAMPLES)
            end
            return nil, string.format("%q is not a duration (%s)", text, EXAMPLES)
        end
        local per = UNIT_MS[unit]
        if not per then
            return nil, string.format("%q: unknown unit %q (units ms, s, m, h, d)", text, unit)
        end
        if UNIT_RANK[unit] <= last_rank then
            return nil, string.format("%q: units must go from largest to smallest, each once (like 1h30m)",
                text)
        end
        last_rank = UNIT_RANK[unit]
        total = total + tonumber(digits) * per
        if total >= MAX_EXACT then
            return nil, string.format("%q: duration too large", text)
        end
        pos = nxt
    end
    return total
end


--- Render milliseconds the way the parser reads them (largest units first).
function _M.format_duration(ms)
    if ms == 0 then
        return "0s"
    end
    local parts = {}
    for _, unit in ipairs({ "d", "h", "m", "s", "ms" }) do
        local per = UNIT_MS[unit]
        if ms >= per then
            local n = math.floor(ms / per)
            parts[#parts + 1] = n .. unit
            ms = ms - n * per
        end
    end
    return table.concat(parts)
end


--- Parse a size (string with a binary suffix, or a whole number of bytes).
-- @return integer bytes, or nil, reason
function _M.parse_size(value)
    if type(value) == "number" then
        if value ~= value or value < 0 or value % 1 ~= 0 or value >= MAX_EXACT then
            return nil, string.format("%s is not a whole number of bytes", tostring(value))
        end
        return value
    end
    if type(value) ~= "string" then
        return nil, "expected a size like 256Mi, 1Gi or a number of bytes"
    end
    local digits, unit = value:match("^(%d+)(%a*)$")
    if not digits then
        return nil, string.format("%q is not a size (e.g. 512Ki, 256Mi, 1Gi, or bytes)", value)
    end
    local mult = 1
    if unit ~= "" then
        mult = SIZE_UNIT[unit]
        if not mult then
            return nil, string.format("%q: unknown size unit %q (Ki, Mi, Gi, Ti, or plain bytes)", value, unit)
        end
    end
    local bytes = tonumber(digits) * mult
    if bytes >= MAX_EXACT then
        return nil, string.format("%q: size too large", value)
    end
    return bytes
end


return _M
