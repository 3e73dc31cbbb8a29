-- now() patterns are evaluated on Redis TIME, not on the daemon host's
-- clock: a daemon whose clock runs 6 minutes ahead (libfaketime, on the
-- daemon process only) still runs a handler for a fresh event matched by
-- `gt: "now()-5m"`, and still leaves an event 10 minutes old unmatched.
-- It runs on both builds (tag #faketime): the ASan build is told not to
-- insist on its runtime coming first, ahead of the preloaded library.
local fs = require("relay.fs")
local redis = require("relay.redis")
local rfc3339 = require("relay.rfc3339")
local world = require("helpers.world")

local LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

local maybe = (world.usable() and fs.exists(LIBFAKETIME)) and describe or pending

local CWD = io.popen("pwd"):read("*l")
local APPS = CWD .. "/spec/fixtures/clock-apps"
local AHEAD_MS = 6 * 60 * 1000


--- The ms of a log line's timestamp (2026-01-02T03:04:05.678Z ...).
local function line_ms(line)
    local y, mo, d, h, mi, s, ms = line:match("^(%d+)%-(%d+)%-(%d+)T(%d+):(%d+):(%d+)%.(%d+)Z")
    local days = os.time({ year = tonumber(y), month = tonumber(mo), day = tonumber(d), hour = 12 }) / 86400
    return (math.floor(days) * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)) * 1000 + tonumber(ms)
end


--- The group's last-delivered-id.
local function last_delivered(w)
    for _, g in ipairs(w:call("XINFO", "GROUPS", "events")) do
        local t = redis.pairs_to_table(g)
        if t.name == "relay" then
            return t["last-delivered-id"]
        end
    end
end


maybe("now() patterns on a daemon whose clock runs ahead #faketime", function()
    local w

    after_each(function() w = world.close(w) end)

    it("match on Redis TIME", function()
        w = world.new({ apps = APPS })
        local before = w:time_ms()
        local d = w:daemon("c1", {
            LD_PRELOAD = LIBFAKETIME, FAKETIME = "+6m", FAKETIME_DONT_RESET = "1",
            ASAN_OPTIONS = "detect_leaks=0:verify_asan_link_order=0",
        })
        w:ready(d)
        -- the preload took: the daemon's own clock (its log stamps) is ahead
        local started = d:grep("relay started")[1]
        local skew = line_ms(started) - before
        assert.is_true(skew > AHEAD_MS - 60000 and skew < AHEAD_MS + 60000,
            "the daemon's clock is not 6 min ahead: " .. started)
        local fresh = w:publish(string.format('{"ts":"%s"}', rfc3339.millis(w:time_ms())))
        local old = w:publish(string.format('{"ts":"%s"}', rfc3339.millis(w:time_ms() - 10 * 60 * 1000)))
        d:wait_until(function() return last_delivered(w) == old and w:pending() == 0 end, 20, "both settled")
        assert.matches("^succeeded:1:", w:inv(fresh)["recent/ok"] or "unmatched")
        assert.are.same({}, w:inv(old))
        local runs = d:runs("end")
        assert.are.equal(1, #runs)
        assert.are.equal(fresh, runs[1].id)
        assert.are.equal(0, d:stop("TERM").code)
    end)
end)
