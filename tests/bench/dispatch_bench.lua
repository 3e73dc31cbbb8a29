-- Dispatch latency benchmark, run inside the host against a private Redis:
--   relay x-lua tests/bench/dispatch_bench.lua SOCKET WORKDIR [RUNS] [M]
-- (tests/bench/dispatch_bench.sh starts Redis and wraps it). The handler is
-- /bin/date +%s%N (image: host): the time it prints is its first instruction.
-- Measured, each in the same run:
--   relay run, concurrency 1 and 2: from XADD to handler start and to the
--     acknowledgement (polled every POLL_S), RUNS events (pairs at 2)
--   relay run, throughput: M events pre-loaded, concurrency 2
--   bare `runc run` of Relay's hardened bundle for the same handler, and bare
--     bwrap (plain namespaces, no Relay config): to start and to exit
-- Starts are cold only: warm one-shot starts (issue 15, item 1) do not exist
-- yet. Prints percentiles; asserts nothing about time.
local ffi = require("ffi")
local config = require("relay.config")
local fs = require("relay.fs")
local json = require("relay.runtime.json")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local runtime = require("relay.runtime")

local SOCK, WORK = arg[1], arg[2]
assert(SOCK and WORK, "usage: dispatch_bench.lua SOCKET WORKDIR [RUNS] [M]")
local RUNS = tonumber(arg[3]) or 40
local M = tonumber(arg[4]) or 40
local URL = "unix://" .. SOCK
local POLL_S = 0.001
local COLD_GAP_S = 0.05  -- runtime_bench.lua: every start cold, not riding another's cgroup lock
local HANDLER = "[/bin/date, '+%s%N']"

ffi.cdef [[
struct relay_bench_timespec { long tv_sec; long tv_nsec; };
int clock_gettime(int clk, struct relay_bench_timespec *ts);
]]
local ts = ffi.new("struct relay_bench_timespec")

