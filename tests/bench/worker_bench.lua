-- Worker (daemon) benchmarks, run inside the host against a private Redis:
--   relay x-lua tests/bench/worker_bench.lua SOCKET WORKDIR WHICH [N] [M] [MSGS] [ROUNDS]
-- (tests/bench/worker_bench.sh starts Redis and wraps it). WHICH is a, b or c:
--   a  unmatched throughput: `relay run` (10 apps x 10 rules, none matching)
--      vs a raw XREADGROUP COUNT B + one XACK per batch loop; N events, each
--      side on its own fresh group over the same stream. For reference also
--      the raw loop at COUNT 256, the daemon's largest batch while nothing
--      matches (not the target's baseline)
--   b  matched events, trivial handler, MAX_CONCURRENCY=2 and app concurrency
--      2: `relay run` vs relay.runtime.invoke at concurrency 2; M each
--   c  RSS: idle daemon without apps, with 100 apps x 10 rules, and with
--      MSGS matched messages of paused apps read and left pending
--   t  the cost of TLS: (a)'s unmatched throughput of `relay run` over TCP,
--      redis:// vs rediss:// to the same server (BENCH_PLAIN_URL,
--      BENCH_TLS_URL, BENCH_TLS_CA: worker_bench.sh sets them), N events
--      each on its own fresh group, rounds alternating which goes first
-- Prints figures and ratio lines; errors raise (exit non-zero), missed
-- targets do not.
local config = require("relay.config")
local fs = require("relay.fs")
local invoke = require("relay.runtime.invoke")
local keys = require("relay.keys")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local runtime = require("relay.runtime")

local SOCK, WORK, WHICH = arg[1], arg[2], arg[3]
assert(SOCK and WORK and WHICH, "usage: worker_bench.lua SOCKET WORKDIR a|b|c [N] [M] [MSGS] [ROUNDS]")
local N = tonumber(arg[4]) or 200000
local M = tonumber(arg[5]) or 60
local MSGS = tonumber(arg[6]) or 1000
local ROUNDS = tonumber(arg[7]) or 3
local URL = "unix://" .. SOCK
local POLL_S = 0.01
local HANDLER_CMD = "[/bin/sh, -c, 'cat >/dev/null']"
local UNMATCHED_READ_MAX = 256  -- relay.worker's largest read of new entries while nothing matches

local function binary()
    local p = io.popen("readlink -f /proc/" .. loop.getpid() .. "/exe")
    local path = p:read("*l")
    p:close()
    return path
end
local RELAY = binary()

local function connect(stream)
    local cfg = assert(config.load({ REDIS_URL = URL, REDIS_STREAM = stream }))
    return assert(redis.connect(cfg))
end

local function call(c, ...)
    local v, err = c:call(...)
    assert(v ~= nil, err)
    return v
end

--- Appends n entries whose event is make(i) (a Lua expression over i, run
-- server side), in scripts of 10,000 XADDs.
local function preload(c, stream, n, make)
    local script = "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do " ..
        "redis.call('XADD', KEYS[1], '*', 'event', " .. make .. ") end return 1"
    for first = 1, n, 10000 do
        call(c, "EVAL", script, 1, stream, first, math.min(n, first + 9999))
    end
end

--- entries-read and pending of a group (Redis 7 XINFO GROUPS).
local function group_state(c, stream, group)
    for _, g in ipairs(call(c, "XINFO", "GROUPS", stream)) do
        local t = redis.pairs_to_table(g)
        if t.name == group then
            local read = t["entries-read"]
            return type(read) == "number" and read or 0, t.pending
        end
    end
    return 0, 0
end

--- An apps dir of n_apps apps with n_rules rules each. Rule j of app k
-- matches {"table_name":"t<k>","event_name":"e<j>"}; nothing else does.
local function write_apps(dir, n_apps, n_rules, extra)
    assert(fs.mkdir_p(dir))
    for k = 0, n_apps - 1 do
        local lines = { "runtime:", "  image: host", "  command: " .. HANDLER_CMD, extra or "", "events:" }
        for j = 0, n_rules - 1 do
            lines[#lines + 1] = string.format("  - handler: h%d\n    pattern: {table_name: [t%d], event_name: [e%d]}",
                j, k, j)
        end
        assert(fs.mkdir_p(dir .. "/a" .. k))
        assert(fs.write_file(dir .. "/a" .. k .. "/template.yaml", table.concat(lines, "\n") .. "\n"))
    end
end

