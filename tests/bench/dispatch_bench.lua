-- Dispatch latency benchmark, run inside the host against a private Redis:
--   relay x-lua tests/bench/dispatch_bench.lua SOCKET WORKDIR [RUNS] [M]
-- (tests/bench/dispatch_bench.sh starts Redis and wraps it). The handler is
-- /bin/date +%s%N (image: host): the time it prints is its first instruction.
-- Measured, each in the same run:
--   relay run, concurrency 1 and 2, cold (`warm: 0`) and warm (the default
--     pool): from XADD to handler start and to the acknowledgement (polled
--     every POLL_S), RUNS events (pairs at 2). Both daemons run at once and
--     their batches alternate, with a bare runc and a bare bwrap run in each
--     round at concurrency 1, so load from elsewhere hits every series alike.
--     A warm batch is sent once the pool holds a container per event: the
--     steady state of a rate the pool keeps up with (its first, cold start
--     is a warm-up, not counted).
--   relay run, throughput: M events pre-loaded, concurrency 2, cold and warm
--   bare `runc run` of Relay's hardened bundle for the same handler, and bare
--     bwrap (plain namespaces, no Relay config): to start and to exit
-- Prints percentiles and the warm/bare-runc ratios at p50; asserts nothing
-- about time.
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

--- Writes app d under WORK/<tag>/ (warm: 0 unless warm) and returns its apps dir.
local function write_app(tag, concurrency, warm)
    local apps = WORK .. "/" .. tag
    assert(fs.mkdir_p(apps .. "/d"))
    assert(fs.write_file(apps .. "/d/template.yaml", "runtime:\n  image: host\n  command: " .. HANDLER ..
        "\nconcurrency: " .. concurrency .. (warm and "" or "\nwarm: 0") ..
        "\nevents:\n  - handler: h\n    pattern: {kind: [bench]}\n"))
    return apps
end

-- bare runtimes -------------------------------------------------------------

local app = assert(require("relay.apps").load_app(write_app("apps-bare", 1, false), "d"))
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

-- relay run -------------------------------------------------------------------

