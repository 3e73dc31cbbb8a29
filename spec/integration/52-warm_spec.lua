-- Warm one-shot starts (relay.runtime.warm_pool) against a real daemon and
-- runc: after an app's first (cold) start its pool holds pre-created
-- containers waiting in relay-init; a taken one runs its handler with the
-- invocation's own environment and event, full timeout, timeout kill and
-- output capture; `warm: 0` stays cold; reload, pause, an idle pool,
-- SIGTERM and a SIGKILLed daemon leave no waiting container behind; bwrap
-- starts warm too.
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local world = require("helpers.world")

local usable = world.usable({ compressed = true })
local with_bwrap = world.usable({ compressed = true, tools = { "runc", "bwrap" } })

-- Prints what the handler was started with, then acts on the event's "do".
local HANDLER = [[#!/bin/sh
ev=$(cat)
echo "saw H=$RELAY_HANDLER A=$RELAY_ATTEMPT M=$RELAY_MESSAGE_ID T=$RELAY_TRIGGER D=${RELAY_DEADLINE:+set} E=$ev"
case "$ev" in
*'"do":"nap"'*) sleep 1; echo "woke" ;;
*'"do":"hang"'*) echo "hanging"; sleep 30 ;;
esac
]]


--- An apps dir with app `wm` (handlers one, two, nap: 3 s, hang: 1 s) and,
-- with `warm: 0`, app `wc` (handler cold).
local function make_apps()
    local dir = daemon.tmpdir("warm-apps")
    local function app(name, extra, handlers)
        assert(fs.mkdir_p(dir .. "/" .. name))
        assert(fs.write_file(dir .. "/" .. name .. "/h.sh", HANDLER))
        local t = { "runtime: {image: host, command: [/bin/sh, /app/h.sh]}", extra, "events:" }
        for _, h in ipairs(handlers) do
            t[#t + 1] = string.format("  - {handler: %s, pattern: {t: [%s]}, timeout: %s, retries: 0}",
                h[1], h[1], h[2])
        end
        assert(fs.write_file(dir .. "/" .. name .. "/template.yaml", table.concat(t, "\n") .. "\n"))
    end
    app("wm", "concurrency: 2", { { "one", "20s" }, { "two", "20s" }, { "nap", "3s" }, { "hang", "1s" } })
    app("wc", "warm: 0", { { "cold", "20s" } })
    return dir
end


