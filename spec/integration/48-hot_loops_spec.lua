-- Error paths that repeat: a consumer group that cannot be recreated, a
-- Redis outage, a Redis restart that lost the data set. Each costs a bounded
-- number of commands and log lines: a WARN when the failure starts, one
-- "still failing" line per constants.still_failing_log_ms (a minute; a
-- second in the test build) and one INFO when it ends. Real redis-server,
-- real runc, compressed constants.
local constants = require("relay.constants")
local loop = require("relay.core.loop")
local world = require("helpers.world")

local maybe = world.usable({ compressed = true }) and describe or pending

local PERIOD_S = (constants.still_failing_log_ms or 60000) / 1000
local WINDOW_S = 3  -- how long each failure is watched
local READ_LINES = "WARN  consumer group"  -- the read loop's lines about a lost group


--- calls + rejected calls of one command since the last CONFIG RESETSTAT.
local function command_count(w, name)
    local info = w:call("INFO", "commandstats")
    local calls = info:match("cmdstat_" .. name:gsub("|", "%%|") .. ":calls=(%d+)")
    local rejected = info:match("cmdstat_" .. name:gsub("|", "%%|") .. ":[^\r\n]*rejected_calls=(%d+)")
    return (tonumber(calls) or 0) + (tonumber(rejected) or 0)
end


--- Relay's own lines (not handler output) from line index from on.
local function own_lines(d, from)
    local out = {}
    for i = from + 1, #d.lines do
        local l = d.lines[i]
        if not l:find("^%S+ INFO  %[") then
            out[#out + 1] = l
        end
    end
    return out
end


local function count_matching(lines, pattern)
    local n = 0
    for _, l in ipairs(lines) do
        if l:find(pattern) then
            n = n + 1
        end
    end
    return n
end


maybe("hot loops #compressed", function()
    local w

    after_each(function() w = world.close(w) end)

    it("backs off while the consumer group cannot be recreated (maxmemory 1)", function()
        w = world.new()
        local d = w:started("c1")
        w:call("CONFIG", "SET", "maxmemory", "1")  -- XGROUP CREATE is refused (OOM), XREADGROUP says NOGROUP
        local from = #d.lines
        w:call("XGROUP", "DESTROY", "events", "relay")
        d:wait_until(function() return d:count("consumer group") > 0 end, 10, "the group's loss noticed")
        local creates = command_count(w, "xgroup|create")
        local lines = count_matching(own_lines(d, from), READ_LINES)
        loop.sleep(WINDOW_S)  -- a measurement window, not a wait for something
        creates = command_count(w, "xgroup|create") - creates
        lines = count_matching(own_lines(d, from), READ_LINES) - lines
        -- capped exponential backoff from 0.1 s: a handful of attempts, not thousands
        assert.is_true(creates <= 12, creates .. " XGROUP CREATE in " .. WINDOW_S .. " s")
        -- one "still failing" line per period, plus one for a period cut by the window
        assert.is_true(lines <= math.ceil(WINDOW_S / PERIOD_S) + 1, lines .. " lines in " .. WINDOW_S .. " s:\n"
            .. d:tail(20))
        w:call("CONFIG", "SET", "maxmemory", "0")
        local id = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(id)["~retained"] end, 15, "a message once the group is back")
        d:wait_until(function() return d:count("reading the stream again") == 1 end, 5, "the recovery line")
        assert.are.equal(0, d:stop("TERM").code)
    end)

    it("logs a Redis outage once, once per period while it lasts, and its end", function()
        w = world.new({ redis_args = "--appendonly yes --appendfsync always" })
        local d = w:started("c1", { MAX_CONCURRENCY = 1 })
        -- one handler runs across the outage; two wait for the slot and try to
        -- start while Redis is away
        local ids = {}
        for i = 1, 3 do
            ids[i] = w:publish(string.format('{"t":"sleep","s":1.5,"i":%d}', i))
        end
        d:wait_until(function() return #d:runs("start") == 1 end, 10, "one running")
        local from = #d.lines
        local t0 = loop.monotonic()
        w:stop_redis()
        loop.sleep(WINDOW_S)  -- the outage itself
        w:start_redis()
        local down_s = loop.monotonic() - t0
        d:wait_until(function() return w:all_retained(ids) and w:pending() == 0 end, 30, "every message done")
        -- the daemon's outage ends when it has reconnected: up to the
        -- clients' reconnect backoff (5 s) after Redis is back
        local warnings = count_matching(own_lines(d, from), "^%S+ WARN ")
        assert.is_true(warnings <= math.ceil((down_s + 5) / PERIOD_S) + 2, warnings .. " warnings")
        d:wait_until(function() return d:count("reconnected to redis") > 0 end, 5, "the reconnection")
        local lines = own_lines(d, from)
        local text = table.concat(lines, "\n")
        assert.are.equal(1, count_matching(lines, "INFO  reconnected to redis"), text)
        assert.are.equal(1, count_matching(lines, "WARN  redis unreachable; retrying error="), text)
        local failed_s = tonumber(d:grep("reconnected to redis")[1]:match("failed_s=(%d+)"))
        assert.is_true(failed_s <= down_s + 6, text)
        local still = count_matching(lines, "still failing")
        assert.is_true(still <= math.ceil(failed_s / PERIOD_S) + 1, text)
        -- nothing else but the attempts' outcomes: no task logs its own
        -- failure while the outage is logged
        local outcomes = count_matching(lines, "INFO  attempt succeeded ")
        assert.is_true(outcomes <= #ids, text)
        assert.are.equal(2 + still + outcomes, #lines, text)
        assert.are.equal(0, d:stop("TERM").code)
    end)

    it("does not spin when a restart emptied the data set", function()
        w = world.new()
        local d = w:started("c1")
        local from, t0 = #d.lines, loop.monotonic()
        w:stop_redis()
        w:start_redis()  -- no AOF: an empty data set, the group gone
        local id = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(id)["~retained"] end, 20, "a message after the restart")
        -- the whole restart: XREADGROUP answered NOGROUP at most a few times
        assert.is_true(command_count(w, "xgroup|create") <= 5)
        assert.is_true(command_count(w, "xreadgroup") <= 40, command_count(w, "xreadgroup") .. " XREADGROUP")
        -- a line per change (lost, reconnected, the group recreated, reading
        -- again, other tasks' own failures and recoveries) and, for each of
        -- the few failures at a time, one per period
        local lines = own_lines(d, from)
        local text = table.concat(lines, "\n")
        local still = count_matching(lines, "still failing")
        assert.is_true(#lines - still <= 8, text)
        assert.is_true(still <= 3 * math.ceil((loop.monotonic() - t0) / PERIOD_S), text)
        assert.are.equal(0, d:stop("TERM").code)
    end)
end)
