-- Runtime overhead benchmark, run inside the host:
--   relay x-lua tests/bench/runtime_bench.lua [RUNS]      (tests/bench/runtime_bench.sh wraps it)
-- Needs root and runc. Per round, interleaved so drift hits every variant alike:
--   bare        `runc run` of one prepared bundle (Relay's hardened config: user
--               namespace, seccomp allowlist), started from /bin/sh
--   denylist    the same with the compact seccomp denylist instead of the allowlist
--   soft        the same without seccomp and without a user namespace: what the
--               hardening itself costs
--   supervisor  the hardened bundle and command through relay.core.proc (pipes,
--               line splitting, the event on stdin)
--   invoke      `relay app invoke` end to end (process start, app load, bundle
--               write, run, cleanup)
--   baseline    the same by another binary (RELAY_BENCH_BASELINE), optional
-- then invocations/second of the runtime module at concurrency 2.
local fs = require("relay.fs")
local invoke = require("relay.runtime.invoke")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local runtime = require("relay.runtime")

local RUNS = tonumber(arg and arg[1]) or 20
local ROOT = os.tmpname()
os.remove(ROOT)
local APP_DIR = ROOT .. "/apps/bench"
local EVENT = '{"event_name":"INSERT","table_name":"users","new":{"id":1}}'

local function median(values)
    local t = { unpack(values) }
    table.sort(t)
    local n = #t
    return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end

local function binary()
    local p = io.popen("readlink -f /proc/" .. loop.getpid() .. "/exe")
    local path = p:read("*l")
    p:close()
    return path
end

assert(fs.geteuid() == 0 and fs.which("runc"), "the runtime benchmark needs root and runc")
assert(fs.mkdir_p(APP_DIR))
assert(fs.write_file(APP_DIR .. "/template.yaml",
    "runtime:\n  image: host\n  command: [/bin/sh, -c, 'cat >/dev/null']\n" ..
    "events:\n  - handler: noop\n    pattern: {t: [x]}\n"))
local app = assert(require("relay.apps").load_app(ROOT .. "/apps", "bench"))
local rt = runtime.new({ runtime = "runc", state_dir = ROOT .. "/state", consumer = "bench", private = true })
local driver = assert(rt:driver_for(app))
local inv = { handler = "noop", trigger = "invoke", message_id = "bench", attempt = 1, deadline_ms = 0 }
local spec = assert(driver:prepare(app, inv))
local json = require("relay.runtime.json")
local seccomp = require("relay.core.seccomp")

--- A sibling bundle whose config is Relay's, changed by edit(config). Run
-- by a shell here, whose runc passes no control socket: relay-init runs
-- without one (-c dropped).
local function variant_bundle(name, edit)
    local config = driver:config(app, inv, spec.id .. "-" .. name, driver.host_rootfs, runtime.init_binary())
    local args = config.process.args
    local i = 2
    while args[i] and args[i] ~= "--" do
        if args[i] == "-c" then
            table.remove(args, i)
            table.remove(args, i)
        else
            i = i + 2
        end
    end
    edit(config)
    local dir = spec.dir .. "-" .. name
    assert(fs.mkdir_p(dir))
    assert(fs.write_file(dir .. "/config.json", json.encode(config)))
    return dir
end

