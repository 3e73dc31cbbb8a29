--- IANA time zones read from the system's TZif files (RFC 8536) under
-- /usr/share/zoneinfo, for schedules' `timezone:`. A zone is a plain table:
--   { name, at = {transition ms…}, offset = {[0] = before the first, …} }
-- offset[k] (ms east of UTC) holds from at[k] until at[k + 1]. Transitions
-- past the file's last one come from its footer (a POSIX TZ rule), up to
-- LAST_RULE_YEAR, so slim and fat files read alike.
-- The process's own TZ and the C library's zone cache are never involved.
local cron = require("relay.cron")
local fs = require("relay.fs")
local textutil = require("relay.text")

local _M = {}

_M.ZONEINFO = "/usr/share/zoneinfo"
local LAST_RULE_YEAR = 2200
local DAY_S = 86400
local NAME = "^[A-Za-z0-9_+-]+$"


--- Whether name is a plain relative path of zone name parts (no `..`,
-- nothing absolute), so it cannot name a file outside ZONEINFO.
local function valid_name(name)
    if type(name) ~= "string" or name == "" or #name > 255 then
        return false
    end
    for part in (name .. "/"):gmatch("([^/]*)/") do
        if not part:match(NAME) or part:match("^%.") then
            return false
        end
    end
    return true
end


local function uint(data, pos, size)
    local n = 0
    for i = pos, pos + size - 1 do
        n = n * 256 + data:byte(i)
    end
    return n
end


local function int(data, pos, size)
    local n = uint(data, pos, size)
    local half = 2 ^ (8 * size - 1)
    return n >= half and n - 2 * half or n
end


local COUNT_NAMES = { "isutcnt", "isstdcnt", "leapcnt", "timecnt", "typecnt", "charcnt" }


local function header(data, pos)
    if data:sub(pos, pos + 3) ~= "TZif" or #data < pos + 43 then
        return nil
    end
    local h = { version = data:sub(pos + 4, pos + 4) }
    for i, name in ipairs(COUNT_NAMES) do
        h[name] = uint(data, pos + 20 + (i - 1) * 4, 4)
    end
    return h
end


--- One data block (time_size 4 for v1, 8 for v2+) starting at pos.
-- @return { times, idx, utoffs }, the position after the block
local function data_block(data, pos, h, time_size)
    local times, idx, utoffs = {}, {}, {}
    for i = 1, h.timecnt do
        times[i] = int(data, pos + (i - 1) * time_size, time_size)
    end
    pos = pos + h.timecnt * time_size
    for i = 1, h.timecnt do
        idx[i] = data:byte(pos + i - 1)
    end
    pos = pos + h.timecnt
    for i = 0, h.typecnt - 1 do
        utoffs[i] = int(data, pos + i * 6, 4)
    end
    pos = pos + h.typecnt * 6 + h.charcnt + h.leapcnt * (time_size + 4) + h.isstdcnt + h.isutcnt
    return { times = times, idx = idx, utoffs = utoffs }, pos
end


--- [+-]hh[:mm[:ss]] as seconds; sign is the text's own (POSIX offsets
-- count west, rule times count forward). @return seconds, rest | nil
local function clock(text)
    local sign, h, rest = text:match("^([+-]?)(%d+)(.*)$")
    if not h then
        return nil
    end
    local s = tonumber(h) * 3600
    local m, rest2 = rest:match("^:(%d+)(.*)$")
    if m then
        s, rest = s + tonumber(m) * 60, rest2
        local sec, rest3 = rest:match("^:(%d+)(.*)$")
        if sec then
            s, rest = s + tonumber(sec), rest3
        end
    end
    return sign == "-" and -s or s, rest
end


local function zone_abbrev(text)
    local quoted, rest = text:match("^<([^>]*)>(.*)$")
    if quoted then
        return quoted, rest
    end
    return text:match("^(%a%a%a+)(.*)$")
end


local function is_leap(y)
    return y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)
end


local MONTH_DAYS = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }


--- A POSIX rule date (Jn, n or Mm.w.d) in year as days since the epoch.
local function rule_day(date, year)
    local jan1 = cron.days_from_civil(year, 1, 1)
    local m, w, d = date.m, date.w, date.d
    if date.kind == "J" then
        return jan1 + date.n - 1 + ((is_leap(year) and date.n >= 60) and 1 or 0)
    elseif date.kind == "n" then
        return jan1 + date.n
    end
    local first = cron.days_from_civil(year, m, 1)
    local day = 1 + (d - (first + 4) % 7 + 7) % 7 + (w - 1) * 7
    local dim = MONTH_DAYS[m] + ((m == 2 and is_leap(year)) and 1 or 0)
    while day > dim do
        day = day - 7
    end
    return first + day - 1
end


--- `,date[/time]`: @return { kind, n | m, w, d, time }, rest | nil
local function rule_date(text)
    local body, rest = text:match("^,([^,]+)(.*)$")
    if not body then
        return nil
    end
    local date_text, time_text = body:match("^([^/]+)/?(.*)$")
    local date = { time = 7200 }
    if time_text ~= "" then
        date.time = clock(time_text)
    end
    local m, w, d = date_text:match("^M(%d+)%.(%d)%.(%d)$")
    if m then
        date.kind, date.m, date.w, date.d = "M", tonumber(m), tonumber(w), tonumber(d)
        if date.m < 1 or date.m > 12 or date.w < 1 or date.w > 5 or date.d > 6 then
            return nil
        end
    elseif date_text:match("^J%d+$") then
        date.kind, date.n = "J", tonumber(date_text:sub(2))
    elseif date_text:match("^%d+$") then
        date.kind, date.n = "n", tonumber(date_text)
    else
        return nil
    end
    return date, rest
