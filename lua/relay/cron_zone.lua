--- Cron occurrences in a time zone (relay.tzif), with the daylight saving
-- rules Kubernetes documents for CronJobs: a wall-clock time that a
-- spring-forward skips does not run that day, and one that a fall-back
-- repeats runs once, at its first instant.
--
-- The zone's timeline is a list of segments of constant offset. Within a
-- segment, wall time is instant + offset, so relay.cron (which counts
-- minutes on a plain timeline) finds candidates on the wall clock. A wall
-- time counts only at its first instant: in the segment after a fall-back,
-- wall times below the previous segment's end were already seen. Across
-- segments, first-seen wall times only grow with the instant, which lets
-- the search carry the last candidate over into the next segment.
local cron = require("relay.cron")
local tzif = require("relay.tzif")

local _M = {}

-- Two segments a year: enough for a cron that fires once in 28 years.
local MAX_SEGMENTS = 64


--- The bounds and offsets of segment k: start, end (nil: unbounded),
-- offset, and the offset before it (nil for the first).
local function segment(zone, k)
    return zone.at[k], zone.at[k + 1], zone.offset[k], zone.offset[k - 1]
end


--- The earliest occurrence strictly after t_ms in zone, in ms, or nil.
function _M.next(c, t_ms, zone)
    local k = tzif.segment(zone, t_ms)
    local floor_wall = -math.huge  -- the search never goes back on the wall clock
    for _ = 1, MAX_SEGMENTS do
        local start, finish, offset, before = segment(zone, k)
        local lower = math.max(t_ms + offset, floor_wall)
        if start and start > t_ms then
            lower = math.max(lower, start + offset - 1)
        end
        if before and before > offset then
            lower = math.max(lower, start + before - 1)  -- wall times repeated by a fall-back
        end
        local wall = cron.next(c, lower)
        if not wall then
            return nil
        end
        if not finish or wall - offset < finish then
            return wall - offset
        end
        floor_wall = wall - 1
        k = k + 1
    end
    return nil
end


--- The latest occurrence at or before t_ms in zone, in ms, or nil.
function _M.prev(c, t_ms, zone)
    local k = tzif.segment(zone, t_ms)
    local ceiling_wall = math.huge
    for _ = 1, MAX_SEGMENTS do
        local start, finish, offset, before = segment(zone, k)
        local upper = math.min((finish and math.min(t_ms, finish - 1) or t_ms) + offset, ceiling_wall)
        local wall = cron.prev(c, upper)
        if not wall then
            return nil
        end
        local first_wall = start and start + math.max(offset, before or offset) or -math.huge
        if wall >= first_wall then
            return wall - offset
        end
        if k == 0 then
            return nil
        end
        ceiling_wall = wall
        k = k - 1
    end
    return nil
end


return _M
