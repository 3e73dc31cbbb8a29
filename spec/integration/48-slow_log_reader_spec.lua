-- A slow log reader never stalls the loop: the daemon's stderr is a pipe
-- drained at about 100 KB/s (spec/fixtures/slow-stderr) while a handler
-- prints 40 MB. Another event's handler still runs promptly, the consumer
-- heartbeat never lapses, and what the reader could not take is dropped,
-- counted (relay_log_dropped_total) and said so in the log.
local cli = require("helpers.cli")
local endpoints = require("helpers.http")
local loop = require("relay.core.loop")
local world = require("helpers.world")

local maybe = world.usable({ tools = { "runc", "python3", "bash" }, compressed = true }) and describe or pending

local CWD = io.popen("pwd"):read("*l")
local APPS = CWD .. "/spec/fixtures/log-apps"
local SLOW_STDERR = CWD .. "/spec/fixtures/slow-stderr/run"
local PROMPT_S = 5  -- a container start under ASan, with room; the stall was 8 s and more


--- Watches a key's presence every 10 ms until stopped; the number of polls
-- that found it missing.
local function watch_key(w, key)
    local state = { missing = 0, polls = 0, running = true }
    loop.spawn(function()
        while state.running do
            if w.r:call("EXISTS", key) == 0 then
                state.missing = state.missing + 1
            end
            state.polls = state.polls + 1
            loop.sleep(0.01)
        end
    end)
    return state
end


maybe("a slow log reader #compressed", function()
    local w

    after_each(function() w = world.close(w) end)

    it("neither delays other handlers nor lets the heartbeat lapse; drops are counted", function()
        w = world.new({ apps = APPS })
        local port = endpoints.free_port()
        local d = w:daemon("c1", { RELAY_REAL_BIN = cli.binary(), RELAY_METRICS_ADDR = "127.0.0.1:" .. port },
            { bin = SLOW_STDERR })
        w:ready(d)
        local flood = w:publish('{"t":"flood"}')
        d:wait_until(function() return (w:inv(flood)["flood/flood"] or ""):find("^running:") end, 30, "the flood")
        local heartbeat = watch_key(w, "relay:events:consumer:" .. w:consumer("c1"))
        local t0 = loop.monotonic()
        local ok = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(ok)["~retained"] end, 30, "the other event's handler")
        local took = loop.monotonic() - t0
        assert.is_true(took < PROMPT_S, string.format("the other handler took %.1f s", took))
        d:wait_until(function() return w:inv(flood)["~retained"] end, 60, "the flood's end")
        heartbeat.running = false
        assert.are.equal(0, heartbeat.missing, heartbeat.missing .. " of " .. heartbeat.polls .. " polls")
        assert.is_true(endpoints.metric(port, "relay_log_dropped_total") > 0)
        d:wait_until(function() return d:count("log records dropped") > 0 end, 30, "the drop's record")
        assert.are.equal(0, d:stop("TERM", 30).code)
    end)
end)