--- Wall-clock nanoseconds (as a Lua number: ms resolution is not enough,
-- and the handler's `date +%s%N` is on the same clock).
local function realtime_ns()
    ffi.C.clock_gettime(0, ts)
    return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end

local function percentile(values, p)
    local s = { unpack(values) }
    table.sort(s)
    return s[math.max(1, math.ceil(p / 100 * #s))]
end

local function report(name, starts, dones, done_label)
    print(string.format("%-34s start p50 %6.1f p90 %6.1f p99 %6.1f ms | %s p50 %6.1f p90 %6.1f p99 %6.1f ms (n=%d)",
        name, percentile(starts, 50), percentile(starts, 90), percentile(starts, 99), done_label,
        percentile(dones, 50), percentile(dones, 90), percentile(dones, 99), #starts))
end

local function binary()
    local p = io.popen("readlink -f /proc/" .. loop.getpid() .. "/exe")
    local path = p:read("*l")
    p:close()
    return path
end
local RELAY = binary()

local function call(c, ...)
    local v, err = c:call(...)
    assert(v ~= nil, err)
    return v
end

local APPS = WORK .. "/apps"
local function write_app(concurrency)
    assert(fs.mkdir_p(APPS .. "/d"))
    assert(fs.write_file(APPS .. "/d/template.yaml", "runtime:\n  image: host\n  command: " .. HANDLER ..
        "\nconcurrency: " .. concurrency .. "\nevents:\n  - handler: h\n    pattern: {kind: [bench]}\n"))
end

-- bare runtimes -------------------------------------------------------------

write_app(1)
local app = assert(require("relay.apps").load_app(APPS, "d"))
local rt = runtime.new({ runtime = "runc", state_dir = WORK .. "/bare-state", consumer = "bench", private = true })
local driver = assert(rt:driver_for(app))
local inv = { handler = "h", trigger = "invoke", message_id = "bench", attempt = 1, deadline_ms = 0 }
local spec = assert(driver:prepare(app, inv))

--- Relay's hardened bundle for the handler, run by a shell's runc: no
-- control socket, so relay-init's -c is dropped (as runtime_bench.lua does).
local function bare_bundle()
    local cfg = driver:config(app, inv, spec.id .. "-bare", driver.host_rootfs, runtime.init_binary())
    local args = cfg.process.args
    local i = 2
    while args[i] and args[i] ~= "--" do
        if args[i] == "-c" then
            table.remove(args, i)
            table.remove(args, i)
        else
            i = i + 2
        end
    end
    local dir = spec.dir .. "-bare"
    assert(fs.mkdir_p(dir))
    assert(fs.write_file(dir .. "/config.json", json.encode(cfg)))
    return dir
end
local BUNDLE = bare_bundle()
local OUT = WORK .. "/bare.out"

--- Runs a shell command printing the handler's start; returns ms to start and to exit.
local function timed(cmd)
    local t0 = realtime_ns()
    assert(os.execute(cmd .. " </dev/null >" .. OUT) == 0, "failed: " .. cmd)
    local t1 = realtime_ns()
    local started = tonumber((assert(fs.read_file(OUT)):match("(%d+)")))
    return (started - t0) / 1e6, (t1 - t0) / 1e6
end

local function bare_runc(i)
    return timed(string.format("runc --root %s --log %s/runc.log --log-format json run --bundle %s %s-bare%d",
        driver.root, BUNDLE, BUNDLE, spec.id, i))
end

local function bare_bwrap()
    return timed("bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev /bin/date +%s%N")
end

local function bare_series(name, run)
    local starts, exits = {}, {}
    for i = 1, RUNS do
        loop.sleep(COLD_GAP_S)
        starts[i], exits[i] = run(i)
    end
    report(name, starts, exits, "exit")
end

-- relay run -------------------------------------------------------------------

local function start_daemon(name, stream, concurrency)
    write_app(concurrency)
    local vars = {
        REDIS_URL = URL, REDIS_STREAM = stream, REDIS_GROUP = name, RELAY_CONSUMER = name, RELAY_RUNTIME = "runc",
        RELAY_STATE_DIR = WORK .. "/state", RELAY_LOG_LEVEL = "info", RELAY_APPS = APPS,
        MAX_CONCURRENCY = tostring(concurrency),
    }
    local words = {}
    for k, v in pairs(vars) do
        words[#words + 1] = k .. "='" .. v .. "'"
    end
    local log_path, pid_path = WORK .. "/" .. name .. ".log", WORK .. "/" .. name .. ".pid"
    assert(os.execute(string.format("env %s %s run >%s 2>&1 & echo $! >%s",
        table.concat(words, " "), RELAY, log_path, pid_path)) == 0)
    return { pid = tonumber(assert(fs.read_file(pid_path)):match("%d+")), log = log_path, name = name }
end

local function stop_daemon(d)
    fs.kill(d.pid, 15)
    while fs.read_file("/proc/" .. d.pid .. "/status") do
        loop.sleep(0.05)
    end
    runtime.remove_cgroup_dirs("relay/" .. d.name)
end

--- The start times the handlers printed, by message id, from the daemon's log.
local function handler_starts(d)
    local starts = {}
    for id, ns in (fs.read_file(d.log) or ""):gmatch("%[d/h ([%d%-]+)#%d+%] (%d+)") do
        starts[id] = tonumber(ns)
    end
    return starts
end

local function id_parts(id)
    local ms, seq = id:match("^(%d+)%-(%d+)$")
    return tonumber(ms), tonumber(seq)
end

--- Ids of `ids` the group has delivered and no longer holds pending.
local function acked_ids(c, stream, group, ids)
    local last = "0-0"
    for _, g in ipairs(call(c, "XINFO", "GROUPS", stream)) do
        local t = redis.pairs_to_table(g)
        if t.name == group then
            last = t["last-delivered-id"]
        end
    end
    local last_ms, last_seq = id_parts(last)
    local pending = {}
    for _, p in ipairs(call(c, "XPENDING", stream, group, "-", "+", 100)) do
        pending[p[1]] = true
    end
    local acked = {}
    for _, id in ipairs(ids) do
        local ms, seq = id_parts(id)
        local delivered = ms < last_ms or (ms == last_ms and seq <= last_seq)
        acked[id] = delivered and not pending[id]
    end
    return acked
end

local function wait_ready(c, stream, group)
    local deadline = loop.monotonic() + 30
    while loop.monotonic() < deadline do
        for _, g in ipairs(call(c, "XINFO", "GROUPS", stream)) do
            if redis.pairs_to_table(g).name == group then
                return
            end
        end
        loop.sleep(0.01)
    end
    error("relay run did not create its group")
end

--- XADDs `concurrency` events at once, RUNS in all, each batch after the
-- last was acknowledged; ms from XADD to handler start and to the ack.
local function relay_latency(c, concurrency)
    local stream, name = "lat" .. concurrency, "relay-lat" .. concurrency
    call(c, "XGROUP", "CREATE", stream, name, "$", "MKSTREAM")
    local d = start_daemon(name, stream, concurrency)
    wait_ready(c, stream, name)
    local added, acked = {}, {}
    for _ = 1, RUNS / concurrency do
        loop.sleep(COLD_GAP_S)
        local ids = {}
        for _ = 1, concurrency do
            local t0 = realtime_ns()
            local id = call(c, "XADD", stream, "*", "event", '{"kind":"bench"}')
            added[id], ids[#ids + 1] = t0, id
        end
        local deadline = loop.monotonic() + 30
        while #ids > 0 do
            assert(loop.monotonic() < deadline, "events not acknowledged within 30 s: see " .. d.log)
            local done, now = acked_ids(c, stream, name, ids), realtime_ns()
            local left = {}
            for _, id in ipairs(ids) do
                if done[id] then
                    acked[id] = now
                else
                    left[#left + 1] = id
                end
            end
            ids = left
            if #ids > 0 then
                loop.sleep(POLL_S)
            end
        end
    end
    stop_daemon(d)
    local starts, acks = {}, {}
    local printed = handler_starts(d)
    for id, t0 in pairs(added) do
        assert(printed[id], "no handler start logged for " .. id .. ": see " .. d.log)
        starts[#starts + 1], acks[#acks + 1] = (printed[id] - t0) / 1e6, (acked[id] - t0) / 1e6
    end
    report("relay run, concurrency " .. concurrency .. " (cold)", starts, acks, "ack")
end

--- M events pre-loaded, concurrency 2: invocations/s from launch to the last ack.
local function relay_throughput(c)
    local stream, name = "tput", "relay-tput"
    for _ = 1, M do
        call(c, "XADD", stream, "*", "event", '{"kind":"bench"}')
    end
    local t0 = loop.monotonic()
    local d = start_daemon(name, stream, 2)
    local deadline = t0 + 600
    while true do
        local ok, groups = pcall(call, c, "XINFO", "GROUPS", stream)
        local done = false
        for _, g in ipairs(ok and groups or {}) do
            local t = redis.pairs_to_table(g)
            done = done or (t.name == name and t["entries-read"] == M and t.pending == 0)
        end
        if done then
            break
        end
        assert(loop.monotonic() < deadline, "throughput run did not finish: see " .. d.log)
        loop.sleep(0.005)
    end
    local elapsed = loop.monotonic() - t0
    stop_daemon(d)
    print(string.format("relay run, trivial handler, concurrency 2 (cold): %.1f invocations/s (%d from launch, "
        .. "%.2f s)", M / elapsed, M, elapsed))
end

local c = assert(redis.connect(assert(config.load({ REDIS_URL = URL, REDIS_STREAM = "lat1" }))))
print(string.format("dispatch: handler /bin/date +%%s%%N (image: host), runc; %d events per series; cold starts "
    .. "only (warm one-shot starts not implemented yet)", RUNS))
bare_series("bare runc run (Relay's bundle)", bare_runc)
bare_series("bare bwrap (plain namespaces)", bare_bwrap)
relay_latency(c, 1)
relay_latency(c, 2)
relay_throughput(c)
c:close()
rt:close()
runtime.remove_cgroup_dirs("relay/bench")