local soft_dir = variant_bundle("soft", function(c)
    c.linux.seccomp, c.linux.uidMappings, c.linux.gidMappings = nil, nil, nil
    local kept = {}
    for _, ns in ipairs(c.linux.namespaces) do
        if ns.type ~= "user" then
            kept[#kept + 1] = ns
        end
    end
    c.linux.namespaces = kept
end)
local bare_dir = variant_bundle("bare", function() end)
local deny_dir = variant_bundle("deny", function(c)
    c.linux.seccomp = seccomp.profile("denylist")
end)
local event_file = ROOT .. "/event.json"
fs.write_file(event_file, EVENT)
local relay = binary()

local function runc_run(dir, id)
    local t0 = loop.monotonic()
    local cmd = string.format("runc --root %s --log %s/runc.log --log-format json run --bundle %s %s <%s >/dev/null",
        driver.root, dir, dir, id, event_file)
    assert(os.execute(cmd) == 0, "runc run failed: see " .. dir .. "/runc.log")
    return loop.monotonic() - t0
end

local function bare(i)
    return runc_run(bare_dir, spec.id .. "-bare" .. i)
end

local function soft(i)
    return runc_run(soft_dir, spec.id .. "-soft" .. i)
end

local function denylist(i)
    return runc_run(deny_dir, spec.id .. "-deny" .. i)
end

local function supervised(i)
    local t0 = loop.monotonic()
    local argv = { unpack(spec.argv) }
    argv[#argv] = spec.id .. "-sup" .. i
    local h = assert(proc.spawn({ argv = argv, env = spec.env, stdin = EVENT, timeout = 30, control = spec.control,
        on_line = function() end }))
    local r = h:wait()
    assert(r.status == 0, r.start_error)
    return loop.monotonic() - t0
end

-- The invokes' consumer: its cgroup parents are removed at the end.
local INVOKE_CONSUMER = "bench-invoke"

local function invoked_by(relay_binary)
    local t0 = loop.monotonic()
    local cmd = string.format("RELAY_STATE_DIR=%s/state RELAY_RUNTIME=runc RELAY_CONSUMER=%s %s app invoke " ..
        "--apps %s/apps bench noop --event-file %s >/dev/null", ROOT, INVOKE_CONSUMER, relay_binary, ROOT, event_file)
    assert(os.execute(cmd) == 0)
    return loop.monotonic() - t0
end

local function invoked()
    return invoked_by(relay)
end

-- RELAY_BENCH_BASELINE=<another relay binary> (an older build, with its own
-- Lua tree): its `relay app invoke` runs in the same rounds, for a
-- before/after comparison that the host's changing load cannot skew.
local baseline_bin = os.getenv("RELAY_BENCH_BASELINE")

-- CPU (user + system) of the children a variant ran, summed over its runs
-- (cutime + cstime of /proc/self/stat, clock ticks: coarse per run, fair
-- over many).
local unistd = require("posix.unistd")
local TICK_S = 1 / unistd.sysconf(unistd._SC_CLK_TCK)
local cpu = {}
local function children_cpu()
    local fields = {}
    for w in fs.read_file("/proc/self/stat"):match("%) (.*)$"):gmatch("%S+") do
        fields[#fields + 1] = w
    end
    -- after the command name: state is field 3 of stat(5), cutime 16, cstime 17
    return (tonumber(fields[14]) + tonumber(fields[15])) * TICK_S
end
local function measured(name, run)
    return function(i)
        local c0 = children_cpu()
        local wall = run(i)
        cpu[name] = (cpu[name] or 0) + children_cpu() - c0
        return wall
    end
end

-- warm-up: page cache, runc's binary, the host rootfs
bare(0)
soft(0)
denylist(0)
supervised(0)
invoked()
if baseline_bin then
    invoked_by(baseline_bin)
end

local b, s, v, so, dl, vb = {}, {}, {}, {}, {}, {}
local bare_m, invoked_m = measured("bare", bare), measured("invoke", invoked)
local supervised_m, soft_m = measured("supervisor", supervised), measured("soft", soft)
local baseline_m = measured("baseline", function() return invoked_by(baseline_bin) end)
local steps = {
    function(i) b[i] = bare_m(i) end,
    function(i) s[i] = supervised_m(i) end,
    function(i) v[i] = invoked_m(i) end,
    function(i) so[i] = soft_m(i) end,
    function(i) dl[i] = denylist(i) end,
}
if baseline_bin then
    steps[#steps + 1] = function(i) vb[i] = baseline_m(i) end
end
-- Each run starts cold, as a one-shot container does: a pause longer than
-- an RCU grace period before it. Otherwise whichever variant follows another
-- runc gets the kernel's cgroup-attach lock warm (no synchronize_rcu wait in
-- runc's first cgroup.procs write, 8-20 ms here) and the ratios measure the
-- order of the runs rather than the variants.
local COLD_GAP_S = 0.05
for i = 1, RUNS do
    -- rotate the order each round: no variant always follows the same one
    for k = 0, #steps - 1 do
        loop.sleep(COLD_GAP_S)
        steps[(i + k) % #steps + 1](i)
    end
end
-- Each round's bare run and invoke ran within a second of each other: their
-- ratio is the figure least disturbed by the host's other load.
local round_ratios, baseline_ratios = {}, {}
print("round   bare ms  invoke ms  ratio" .. (baseline_bin and "  baseline ms  ratio" or ""))
for i = 1, RUNS do
    round_ratios[i] = v[i] / b[i]
    local line = string.format("%5d  %8.1f  %9.1f  %5.3f", i, b[i] * 1000, v[i] * 1000, round_ratios[i])
    if baseline_bin then
        baseline_ratios[i] = vb[i] / b[i]
        line = line .. string.format("  %11.1f  %5.3f", vb[i] * 1000, baseline_ratios[i])
    end
    print(line)
end
local mb, ms, mv, mso, mdl = median(b), median(s), median(v), median(so), median(dl)
print(string.format("runs per variant:          %d (interleaved, order rotated, each after a %d ms pause)",
    RUNS, COLD_GAP_S * 1000))
print(string.format("bare runc run (hardened):  %6.1f ms median  (user namespace, seccomp allowlist)", mb * 1000))
print(string.format("bare runc run, denylist:   %6.1f ms median  ratio %.3f to the allowlist", mdl * 1000,
    mdl / mb))
print(string.format("bare runc run, soft:       %6.1f ms median  hardening costs %.3f x (%.1f ms)", mso * 1000,
    mb / mso, (mb - mso) * 1000))
print(string.format("supervisor (core.proc):    %6.1f ms median  ratio %.3f (target <= 1.15)", ms * 1000, ms / mb))
print(string.format("relay app invoke:          %6.1f ms median  ratio %.3f (target <= 1.15)", mv * 1000, mv / mb))
print(string.format("relay app invoke, per round: median ratio %.3f (target <= 1.15)", median(round_ratios)))
print(string.format("CPU per run (all processes): bare %.1f ms, soft %.1f ms, supervisor %.1f ms, " ..
    "relay app invoke %.1f ms (+%.1f ms over bare)", cpu.bare / RUNS * 1000, cpu.soft / RUNS * 1000,
    cpu.supervisor / RUNS * 1000, cpu.invoke / RUNS * 1000, (cpu.invoke - cpu.bare) / RUNS * 1000))
if baseline_bin then
    print(string.format("baseline binary's invoke:  %6.1f ms median  ratio %.3f; per round: median ratio %.3f; " ..
        "CPU per run %.1f ms (+%.1f ms over bare)", median(vb) * 1000, median(vb) / mb, median(baseline_ratios),
        cpu.baseline / RUNS * 1000, (cpu.baseline - cpu.bare) / RUNS * 1000))
end

-- throughput: the runtime module (bundle write, run, cleanup) at concurrency 2
local total, done = RUNS * 2, 0
local t0 = loop.monotonic()
local finished
local function worker()
    for _ = 1, RUNS do
        local out = invoke.run({ rt = rt, app = app, entry = { handler = "noop", timeout_ms = 30000 },
            trigger = "invoke", message_id = "bench", attempt = 1, stdin = EVENT })
        assert(out.ok, out.reason)
        done = done + 1
    end
    if done == total then
        finished()
    end
end
loop.wait(120, function(token)
    finished = function() loop.wake(token) end
    loop.spawn(worker)
    loop.spawn(worker)
end)
local elapsed = loop.monotonic() - t0
print(string.format("throughput, concurrency 2: %d invocations in %.2f s = %.1f/s", done, elapsed, done / elapsed))

fs.rm_rf(spec.dir)
fs.rm_rf(soft_dir)
fs.rm_rf(deny_dir)
rt:close()
fs.rm_rf(ROOT)
runtime.remove_cgroup_dirs("relay/bench")
runtime.remove_cgroup_dirs("relay/" .. runtime.root_name(INVOKE_CONSUMER, "events", "relay"))
