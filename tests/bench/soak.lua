-- The fault soak (tests/bench/soak.sh wraps it): `relay run` replicas under
-- random kill -9 (restarted with the same or a new consumer name), Redis
-- SIGSTOP and SIGKILL (AOF, fsync always), and a mix of handlers (fast,
-- slow, flaky, failing, hanging), for MINUTES; then the chaos stops and
-- everything settles. Printed, never asserted:
--   events      published
--   executions  handler runs that started (recorded by the handler itself)
--   duplicates  events whose handler ran to its end more than once
--   lost        events that never became terminal (no success, no dead letter)
--   overlaps    a run that started while another run of the same event was
--               alive (each run holds a lock on its event's file for its
--               whole life: the kernel frees it only when the run is dead)
--   false dead letters  dead letters of events whose handler succeeds when
--               it is let run (fast, slow, flaky)
-- Runs are recorded in a witness redis-server over TCP, which the chaos
-- never touches (the handlers share the host network for it).
--   relay x-lua tests/bench/soak.lua MINUTES WORKDIR
local build = require("relay.core.build")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local redis = require("relay.redis")

package.path = "spec/?.lua;" .. package.path
local daemon = require("helpers.daemon")
local world = require("helpers.world")

local MINUTES = tonumber(arg[1]) or 10
local WORK = assert(arg[2], "usage: soak.lua MINUTES WORKDIR")
local REPLICAS = 2
local PUBLISH_EVERY_S = 0.25
local SETTLE_S = 180
local SIGSTOP, SIGCONT = 19, 18

-- kind -> weight; slow sleeps 1-3 s (timeout 10 s), hang outlives its 2 s timeout
local KINDS = { { "fast", 45 }, { "slow", 25 }, { "flaky", 15 }, { "failing", 8 }, { "hang", 7 } }
local SUCCEEDS = { fast = true, slow = true, flaky = true }

local HANDLER = [[
#!/bin/sh
# Soak handler: every run is recorded in the witness Redis and holds its
# event's lock file (fd 9) for its whole life; a run that cannot take it
# started while another run of the same event was alive.
w() { redis-cli -h 127.0.0.1 -p "$WITNESS_PORT" "$@" >/dev/null 2>&1; }
cat >/tmp/in
n=$(sed -n 's/.*"n":\([0-9]*\).*/\1/p' /tmp/in)
exec 9</app/locks/"$n"
flock -n 9 || w RPUSH overlaps "$n $RELAY_ATTEMPT $RELAY_HANDLER"
w RPUSH runs "$n $RELAY_ATTEMPT $RELAY_HANDLER"
case "$RELAY_HANDLER" in
  fast) ;;
  slow) sleep "$(sed -n 's/.*"s":\([0-9.]*\).*/\1/p' /tmp/in)" ;;
  flaky) [ "$RELAY_ATTEMPT" -ge 2 ] || exit 1 ;;
  failing) exit 3 ;;
  hang) trap '' TERM; sleep 3600 ;;
esac
w RPUSH done "$n"
]]


local function template(port)
    return table.concat({
        "runtime:", "  image: host", "  command: [/bin/sh, /app/h.sh]", "  network: host",
        '  env: {WITNESS_PORT: "' .. port .. '"}', "events:",
        "  - handler: fast", "    pattern: {t: [fast]}", "    timeout: 10s",
        "  - handler: slow", "    pattern: {t: [slow]}", "    timeout: 10s",
        "  - handler: flaky", "    pattern: {t: [flaky]}", "    timeout: 10s",
        "  - handler: failing", "    pattern: {t: [failing]}", "    retries: 1",
        "  - handler: hang", "    pattern: {t: [hang]}", "    timeout: 2s", "    retries: 0", "",
    }, "\n")
end


--- The witness: a redis-server on 127.0.0.1, outside the chaos.
local function start_witness()
    for _ = 1, 20 do
        local port = 20000 + math.random(0, 20000)
        local cmd = string.format("redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no " ..
            "--daemonize yes --pidfile %s/witness.pid --logfile %s/witness.log --dir %s", port, WORK, WORK, WORK)
        if os.execute(cmd) == 0 then
            local ok = pcall(daemon.wait_until, function()
                local c = redis.connect(require("relay.config").load({ REDIS_URL = "redis://127.0.0.1:" .. port }))
                if c and c:call("PING") then
                    return c
                end
            end, 5, "the witness")
            if ok then
                local c = redis.connect(require("relay.config").load({ REDIS_URL = "redis://127.0.0.1:" .. port }))
                return port, c
            end
        end
    end
    error("cannot start the witness redis-server")
end


local function pick_kind()
    local total = 0
    for _, k in ipairs(KINDS) do
        total = total + k[2]
    end
    local r = math.random(1, total)
    for _, k in ipairs(KINDS) do
        r = r - k[2]
        if r <= 0 then
            return k[1]
        end
    end
end


--- Publishes one event every PUBLISH_EVERY_S until state.publishing ends;
-- retries while Redis is away.
local function publisher(w, state, apps)
    loop.spawn(function()
        while state.publishing do
            local n = #state.events + 1
            local kind = pick_kind()
            assert(fs.write_file(apps .. "/soak/locks/" .. n, ""))
            local event = string.format('{"t":"%s","n":%d,"s":%.1f}', kind, n, 1 + math.random() * 2)
            local ok, id = pcall(w.publish, w, event)
            if ok then
                state.events[n] = { kind = kind, id = id }
            else
                loop.sleep(0.2)
            end
            loop.sleep(PUBLISH_EVERY_S)
        end
    end)
