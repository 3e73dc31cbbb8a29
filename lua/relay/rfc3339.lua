--- RFC 3339 timestamps in UTC, written by one function. The host (a
-- handler's RELAY_DEADLINE, schedule occurrences, `relay schedule`) and the
-- Redis scripts (a dead letter's `timestamp`) must print an instant the same
-- way, and Redis runs its own Lua: so the writer is kept as source text,
-- which relay.scripts prepends to its prelude and this module compiles for
-- the host.
local _M = {}

-- Plain arithmetic only: Redis scripts have no os.date, and os.date would
-- read the process time zone. The calendar is the proleptic Gregorian one
-- (days since 1970-01-01 to year, month, day).
_M.SOURCE = [==[
local function civil_from_days(days)
    local z = days + 719468
    local era = math.floor(z / 146097)
    local doe = z - era * 146097
    local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
    local mp = math.floor((5 * doy + 2) / 153)
    local d = doy - math.floor((153 * mp + 2) / 5) + 1
    local m = mp < 10 and mp + 3 or mp - 9
    return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
end

local function rfc3339(ms, whole_seconds)
    local secs = math.floor(ms / 1000)
    local days = math.floor(secs / 86400)
    local rem = secs - days * 86400
    local y, m, d = civil_from_days(days)
    local text = string.format('%04d-%02d-%02dT%02d:%02d:%02d', y, m, d, math.floor(rem / 3600),
        math.floor((rem % 3600) / 60), rem % 60)
    if whole_seconds then
        return text .. 'Z'
    end
    return text .. string.format('.%03dZ', ms - secs * 1000)
end
]==]

local civil_from_days, rfc3339 = assert(loadstring(_M.SOURCE .. "\nreturn civil_from_days, rfc3339",
    "=relay.rfc3339"))()

--- Year, month, day of a day count since 1970-01-01.
_M.civil_from_days = civil_from_days


--- `YYYY-MM-DDTHH:MM:SS.mmmZ` for wall-clock ms.
function _M.millis(ms)
    return rfc3339(ms)
end


--- `YYYY-MM-DDTHH:MM:SSZ` for wall-clock ms (the milliseconds dropped).
function _M.seconds(ms)
    return rfc3339(ms, true)
end


--- `YYYY-MM-DDTHH:MM:SS±hh:mm`: the instant ms on a clock offset_ms east
-- of UTC (`Z` for offset 0), whole seconds.
function _M.seconds_at_offset(ms, offset_ms)
    if offset_ms == 0 then
        return rfc3339(ms, true)
    end
    local minutes = math.floor(math.abs(offset_ms) / 60000 + 0.5)
    return rfc3339(ms + offset_ms, true):sub(1, -2)
        .. string.format("%s%02d:%02d", offset_ms < 0 and "-" or "+", math.floor(minutes / 60), minutes % 60)
end


return _M