--- CPU seconds (user + system) of a process, from /proc/<pid>/stat.
local function cpu_of(pid)
    local stat = assert(fs.read_file("/proc/" .. pid .. "/stat"))
    local utime, stime = stat:match("^%d+ %(.-%) %a" .. string.rep(" %S+", 10) .. " (%d+) (%d+)")
    return (tonumber(utime) + tonumber(stime)) / 100
end

--- CPU seconds of the redis-server.
local function redis_cpu(c)
    local info = call(c, "INFO", "cpu")
    return tonumber(info:match("used_cpu_user:([%d.]+)")) + tonumber(info:match("used_cpu_sys:([%d.]+)"))
end

local Daemon = {}
Daemon.__index = Daemon

--- Starts `relay run` in the background; env overrides the defaults.
local function start_daemon(name, env)
    local vars = {
        REDIS_URL = URL, REDIS_GROUP = name, RELAY_CONSUMER = name, RELAY_RUNTIME = "runc",
        RELAY_STATE_DIR = WORK .. "/state", RELAY_LOG_LEVEL = "warn",
    }
    for k, v in pairs(env) do
        vars[k] = v
    end
    local words = {}
    for k, v in pairs(vars) do
        words[#words + 1] = k .. "='" .. v .. "'"
    end
    local log_path, pid_path = WORK .. "/" .. name .. ".log", WORK .. "/" .. name .. ".pid"
    local t0 = loop.monotonic()
    assert(os.execute(string.format("env %s %s run >%s 2>&1 & echo $! >%s",
        table.concat(words, " "), RELAY, log_path, pid_path)) == 0)
    local pid = tonumber(assert(fs.read_file(pid_path)):match("%d+"))
    return setmetatable({ name = name, pid = pid, log = log_path, t0 = t0 }, Daemon)
end

function Daemon:running()
    local status = fs.read_file("/proc/" .. self.pid .. "/status")
    return status ~= nil and not status:find("State:%s+Z")
end

function Daemon:check()
    if not self:running() then
        error("relay run (" .. self.name .. ") exited early:\n" .. (fs.read_file(self.log) or ""))
    end
end

--- VmRSS and VmHWM in KiB.
function Daemon:memory()
    local status = assert(fs.read_file("/proc/" .. self.pid .. "/status"))
    return tonumber(status:match("VmRSS:%s+(%d+)")), tonumber(status:match("VmHWM:%s+(%d+)"))
end

function Daemon:stop()
    fs.kill(self.pid, 15)
    local deadline = loop.monotonic() + 15
    while self:running() and loop.monotonic() < deadline do
        loop.sleep(0.05)
    end
    if self:running() then
        fs.kill(self.pid, 9)
        error("relay run (" .. self.name .. ") did not stop on SIGTERM within 15 s")
    end
    local log_text = fs.read_file(self.log) or ""
    if log_text:find("level=error") or log_text:find('"level":"error"') then
        io.stderr:write("relay run (" .. self.name .. ") logged errors:\n", log_text)
    end
end

--- Polls until the group has read `total` entries and none is pending (or
-- pending == want_pending). Returns seconds from launch and from the first
-- read entry.
function Daemon:wait_group(c, stream, total, want_pending, timeout_s)
    local first
    local deadline = loop.monotonic() + timeout_s
    while true do
        local read, pending = group_state(c, stream, self.name)
        local now = loop.monotonic()
        if read > 0 and not first then
            first = now
        end
        if read == total and pending == (want_pending or 0) then
            return now - self.t0, now - first
        end
        if now > deadline then
            error(string.format("%s: timed out (entries-read %d of %d, pending %d)", self.name, read, total, pending))
        end
        self:check()
        loop.sleep(POLL_S)
    end
end

-- (a) ----------------------------------------------------------------------

local function median(t)
    local s = { unpack(t) }
    table.sort(s)
    local n = #s
    return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

--- Runs rounds of { baseline, relay } pairs, the order alternating each
-- round so drift and neighbours' load hit both alike. Each function returns
-- a rate (and relay's also the rate from its first read and its start-up).
local function rounds(baseline, relay)
    local base, rate, steady, startup, ratios = {}, {}, {}, {}, {}
    for r = 1, ROUNDS do
        if r % 2 == 1 then
            base[r] = baseline(r)
            rate[r], steady[r], startup[r] = relay(r)
        else
            rate[r], steady[r], startup[r] = relay(r)
            base[r] = baseline(r)
        end
        ratios[r] = string.format("%.2f", rate[r] / base[r])
    end
    return { base = median(base), rate = median(rate), steady = median(steady), startup = median(startup),
        ratios = table.concat(ratios, " "), base_all = base, rate_all = rate }
end

local function raw_consumer(c, stream, group, n, count)
    call(c, "XGROUP", "CREATE", stream, group, "0")
    local acked = 0
    local t0, cpu0, rcpu0 = loop.monotonic(), cpu_of(loop.getpid()), redis_cpu(c)
    while acked < n do
        local reply = call(c, "XREADGROUP", "GROUP", group, "raw", "COUNT", count, "BLOCK", 5000,
            "STREAMS", stream, ">")
        assert(reply ~= redis.null, "raw consumer: the stream ran dry before " .. n .. " entries")
        local argv = { "XACK", stream, group }
        for _, entry in ipairs(reply[1][2]) do
            argv[#argv + 1] = entry[1]
        end
        acked = acked + call(c, argv)
    end
    local elapsed = loop.monotonic() - t0
    local cpu, rcpu = cpu_of(loop.getpid()) - cpu0, redis_cpu(c) - rcpu0
    local read, pending = group_state(c, stream, group)
    assert(read == n and pending == 0, "raw consumer left entries behind")
    return elapsed, cpu, rcpu
end

local function bench_unmatched()
    local stream, max_conc = "bench-a", 4
    local c = connect(stream)
    local apps_dir = WORK .. "/apps-a"
    write_apps(apps_dir, 10, 10)
    local t0 = loop.monotonic()
    preload(c, stream, N, [['{"table_name":"orders","event_name":"INSERT","id":' .. i .. ',"new":{"total":42}}']])
    print(string.format("(a) unmatched: %d events pre-loaded in %.2f s; 10 apps x 10 rules, none matching; "
        .. "%d rounds, medians", N, loop.monotonic() - t0, ROUNDS))
    local count = math.max(16, 2 * max_conc)
    local cpu = { raw = {}, raw_redis = {}, relay = {}, relay_redis = {}, large = {} }
    local large_rate = {}
    local res = rounds(function(r)
        local elapsed, own, rcpu = raw_consumer(c, stream, "raw" .. r, N, count)
        cpu.raw[r], cpu.raw_redis[r] = own / N * 1e6, rcpu / N * 1e6
        -- a reference, not the target: the raw loop at the daemon's largest unmatched batch
        local large_elapsed, large_own = raw_consumer(c, stream, "raw-large" .. r, N, UNMATCHED_READ_MAX)
        large_rate[r], cpu.large[r] = N / large_elapsed, large_own / N * 1e6
        return N / elapsed
    end, function(r)
        local rcpu0 = redis_cpu(c)
        local d = start_daemon("relay-a" .. r, { REDIS_STREAM = stream, RELAY_APPS = apps_dir,
            MAX_CONCURRENCY = tostring(max_conc) })
        local total, steady = d:wait_group(c, stream, N, 0, 600)
        cpu.relay[r], cpu.relay_redis[r] = cpu_of(d.pid) / N * 1e6, (redis_cpu(c) - rcpu0) / N * 1e6
        d:stop()
        return N / total, N / steady, total - steady
    end)
    print(string.format("(a) raw XREADGROUP COUNT %d + XACK:  %8.0f events/s", count, res.base))
    print(string.format("(a) relay run, from launch:         %8.0f events/s", res.rate))
    print(string.format("(a) relay run, from first read:     %8.0f events/s (start-up %.0f ms)",
        res.steady, res.startup * 1000))
    print(string.format("(a) CPU per event: raw client %.2f us + redis %.2f us; relay run %.2f us (start-up "
        .. "included) + redis %.2f us (redis includes the 10 ms XINFO polling)", median(cpu.raw),
        median(cpu.raw_redis), median(cpu.relay), median(cpu.relay_redis)))
    print(string.format("(a) ratio relay/raw: %.3f from launch, %.3f from first read (target >= 0.95); "
        .. "per round %s", res.rate / res.base, res.steady / res.base, res.ratios))
    print(string.format("(a) reference, raw XREADGROUP COUNT %d + XACK (the daemon's largest unmatched batch): "
        .. "%.0f events/s, client CPU %.2f us/event; relay run / it: %.3f from launch, %.3f from first read",
        UNMATCHED_READ_MAX, median(large_rate), median(cpu.large), res.rate / median(large_rate),
        res.steady / median(large_rate)))
    c:close()
end

-- (t) ----------------------------------------------------------------------

--- One `relay run` over url taking the N unmatched entries of stream on a
-- fresh group: events/s from launch and from its first read, and the CPU
-- us/event of the daemon and of redis-server (which does TLS too).
local function unmatched_run(c, name, stream, apps_dir, env)
    local vars = { REDIS_STREAM = stream, RELAY_APPS = apps_dir, MAX_CONCURRENCY = "4" }
    for k, v in pairs(env) do
        vars[k] = v
    end
    local rcpu0 = redis_cpu(c)
    local d = start_daemon(name, vars)
    local total, steady = d:wait_group(c, stream, N, 0, 600)
    local cpu, rcpu = cpu_of(d.pid) / N * 1e6, (redis_cpu(c) - rcpu0) / N * 1e6
    d:stop()
    return N / total, N / steady, cpu, rcpu
end

local function bench_tls()
    local plain_url, tls_url, ca = os.getenv("BENCH_PLAIN_URL"), os.getenv("BENCH_TLS_URL"), os.getenv("BENCH_TLS_CA")
    assert(plain_url and tls_url and ca, "(t) needs BENCH_PLAIN_URL, BENCH_TLS_URL and BENCH_TLS_CA")
    local stream = "bench-t"
    local c = connect(stream)
    local apps_dir = WORK .. "/apps-t"
    write_apps(apps_dir, 10, 10)
    preload(c, stream, N, [['{"table_name":"orders","event_name":"INSERT","id":' .. i .. ',"new":{"total":42}}']])
    local plain = { launch = {}, steady = {}, cpu = {}, rcpu = {} }
    local tls = { launch = {}, steady = {}, cpu = {}, rcpu = {} }
    local function measure(into, tag, r, env)
        into.launch[r], into.steady[r], into.cpu[r], into.rcpu[r] =
            unmatched_run(c, "relay-t" .. tag .. r, stream, apps_dir, env)
    end
    local ratios = {}
    for r = 1, ROUNDS do
        local plain_env, tls_env = { REDIS_URL = plain_url }, { REDIS_URL = tls_url, RELAY_REDIS_CA = ca }
        if r % 2 == 1 then
            measure(plain, "p", r, plain_env)
            measure(tls, "s", r, tls_env)
        else
            measure(tls, "s", r, tls_env)
            measure(plain, "p", r, plain_env)
        end
        ratios[r] = string.format("%.2f", tls.steady[r] / plain.steady[r])
    end
    print(string.format("(t) TLS cost: %d unmatched events per run, 10 apps x 10 rules, over TCP to one redis-server; "
        .. "%d rounds, medians", N, ROUNDS))
    print(string.format("(t) relay run, redis:// (plain):  %8.0f events/s from launch, %8.0f from first read, "
        .. "CPU us/event: relay %.2f, redis %.2f", median(plain.launch), median(plain.steady), median(plain.cpu),
        median(plain.rcpu)))
    print(string.format("(t) relay run, rediss:// (TLS):   %8.0f events/s from launch, %8.0f from first read, "
        .. "CPU us/event: relay %.2f, redis %.2f", median(tls.launch), median(tls.steady), median(tls.cpu),
        median(tls.rcpu)))
    print(string.format("(t) ratio TLS/plain: %.3f from launch, %.3f from first read; per round %s",
        median(tls.launch) / median(plain.launch), median(tls.steady) / median(plain.steady),
        table.concat(ratios, " ")))
    c:close()
end

-- (b) ----------------------------------------------------------------------

local function bench_matched()
    local c = connect("bench-b")
    local apps_dir = WORK .. "/apps-b"
    write_apps(apps_dir, 1, 1, "concurrency: 2")
    local event = '{"table_name":"t0","event_name":"e0","id":1}'
    local app = assert(require("relay.apps").load_app(apps_dir, "a0"))
    local rt = runtime.new({ runtime = "runc", state_dir = WORK .. "/state", consumer = "bench-rt", private = true })
    local function once(i)
        local out = invoke.run({ rt = rt, app = app, entry = { handler = "h0", timeout_ms = 30000 },
            trigger = "event", message_id = "0-" .. i, attempt = 1, stdin = event })
        assert(out.ok, out.reason)
    end
    once(0)  -- warm-up: the host rootfs, runc's binary, the page cache

    -- baseline: the runtime layer alone, two tasks taking M invocations
    local function baseline()
        local next_i, done, finished = 0, 0, nil
        local function worker()
            while next_i < M do
                next_i = next_i + 1
                once(next_i)
                done = done + 1
            end
            if done == M then
                finished()
            end
        end
        local t0 = loop.monotonic()
        loop.wait(600, function(token)
            finished = function() loop.wake(token) end
            loop.spawn(worker)
            loop.spawn(worker)
        end)
        assert(done == M, "baseline did not finish")
        return M / (loop.monotonic() - t0)
    end

    -- the daemon, on a fresh stream each round (invocation state is per stream)
    local function daemon(r)
        local stream = "bench-b" .. r
        preload(c, stream, M, [['{"table_name":"t0","event_name":"e0","id":' .. i .. '}']])
        local d = start_daemon("relay-b" .. r, { REDIS_STREAM = stream, RELAY_APPS = apps_dir,
            MAX_CONCURRENCY = "2" })
        local total, steady = d:wait_group(c, stream, M, 0, 600)
        d:stop()
        runtime.remove_cgroup_dirs("relay/relay-b" .. r)  -- the daemon keeps its (empty) cgroup parent
        assert(call(c, "XLEN", keys.for_stream(stream).dlq) == 0, "(b) handler failures were dead-lettered")
        return M / total, M / steady, total - steady
    end

    local res = rounds(baseline, daemon)
    rt:close()
    runtime.remove_cgroup_dirs("relay/bench-rt")
    print(string.format("(b) matched, trivial handler, concurrency 2, %d invocations each; %d rounds, medians",
        M, ROUNDS))
    print(string.format("(b) runtime invoke (baseline):  %6.1f invocations/s", res.base))
    print(string.format("(b) relay run, from launch:     %6.1f invocations/s", res.rate))
    print(string.format("(b) relay run, from first read: %6.1f invocations/s (start-up %.0f ms)",
        res.steady, res.startup * 1000))
    print(string.format("(b) ratio relay/runtime: %.3f from launch, %.3f from first read (target >= 0.85); "
        .. "per round %s", res.rate / res.base, res.steady / res.base, res.ratios))
    c:close()
end

-- (c) ----------------------------------------------------------------------

local function settle_memory(d)
    loop.sleep(1)
    d:check()
    return d:memory()
end

local function bench_rss()
    local stream = "bench-c"
    local c = connect(stream)
    local empty, apps_dir = WORK .. "/apps-empty", WORK .. "/apps-c"
    assert(fs.mkdir_p(empty))
    write_apps(apps_dir, 100, 10)

    local idle = start_daemon("relay-c0", { REDIS_STREAM = stream .. "-idle", RELAY_APPS = empty })
    local idle_rss, idle_hwm = settle_memory(idle)
    idle:stop()

    local loaded = start_daemon("relay-c1", { REDIS_STREAM = stream .. "-loaded", RELAY_APPS = apps_dir })
    local loaded_rss, loaded_hwm = settle_memory(loaded)
    loaded:stop()

    local paused = keys.for_stream(stream).paused
    for k = 0, 99 do
        call(c, "SADD", paused, "a" .. k)
    end
    -- message i goes to app i % 100, rule i % 10: all apps and rules see traffic
    preload(c, stream, MSGS, [['{"table_name":"t' .. (i % 100) .. '","event_name":"e' .. (i % 10) ..
        '","id":' .. i .. ',"new":{"name":"user' .. i .. '","email":"user' .. i .. '@example.com"}}']])
    local d = start_daemon("relay-c2", { REDIS_STREAM = stream, RELAY_APPS = apps_dir })
    d:wait_group(c, stream, MSGS, MSGS, 120)
    local rss, hwm = settle_memory(d)
    d:stop()
    local mib = function(kib) return kib / 1024 end
    print(string.format("(c) idle daemon, no apps (baseline):      VmRSS %5.1f MiB  VmHWM %5.1f MiB",
        mib(idle_rss), mib(idle_hwm)))
    print(string.format("(c) 100 apps x 10 rules, idle:            VmRSS %5.1f MiB  VmHWM %5.1f MiB",
        mib(loaded_rss), mib(loaded_hwm)))
    print(string.format("(c) 100 apps x 10 rules, %d pending:    VmRSS %5.1f MiB  VmHWM %5.1f MiB",
        MSGS, mib(rss), mib(hwm)))
    print(string.format("(c) ratio to idle: RSS %.2f, HWM %.2f (target: RSS < 64 MiB; %s)",
        rss / idle_rss, hwm / idle_hwm, rss < 64 * 1024 and "met" or "MISSED"))
    c:close()
end

local benches = { a = bench_unmatched, b = bench_matched, c = bench_rss, t = bench_tls }
assert(benches[WHICH], "unknown benchmark " .. tostring(WHICH))
assert(fs.mkdir_p(WORK))
benches[WHICH]()
io.stdout:flush()
return 0