end


local function redis_pid(w)
    return w.server:pid()
end


--- One random fault; returns its name.
local function fault(w, state)
    local r = math.random()
    if r < 0.45 then
        local i = math.random(1, #state.live)
        local d = state.live[i]
        d:kill9()
        local name = math.random() < 0.5 and d.name or ("c" .. #state.names + 1)
        state.names[#state.names + 1] = name
        local nd = w:daemon(name)
        nd.name = name
        state.live[i] = nd
        return name == d.name and "kill -9 (same name)" or "kill -9 (new name)"
    elseif r < 0.70 then
        local pid = redis_pid(w)
        if pid then
            fs.kill(pid, SIGSTOP)
            loop.sleep(0.5 + math.random() * 3.5)
            fs.kill(pid, SIGCONT)
        end
        return "redis SIGSTOP"
    elseif r < 0.85 then
        w:stop_redis()
        loop.sleep(math.random() * 1.5)
        w:start_redis()
        return "redis SIGKILL"
    end
    return "none"
end


local function lrange(c, key)
    return c:call("LRANGE", key, 0, -1) or {}
end


local function count_by_n(list)
    local out = {}
    for _, l in ipairs(list) do
        local n = tonumber(l:match("^(%d+)"))
        out[n] = (out[n] or 0) + 1
    end
    return out
end


--- Whether event e is terminal: acknowledged with every invocation
-- terminal (~retained), or dead-lettered.
local function terminal(w, e, dead)
    if dead[e.id] then
        return true
    end
    local ok, v = pcall(w.call, w, "HGET", "relay:events:inv:" .. e.id, "~retained")
    return ok and type(v) == "string"
end


local function dead_letters(w)
    local out = {}
    for _, e in ipairs(w:dlq()) do
        out[e.fields.original_id] = e.fields.reason
    end
    return out
end


local function settle(w, state)
    local t0 = loop.monotonic()
    local open
    repeat
        local dead = dead_letters(w)
        open = 0
        for _, e in pairs(state.events) do
            if not terminal(w, e, dead) then
                open = open + 1
            end
        end
        if open > 0 then
            loop.sleep(1)
        end
    until open == 0 or loop.monotonic() - t0 > SETTLE_S
    return loop.monotonic() - t0
end


local function report(w, witness, state, faults, settled_s)
    local dead = dead_letters(w)
    local runs, done = lrange(witness, "runs"), count_by_n(lrange(witness, "done"))
    local overlaps = lrange(witness, "overlaps")
    local n_events, duplicates, lost, false_dl, true_dl = 0, 0, 0, 0, 0
    local reasons = {}
    for n, e in pairs(state.events) do
        n_events = n_events + 1
        if (done[n] or 0) > 1 then
            duplicates = duplicates + 1
        end
        if not terminal(w, e, dead) then
            lost = lost + 1
        end
        local reason = dead[e.id]
        if reason then
            reasons[e.kind .. ": " .. reason] = (reasons[e.kind .. ": " .. reason] or 0) + 1
            if SUCCEEDS[e.kind] then
                false_dl = false_dl + 1
            else
                true_dl = true_dl + 1
            end
        end
    end
    print(string.format("soak: %.1f min of faults, %d replicas (%s constants)", MINUTES, REPLICAS,
        build.test_constants and "compressed" or "release"))
    for name, k in pairs(faults) do
        print(string.format("  fault %-22s %d", name, k))
    end
    print(string.format("events %d", n_events))
    print(string.format("executions %d", #runs))
    print(string.format("duplicates %d", duplicates))
    print(string.format("lost %d", lost))
    print(string.format("overlaps %d", #overlaps))
    print(string.format("false dead letters %d", false_dl))
    print(string.format("(honest dead letters %d; settled %.0f s after the faults stopped)", true_dl, settled_s))
    for r, k in pairs(reasons) do
        print(string.format("  dead letter  %-50s %d", r, k))
    end
    for _, o in ipairs(overlaps) do
        print("  overlap: event/attempt/handler " .. o)
    end
end


local function main()
    math.randomseed(os.time() + loop.getpid())
    assert(fs.geteuid() == 0 and fs.which("runc"), "the soak needs root and runc")
    assert(fs.mkdir_p(WORK))
    local port, witness = start_witness()
    local apps = WORK .. "/apps"
    assert(fs.mkdir_p(apps .. "/soak/locks"))
    assert(fs.write_file(apps .. "/soak/template.yaml", template(port)))
    assert(fs.write_file(apps .. "/soak/h.sh", HANDLER))
    os.execute("chmod -R a+rX " .. apps)

    local w = world.new({ apps = apps, redis_args = "--appendonly yes --appendfsync always" })
    local state = { events = {}, live = {}, names = {}, publishing = true }
    for i = 1, REPLICAS do
        local d = w:daemon("c" .. i)
        d.name = "c" .. i
        state.names[#state.names + 1] = d.name
        state.live[i] = d
        w:ready(d)
    end
    publisher(w, state, apps)
    local faults = {}
    local stop_at = loop.monotonic() + MINUTES * 60
    while loop.monotonic() < stop_at do
        loop.sleep(1 + math.random() * 3)
        local ok, what = pcall(fault, w, state)
        what = ok and what or ("failed: " .. tostring(what))
        faults[what] = (faults[what] or 0) + 1
    end
    state.publishing = false
    local settled = settle(w, state)
    report(w, witness, state, faults, settled)
    for _, d in ipairs(state.live) do
        d:stop("TERM", 30)
    end
    w:close()
end


main()
