--- Redis TIME as a clock the daemon reads without a round trip: one TIME
-- call pins Redis's time to this process's monotonic clock, and a timer of
-- the clock's own repeats it every heartbeat period. Time-relative matching
-- (now() patterns) reads it, so that a host clock that is off (or stepped)
-- changes nothing: like every lifecycle decision, matching runs on Redis's
-- time.
local log = require("relay.log")
local loop = require("relay.core.loop")

local _M = {}

local MAX_RTT_S = 1  -- a sample whose round trip took longer is too vague to replace one
local FAILURE = "redis clock"  -- the log.failing name

local pin  -- { redis_ms, at = monotonic seconds } of the last good sample


--- Redis's time now, ms since the epoch; the host's clock until a first sample.
function _M.now_ms()
    if not pin then
        return loop.now_ms()
    end
    return pin.redis_ms + math.floor((loop.monotonic() - pin.at) * 1000)
end


--- Takes one sample with TIME: Redis's time is pinned to the middle of the
-- round trip. @return true | nil, err
function _M.refresh(client)
    local t0 = loop.monotonic()
    local t, err = client:call("TIME")
    local t1 = loop.monotonic()
    if type(t) ~= "table" then
        return nil, err
    end
    if pin and t1 - t0 > MAX_RTT_S then
        return nil, string.format("TIME took %.1f s", t1 - t0)
    end
    pin = { redis_ms = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000, at = (t0 + t1) / 2 }
    return true
end


local function refresh_logged(client)
    local ok, err = _M.refresh(client)
    if ok then
        log.recovered(FAILURE, "reading Redis TIME again")
    else
        log.failing(FAILURE, "cannot read Redis TIME; now() goes on from the last reading", { error = err })
    end
end


--- Takes a first sample in the calling task, then one every every_ms.
function _M.start(client, every_ms)
    refresh_logged(client)
    loop.spawn(function()
        while true do
            loop.sleep(every_ms / 1000)
            refresh_logged(client)
        end
    end)
end


--- Forgets the sample (specs).
function _M.reset()
    pin = nil
end


return _M