end


--- The footer's POSIX TZ string: { std, dst, start, finish } in seconds
-- east of UTC, or nil when it has none or cannot be read.
local function posix_rule(tz)
    local _, rest = zone_abbrev(tz or "")
    local west
    west, rest = clock(rest or "")
    if not west then
        return nil
    end
    local rule = { std = 0 - west + 0 }
    local dst_name, after = zone_abbrev(rest)
    if not dst_name then
        return rest == "" and rule or nil
    end
    local dst_west, after_offset = clock(after)
    rule.dst = dst_west and -dst_west or rule.std + 3600
    rest = dst_west and after_offset or after
    rule.start, rest = rule_date(rest)
    if rule.start then
        rule.finish, rest = rule_date(rest)
    end
    if not (rule.start and rule.finish) or rest ~= "" then
        return nil
    end
    return rule
end


--- The rule's transitions of one year: { {at_s, utoff}, … } in time order.
local function rule_transitions(rule, year)
    local start = rule_day(rule.start, year) * DAY_S + rule.start.time - rule.std
    local finish = rule_day(rule.finish, year) * DAY_S + rule.finish.time - rule.dst
    local out = { { start, rule.dst }, { finish, rule.std } }
    table.sort(out, function(a, b) return a[1] < b[1] end)
    return out
end


local function year_of(seconds)
    return (cron.civil_from_days(math.floor(seconds / DAY_S)))
end


--- Builds the zone table from the file's newest data block and footer.
local function build(name, block, footer)
    local zone = { name = name, at = {}, offset = { [0] = (block.utoffs[0] or 0) * 1000 } }
    for i, t in ipairs(block.times) do
        zone.at[i] = t * 1000
        zone.offset[i] = block.utoffs[block.idx[i]] * 1000
    end
    local rule = posix_rule(footer)
    if not (rule and rule.dst) then
        if rule and #block.times == 0 then
            zone.offset[0] = rule.std * 1000
        end
        return zone
    end
    local last = block.times[#block.times]
    for year = last and year_of(last) or 1970, LAST_RULE_YEAR do
        for _, tr in ipairs(rule_transitions(rule, year)) do
            if not last or tr[1] > last then
                zone.at[#zone.at + 1] = tr[1] * 1000
                zone.offset[#zone.at] = tr[2] * 1000
            end
        end
    end
    return zone
end


--- Parses TZif bytes. @return zone | nil, reason
function _M.parse(data, name)
    local h = header(data or "", 1)
    if not h then
        return nil, "not a TZif file"
    end
    local block, pos = data_block(data, 45, h, 4)
    local footer
    if h.version >= "2" then
        local h2 = header(data, pos)
        if not h2 then
            return nil, "truncated TZif file"
        end
        block, pos = data_block(data, pos + 44, h2, 8)
        footer = data:sub(pos):match("^\n([^\n]*)\n")
    end
    return build(name, block, footer)
end


--- Loads a zone by its IANA name. @return zone | nil, reason
function _M.load(name)
    if not valid_name(name) then
        return nil, string.format("%q is not a time zone name (like Europe/Berlin)", tostring(name))
    end
    local path = _M.ZONEINFO .. "/" .. name
    local data = fs.is_dir(path) and nil or fs.read_file(path)
    if not data then
        return nil, string.format("unknown time zone %q (no %s)", name, path)
    end
    local zone, err = _M.parse(data, name)
    if not zone then
        return nil, string.format("time zone %q: %s: %s", name, path, err)
    end
    return zone
end


--- A zone name next to a misspelt one (same directory, at most two
-- edits away), or nil.
function _M.similar(name)
    if type(name) ~= "string" then
        return nil
    end
    local dir, base = name:match("^(.*)/([^/]*)$")
    local entries = valid_name(dir or "UTC") and fs.list(_M.ZONEINFO .. (dir and "/" .. dir or ""))
    local best, best_d
    for _, entry in ipairs(entries or {}) do
        local d = textutil.edit_distance((base or name):lower(), entry.name:lower())
        if not entry.dir and entry.name:match(NAME) and (not best_d or d < best_d) then
            best, best_d = entry.name, d
        end
    end
    if best_d and best_d <= 2 then
        return dir and dir .. "/" .. best or best
    end
    return nil
end


--- The segment of the zone's timeline holding t_ms: k with at[k] <= t_ms
-- < at[k + 1] (0 before the first transition).
function _M.segment(zone, t_ms)
    local lo, hi = 0, #zone.at
    while lo < hi do
        local mid = math.floor((lo + hi + 1) / 2)
        if zone.at[mid] <= t_ms then
            lo = mid
        else
            hi = mid - 1
        end
    end
    return lo
end


--- The zone's offset from UTC at t_ms, in ms.
function _M.offset_at(zone, t_ms)
    return zone.offset[_M.segment(zone, t_ms)]
end


return _M