local function warm_ids(d)
    local out = {}
    for _, id in ipairs(d:runc_list()) do
        if id:find("-warm-", 1, true) then
            out[#out + 1] = id
        end
    end
    return out
end


local maybe = usable and describe or pending
local maybe_bwrap = with_bwrap and describe or pending

maybe("warm one-shot starts #compressed", function()
    local w, apps, d

    before_each(function()
        apps = make_apps()
        w = world.new({ apps = apps })
        d = w:started("c1")
    end)

    after_each(function()
        w = world.close(w)
        fs.rm_rf(apps)
    end)

    --- Publishes {t, do} and waits for its attempt's log record; returns it
    -- and the message id.
    local function run(t, what, outcome)
        local id = w:publish(string.format('{"t":"%s","do":"%s"}', t, what or ""))
        local needle = "attempt " .. (outcome or "succeeded")
        d:wait_until(function()
            for _, l in ipairs(d:grep(needle)) do
                if l:find("message_id=" .. id, 1, true) then
                    return true
                end
            end
        end, 30, needle .. " of " .. id)
        for _, l in ipairs(d:grep(needle)) do
            if l:find("message_id=" .. id, 1, true) then
                return l, id
            end
        end
    end

    local function pool_filled()
        d:wait_until(function() return #warm_ids(d) >= 2 end, 20, "the pool filled")
    end

    --- The handler's report line of message id.
    local function saw(id)
        for _, l in ipairs(d:grep("] saw ")) do
            if l:find("M=" .. id, 1, true) then
                return l
            end
        end
    end

    it("starts a later invocation in a pre-created container with its own values", function()
        local first = run("one")
        assert.is_nil(first:find("warm=true", 1, true), first)
        pool_filled()
        local line, id = run("two")
        assert.truthy(line:find("warm=true", 1, true), line)
        assert.matches("saw H=two A=1 M=" .. id:gsub("%-", "%%-") .. " T=event D=set E={\"t\":\"two\",\"do\":\"\"}$",
            saw(id))
        -- the same pool serves the app's other handler
        pool_filled()
        line, id = run("one")
        assert.truthy(line:find("warm=true", 1, true), line)
        assert.matches("saw H=one A=1 M=" .. id:gsub("%-", "%%-") .. " ", saw(id))
        assert.are.equal(0, d:stop("TERM", 15).code)
    end)

    it("gives a container that waited longer than the timeout its full timeout", function()
        run("one")
        pool_filled()
        local since = loop.monotonic()
        -- the premise: the waiting containers are older than nap's 3 s timeout
        d:wait_until(function() return loop.monotonic() - since > 4 end, 10, "the containers aged")
        local line, id = run("nap", "nap")
        assert.truthy(line:find("warm=true", 1, true), line)
        assert.truthy(d:grep("[wm/nap " .. id .. "#1] woke")[1], d:tail(20))
    end)

    it("kills a warm handler at its timeout and keeps its output", function()
        run("one")
        pool_filled()
        local line, id = run("hang", "hang", "timed out")
        assert.truthy(line:find("warm=true", 1, true), line)
        assert.truthy(d:grep("[wm/hang " .. id .. "#1] hanging")[1], d:tail(20))
    end)

    it("starts cold with warm: 0", function()
        run("cold", nil, "succeeded")
        local line = run("cold", nil, "succeeded")
        assert.is_nil(line:find("warm=true", 1, true), line)
        assert.are.same({}, warm_ids(d))
    end)

    it("retires the pool on reload and on pause", function()
        run("one")
        pool_filled()
        d:signal("HUP")
        d:wait_until(function() return #warm_ids(d) == 0 end, 15, "no warm container after the reload")
        run("one")
        pool_filled()
        w:call("SADD", "relay:events:paused", "wm")
        d:wait_until(function() return #warm_ids(d) == 0 end, 15, "no warm container after the pause")
    end)

    it("retires a pool no one took from for warm_idle_ms (5 s in this build)", function()
        run("one")
        pool_filled()
        d:wait_until(function() return #warm_ids(d) == 0 end, 30, "the idle pool retired")
        assert.truthy(d:alive())
    end)

    it("exits promptly on SIGTERM with a filled pool and leaves nothing", function()
        run("one")
        pool_filled()
        assert.are.equal(0, d:stop("TERM", 15).code)
        d:wait_until(function() return #d:runc_list() == 0 end, 10, "no container left")
    end)

    it("leaves no waiting container behind a SIGKILLed daemon", function()
        run("one")
        pool_filled()
        d:kill9()
        d:wait_until(function() return #d:runc_list() == 0 end, 10, "no container left")
    end)
end)


maybe_bwrap("warm one-shot starts under bwrap #compressed", function()
    local w, apps

    after_each(function()
        w = world.close(w)
        fs.rm_rf(apps)
    end)

    it("starts a later invocation warm, with its own values", function()
        apps = make_apps()
        w = world.new({ apps = apps })
        local d = w:started("b1", { RELAY_RUNTIME = "bwrap" })
        -- no runc list to watch the pool fill: the starts after the first
        -- are warm once it has (each waits for the previous outcome)
        local warm_line, id
        for _ = 1, 20 do
            id = w:publish('{"t":"two","do":""}')
            d:wait_until(function() return #d:grep("message_id=" .. id) > 0 end, 30, "the attempt of " .. id)
            local line = d:grep("message_id=" .. id)[1]
            if line:find("warm=true", 1, true) then
                warm_line = line
                break
            end
        end
        assert.truthy(warm_line, d:tail(20))
        assert.matches("attempt succeeded", warm_line)
        assert.truthy(d:grep("] saw H=two A=1 M=" .. id .. " T=event D=set")[1], d:tail(10))
        assert.are.equal(0, d:stop("TERM", 15).code)
    end)
end)