local function start_daemon(name, stream, concurrency, warm)
    local vars = {
        REDIS_URL = URL, REDIS_STREAM = stream, REDIS_GROUP = name, RELAY_CONSUMER = name, RELAY_RUNTIME = "runc",
        RELAY_STATE_DIR = WORK .. "/state", RELAY_LOG_LEVEL = "info", RELAY_APPS = write_app(name, concurrency, warm),
        MAX_CONCURRENCY = tostring(concurrency),
    }
    local words = {}
    for k, v in pairs(vars) do
        words[#words + 1] = k .. "='" .. v .. "'"
    end
    local log_path, pid_path = WORK .. "/" .. name .. ".log", WORK .. "/" .. name .. ".pid"
    assert(os.execute(string.format("env %s %s run >%s 2>&1 & echo $! >%s",
        table.concat(words, " "), RELAY, log_path, pid_path)) == 0)
    return { pid = tonumber(assert(fs.read_file(pid_path)):match("%d+")), log = log_path, name = name,
        stream = stream, concurrency = concurrency, added = {}, acked = {},
        runc_root = WORK .. "/state/" .. runtime.root_name(name, stream, name) .. "/runc" }
end

local function stop_daemon(d)
    fs.kill(d.pid, 15)
    while fs.read_file("/proc/" .. d.pid .. "/status") do
        loop.sleep(0.05)
    end
    runtime.remove_cgroup_dirs("relay/" .. runtime.root_name(d.name, d.stream, d.name))
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

--- Warm containers waiting in the daemon's pool (their runc state dirs).
local function warm_count(d)
    local n = 0
    for _, e in ipairs(fs.list(d.runc_root) or {}) do
        n = n + (e.name:find("-warm-", 1, true) and 1 or 0)
    end
    return n
end


local function wait_pool(d)
    local deadline = loop.monotonic() + 30
    while warm_count(d) < d.concurrency do
        assert(loop.monotonic() < deadline, "the warm pool did not fill: see " .. d.log)
        loop.sleep(POLL_S)
    end
end


--- XADDs one event per slot at once and waits for their acks; the times
-- go to d.added and d.acked (unless warmup).
local function batch(c, d, warmup)
    local ids = {}
    for _ = 1, d.concurrency do
        local t0 = realtime_ns()
        local id = call(c, "XADD", d.stream, "*", "event", '{"kind":"bench"}')
        ids[#ids + 1] = id
        if not warmup then
            d.added[id] = t0
        end
    end
    local deadline = loop.monotonic() + 30
    while #ids > 0 do
        assert(loop.monotonic() < deadline, "events not acknowledged within 30 s: see " .. d.log)
        local done, now = acked_ids(c, d.stream, d.name, ids), realtime_ns()
        local left = {}
        for _, id in ipairs(ids) do
            if done[id] then
                d.acked[id] = now
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


local function latency_daemon(c, concurrency, warm)
    local name = string.format("relay-%s%d", warm and "warm" or "cold", concurrency)
    call(c, "XGROUP", "CREATE", name, name, "$", "MKSTREAM")
    local d = start_daemon(name, name, concurrency, warm)
    wait_ready(c, name, name)
    if warm then
        batch(c, d, true)  -- the app's first start is cold: it fills the pool
    end
    return d
end


--- Medians of a finished daemon's series: { start = ms, done = ms } after reporting it.
local function report_daemon(d, label)
    stop_daemon(d)
    local starts, acks = {}, {}
    local printed = handler_starts(d)
    for id, t0 in pairs(d.added) do
        assert(printed[id], "no handler start logged for " .. id .. ": see " .. d.log)
        starts[#starts + 1], acks[#acks + 1] = (printed[id] - t0) / 1e6, (d.acked[id] - t0) / 1e6
    end
    report(label, starts, acks, "ack")
    return { start = percentile(starts, 50), done = percentile(acks, 50) }
end


local function series()
    return { starts = {}, exits = {} }
end


--- One latency run at a concurrency: cold and warm daemons side by side,
-- batches alternating, bare runtimes in each round when `bare` is given.
-- Returns the warm medians.
local function relay_latency(c, concurrency, bare)
    local cold, warm = latency_daemon(c, concurrency, false), latency_daemon(c, concurrency, true)
    for i = 1, RUNS / concurrency do
        if bare then
            loop.sleep(COLD_GAP_S)
            bare.runc.starts[i], bare.runc.exits[i] = bare_runc(i)
            loop.sleep(COLD_GAP_S)
            bare.bwrap.starts[i], bare.bwrap.exits[i] = bare_bwrap()
        end
        loop.sleep(COLD_GAP_S)
        batch(c, cold)
        wait_pool(warm)
        loop.sleep(COLD_GAP_S)
        batch(c, warm)
    end
    report_daemon(cold, "relay run, concurrency " .. concurrency .. " (cold)")
    return report_daemon(warm, "relay run, concurrency " .. concurrency .. " (warm)")
end


--- M events pre-loaded, concurrency 2: invocations/s from launch to the last ack.
local function relay_throughput(c, warm)
    local name = "relay-tput-" .. (warm and "warm" or "cold")
    for _ = 1, M do
        call(c, "XADD", name, "*", "event", '{"kind":"bench"}')
    end
    local t0 = loop.monotonic()
    local d = start_daemon(name, name, 2, warm)
    local deadline = t0 + 600
    while true do
        local ok, groups = pcall(call, c, "XINFO", "GROUPS", name)
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
    print(string.format("relay run, trivial handler, concurrency 2 (%s): %.1f invocations/s (%d from launch, "
        .. "%.2f s)", warm and "warm" or "cold", M / elapsed, M, elapsed))
end


local c = assert(redis.connect(assert(config.load({ REDIS_URL = URL, REDIS_STREAM = "lat1" }))))
print(string.format("dispatch: handler /bin/date +%%s%%N (image: host), runc; %d events per series, series "
    .. "interleaved", RUNS))
local bare = { runc = series(), bwrap = series() }
local warm1 = relay_latency(c, 1, bare)
report("bare runc run (Relay's bundle)", bare.runc.starts, bare.runc.exits, "exit")
report("bare bwrap (plain namespaces)", bare.bwrap.starts, bare.bwrap.exits, "exit")
local runc_start, runc_exit = percentile(bare.runc.starts, 50), percentile(bare.runc.exits, 50)
print(string.format("ratio warm/bare-runc at p50, concurrency 1: start %.2f, outcome (ack vs exit) %.2f",
    warm1.start / runc_start, warm1.done / runc_exit))
local warm2 = relay_latency(c, 2)
print(string.format("ratio warm/bare-runc at p50, concurrency 2: start %.2f, outcome (ack vs exit) %.2f",
    warm2.start / runc_start, warm2.done / runc_exit))
relay_throughput(c, false)
relay_throughput(c, true)
c:close()
rt:close()
runtime.remove_cgroup_dirs("relay/bench")
