--- Five-field cron (minute hour day-of-month month day-of-week), in UTC,
-- with `*`, lists, ranges, steps and optional month/day names; Sunday is 0
-- or 7. When both day fields are restricted a day matches either (Vixie
-- cron). The macros @hourly, @daily (@midnight), @weekly, @monthly and
-- @yearly (@annually) stand for their five fields, as in Kubernetes
-- CronJobs. Also the calendar arithmetic the scheduler needs, without the
-- process time zone (relay.cron_zone runs these in a time zone).
local rfc3339 = require("relay.rfc3339")

local _M = {}

local FIELDS = {
    { name = "minute", min = 0, max = 59 },
    { name = "hour", min = 0, max = 23 },
    { name = "day-of-month", min = 1, max = 31 },
    { name = "month", min = 1, max = 12,
      names = { jan = 1, feb = 2, mar = 3, apr = 4, may = 5, jun = 6, jul = 7, aug = 8, sep = 9, oct = 10,
                nov = 11, dec = 12 } },
    { name = "day-of-week", min = 0, max = 7,
      names = { sun = 0, mon = 1, tue = 2, wed = 3, thu = 4, fri = 5, sat = 6 } },
}

local MACROS = {
    ["@hourly"] = "0 * * * *",
    ["@daily"] = "0 0 * * *",
    ["@midnight"] = "0 0 * * *",
    ["@weekly"] = "0 0 * * 0",
    ["@monthly"] = "0 0 1 * *",
    ["@yearly"] = "0 0 1 1 *",
    ["@annually"] = "0 0 1 1 *",
}

local DAY_MS = 86400000
local MAX_SEARCH_DAYS = 366 * 8 + 2  -- Feb 29 on a Monday recurs within 28 years; 8 covers leap days


--- Days since 1970-01-01 for a civil date (proleptic Gregorian).
function _M.days_from_civil(y, m, d)
    y = m <= 2 and y - 1 or y
    local era = math.floor(y / 400)
    local yoe = y - era * 400
    local mp = (m + 9) % 12
    local doy = math.floor((153 * mp + 2) / 5) + d - 1
    local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
    return era * 146097 + doe - 719468
end


--- Civil date (y, m, d) of a day count since the epoch.
_M.civil_from_days = rfc3339.civil_from_days


local function parse_value(text, field)
    local n = tonumber(text)
    if n == nil and field.names then
        n = field.names[text:lower()]
    end
    if n == nil or n % 1 ~= 0 or n < field.min or n > field.max then
        return nil, string.format("%s: %q is not a value from %d to %d%s", field.name, text, field.min, field.max,
            field.names and " or a name" or "")
    end
    return n
end


local function parse_part(part, field, set)
    local range, step = part:match("^([^/]+)/(%d+)$")
    if not range then
        range, step = part, nil
    end
    step = step and tonumber(step)
    if step == 0 then
        return nil, field.name .. ": a step must be at least 1"
    end
    local lo, hi
    if range == "*" then
        lo, hi = field.min, field.max
    else
        local a, b = range:match("^([^-]+)-([^-]+)$")
        local err
        if a then
            lo, err = parse_value(a, field)
            if not lo then return nil, err end
            hi, err = parse_value(b, field)
            if not hi then return nil, err end
            if hi < lo then
                return nil, string.format("%s: range %s goes backwards", field.name, range)
            end
        else
            lo, err = parse_value(range, field)
            if not lo then return nil, err end
            hi = step and field.max or lo  -- `5/15` means 5-max/15, as in Vixie cron
        end
    end
    for v = lo, hi, step or 1 do
        set[v] = true
    end
    return true
end


local function parse_field(text, field)
    local set = {}
    for part in (text .. ","):gmatch("([^,]*),") do
        if part == "" then
            return nil, field.name .. ": empty list element"
        end
        local ok, err = parse_part(part, field, set)
        if not ok then
            return nil, err
        end
    end
    return set
end


--- Parses a cron expression. @return schedule | nil, reason
function _M.parse(expr)
    if type(expr) ~= "string" then
        return nil, "a cron expression is a string of 5 fields"
    end
    local fields = expr
    if expr:sub(1, 1) == "@" then
        fields = MACROS[expr:lower()]
        if not fields then
            return nil, string.format("unknown macro %q (allowed: @hourly, @daily, @weekly, @monthly, @yearly)", expr)
        end
    end
    local words = {}
    for w in fields:gmatch("%S+") do
        words[#words + 1] = w
    end
    if #words ~= 5 then
        return nil, string.format('%q has %d fields; cron takes 5 (minute hour day-of-month month day-of-week), '
            .. 'e.g. "0 3 * * *"', expr, #words)
    end
    local sets = {}
    for i, field in ipairs(FIELDS) do
        local set, err = parse_field(words[i], field)
        if not set then
            return nil, err
        end
        sets[i] = set
    end
    if sets[5][7] then
        sets[5][0] = true  -- Sunday is both 0 and 7
    end
    return {
        text = expr, minute = sets[1], hour = sets[2], dom = sets[3], month = sets[4], dow = sets[5],
        dom_any = words[3]:sub(1, 1) == "*", dow_any = words[5]:sub(1, 1) == "*",
    }
end


local function day_matches(c, days)
    local _, m, d = _M.civil_from_days(days)
    if not c.month[m] then
        return false
    end
    local weekday = (days + 4) % 7  -- 1970-01-01 was a Thursday
    local dom_ok, dow_ok = c.dom[d] == true, c.dow[weekday] == true
    if c.dom_any and c.dow_any then
        return true
    elseif c.dom_any then
        return dow_ok
    elseif c.dow_any then
        return dom_ok
    end
    return dom_ok or dow_ok
end
_M.day_matches = day_matches


-- The latest (or earliest, with first) matching minute of a day within
-- [from_min, to_min], as minutes of the day, or nil.
local function minute_in_day(c, from_min, to_min, latest)
    local h0, h1, hs = 0, 23, 1
    if latest then
        h0, h1, hs = 23, 0, -1
    end
    for h = h0, h1, hs do
        if c.hour[h] then
            local m0, m1, ms = 0, 59, 1
            if latest then
                m0, m1, ms = 59, 0, -1
            end
            for m = m0, m1, ms do
                local minute = h * 60 + m
                if c.minute[m] and minute >= from_min and minute <= to_min then
                    return minute
                end
            end
        end
    end
    return nil
end


--- The latest occurrence at or before t_ms, in ms (whole minutes), or nil.
function _M.prev(c, t_ms)
    local day = math.floor(t_ms / DAY_MS)
    local last_min = math.floor((t_ms - day * DAY_MS) / 60000)
    for i = 0, MAX_SEARCH_DAYS do
        local d = day - i
        if day_matches(c, d) then
            local minute = minute_in_day(c, 0, i == 0 and last_min or 1439, true)
            if minute then
                return d * DAY_MS + minute * 60000
            end
        end
    end
    return nil
end


--- The earliest occurrence strictly after t_ms, in ms, or nil.
function _M.next(c, t_ms)
    local after = math.floor(t_ms / 60000) * 60000 + 60000
    local day = math.floor(after / DAY_MS)
    local first_min = math.floor((after - day * DAY_MS) / 60000)
    for i = 0, MAX_SEARCH_DAYS do
        local d = day + i
        if day_matches(c, d) then
            local minute = minute_in_day(c, i == 0 and first_min or 0, 1439, false)
            if minute then
                return d * DAY_MS + minute * 60000
            end
        end
    end
    return nil
end


return _M
