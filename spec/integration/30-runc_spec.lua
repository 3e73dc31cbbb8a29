-- The runc driver for real (root and runc needed; skipped otherwise): the
-- container contract through `relay app invoke`, limits, isolation, timeouts
-- that kill every process, bounded memory under an output flood, and the
-- orphan sweep after a killed daemon.
local cli = require("helpers.cli")
local tables = require("helpers.tables")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local runtime = require("relay.runtime")
local invoke = require("relay.runtime.invoke")

local ROOT = os.tmpname()
os.remove(ROOT)
local APPS = ROOT .. "/apps"
local STATE = ROOT .. "/state"

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil

local HANDLER = [[
#!/bin/sh
case "$RELAY_HANDLER" in
  env) cat; echo; env | grep -E '^(RELAY_|PYTHONUNBUFFERED|EXTRA)' | sort; echo "to stderr" >&2 ;;
  exit3) exit 3 ;;
  selfkill) kill -KILL $$ ;;
  hang) trap '' TERM; setsid sleep 1001 & sleep 1002 & (trap '' TERM; sleep 1003) & echo started; wait ;;
  flood) head -c 100000000 /dev/zero; yes | head -c 20000000 >&2 ;;
  hog) python3 -c 'b = bytearray(200 * 1024 * 1024); print(len(b))' ;;
  forkbomb) python3 /app/fork.py ;;
  net) python3 /app/net.py ;;
  fs) touch /app/x 2>/dev/null && echo app-writable || echo app-ro
      touch /x 2>/dev/null && echo root-writable || echo root-ro
      touch /tmp/x && echo tmp-ok
      id -u; id -g; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status ;;
  *) echo "unknown $RELAY_HANDLER" >&2; exit 2 ;;
esac
]]

local FORK = [[
import os, time
n = 0
try:
    for i in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork failed", e.errno)
print("forked", n)
]]

local NET = [[
import socket
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("1.1.1.1", 80))
    print("connected")
except OSError as e:
    print("unreachable")
print(",".join(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])))
]]

local HANDLERS = { "env", "exit3", "selfkill", "hang", "flood", "hog", "forkbomb", "net", "fs" }


local function write(path, text)
    assert(fs.write_file(path, text))
end


local function make_apps()
    assert(fs.mkdir_p(APPS .. "/probe"))
    assert(fs.mkdir_p(APPS .. "/nocmd"))
    local t = { "runtime:", "  image: host", "  command: [/bin/sh, /app/handler.sh]", "  memory: 48Mi",
        "  pids: 16", "  env: {EXTRA: \"yes\"}", "events:" }
    for _, h in ipairs(HANDLERS) do
        t[#t + 1] = "  - handler: " .. h
        t[#t + 1] = "    pattern: {t: [x]}"
        t[#t + 1] = "    timeout: " .. (h == "hang" and "1s" or "30s")
    end
    write(APPS .. "/probe/template.yaml", table.concat(t, "\n") .. "\n")
    write(APPS .. "/probe/handler.sh", HANDLER)
    write(APPS .. "/probe/fork.py", FORK)
    write(APPS .. "/probe/net.py", NET)
    assert(fs.mkdir_p(APPS .. "/long"))
    write(APPS .. "/long/template.yaml", "runtime:\n  image: host\n  command: [/bin/sh, -c, 'exec sleep 1006']\n" ..
        "events:\n  - handler: h\n    pattern: {t: [x]}\n")
    write(APPS .. "/nocmd/template.yaml", "runtime:\n  image: host\n  command: [/app/nosuch]\n" ..
        "events:\n  - handler: h\n    pattern: {t: [x]}\n")
end


local ENV = { RELAY_APPS = APPS, RELAY_STATE_DIR = STATE, RELAY_RUNTIME = "runc", RELAY_CONSUMER = "itest" }

--- A consumer's runtime root for the default stream and group (the CLI's here).
local function root_of(consumer)
    return STATE .. "/" .. runtime.root_name(consumer, "events", "relay")
end


local function invoke_cli(app, handler, event)
    return cli.run({ "app", "invoke", app, handler, "--event", event or '{"t":"x"}' }, ENV)
end


--- Pids whose command line contains `needle`.
local daemon = require("helpers.daemon")
local procs_matching = daemon.procs_matching


--- Waits up to 2 s for processes matching any needle to be gone: SIGKILLed
-- processes may still be on their way out for a moment after the report
-- (pid namespace teardown, bwrap's --die-with-parent). Returns those left.
local function left_after_kill(needles)
    local deadline = loop.monotonic() + 2
    local left
    repeat
        left = {}
        for _, needle in ipairs(needles) do
            for _, pid in ipairs(procs_matching(needle)) do
                left[#left + 1] = pid
            end
        end
        if #left > 0 then
            loop.sleep(0.05)
        end
    until #left == 0 or loop.monotonic() > deadline
    return left
end


local function vm_hwm_kb()
    return tonumber((fs.read_file("/proc/self/status") or ""):match("VmHWM:%s*(%d+)"))
end


local function runc_ids(rt)
    local report, ids = runtime.exec({ "runc", "--root", rt.base_dir .. "/runc", "list", "-q" }, 10)
    assert(report)
    return ids
end


local maybe = usable and describe or pending

maybe("runc driver", function()
    setup(function()
        make_apps()
    end)

    teardown(function()
        -- a failed spec must not leave containers behind
        for _, consumer in ipairs({ "orph-a", "orph-b" }) do
            runtime.new({ runtime = "runc", state_dir = STATE, consumer = consumer, stream = "events" }):sweep()
        end
        fs.rm_rf(ROOT)
        for _, consumer in ipairs({ "itest", "flood", "orph-a", "orph-b" }) do
            runtime.remove_cgroup_dirs("relay/" .. runtime.root_name(consumer, "events"))
            runtime.remove_cgroup_dirs("relay/" .. consumer)
        end
    end)

    it("refuses an --event that is not a JSON object, as publish does, before any container", function()
        for _, bad in ipairs({ "{bad", "[1,2]", '{"a":1} trailing' }) do
            local r = invoke_cli("probe", "env", bad)
            assert.are.equal(2, r.code, bad)
            assert.matches("^relay: not a valid event: ", r.stderr)
            assert.are.equal("", r.stdout)
        end
    end)

    it("gives the handler its event on stdin and the environment contract", function()
        local r = invoke_cli("probe", "env", '{"t":"x","n":1}')
        assert.are.equal(0, r.code, r.stderr)
        local lines = {}
        for l in r.stdout:gmatch("[^\n]*") do
            lines[#lines + 1] = l
        end
        assert.are.equal('{"t":"x","n":1}', lines[1])
        assert.truthy(r.stdout:find("\nEXTRA=yes\n", 1, true))
        assert.truthy(r.stdout:find("\nPYTHONUNBUFFERED=1\n", 1, true))
        assert.truthy(r.stdout:find("\nRELAY_APP=probe\n", 1, true))
        assert.truthy(r.stdout:find("\nRELAY_ATTEMPT=1\n", 1, true))
        assert.truthy(r.stdout:find("\nRELAY_HANDLER=env\n", 1, true))
        assert.truthy(r.stdout:find("\nRELAY_MESSAGE_ID=invoke%-%d+\n"))
        assert.truthy(r.stdout:find("\nRELAY_TRIGGER=invoke\n", 1, true))
        assert.truthy(r.stdout:find("\nRELAY_DEADLINE=%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ\n"))
        assert.are.equal("to stderr\n", r.stderr)
        -- the private root is gone, and nothing was left in the consumer's root
        assert.is_false(fs.exists(root_of("itest") .. "/invoke-" .. fs.getpid()))
        assert.is_false(fs.exists(root_of("itest") .. "/runc"))
        -- its container's cgroup was a leaf of the consumer's shared invoke
        -- parent, which stays for the next invoke (runc removed the leaf)
        local invoke_rt = runtime.new({ runtime = "runc", state_dir = STATE, consumer = "itest", stream = "events",
            group = "relay", private = true })
        for _, parent in ipairs(invoke_rt:cgroup_parents()) do
            assert.is_true(fs.is_dir(parent), parent)
            for _, e in ipairs(fs.list(parent)) do
                assert.is_false(e.dir, e.name)
            end
        end
    end)

    it("exits with the handler's status, 128+N on a signal, 127 for a missing command", function()
        assert.are.equal(3, invoke_cli("probe", "exit3").code)
        assert.are.equal(137, invoke_cli("probe", "selfkill").code)
        local r = invoke_cli("nocmd", "h")
        assert.are.equal(127, r.code, r.stderr)
        assert.are.equal(1, invoke_cli("probe", "nosuch").code)
        assert.are.equal(1, invoke_cli("nosuch", "env").code)
    end)

    it("reports 125 when the host cannot start the container", function()
        local env = tables.merged(ENV, { PATH = "/nonexistent" })
        local r = cli.run({ "app", "invoke", "probe", "env", "--event", "{}", "--runtime", "runc" }, env)
        -- runc is not found: the app is unavailable, never a handler failure
        assert.are.equal(125, r.code, r.stderr)
    end)

    it("kills every process of the container at the timeout", function()
        local t0 = loop.monotonic()
        local r = invoke_cli("probe", "hang")
        local took = loop.monotonic() - t0
        assert.are.equal(124, r.code, r.stderr)
        assert.truthy(r.stderr:find("timeout after 1s", 1, true))
        assert.is_true(took < 10)
        assert.are.same({}, left_after_kill({ "sleep 1001", "sleep 1002", "sleep 1003" }))
    end)

    it("keeps Relay's memory bounded under an output flood", function()
        local rt = runtime.new({ runtime = "runc", state_dir = STATE, consumer = "flood", private = true })
        local apps = require("relay.apps")
        local app = assert(apps.load_app(APPS, "probe"))
        local bytes, pieces = 0, 0
        local before = vm_hwm_kb()
        -- the loop keeps serving timers while the flood drains
        local running, max_lag, ticks = true, 0, 0
        loop.spawn(function()
            while running do
                local t = loop.monotonic()
                loop.sleep(0.01)
                ticks = ticks + 1
                max_lag = math.max(max_lag, loop.monotonic() - t - 0.01)
            end
        end)
        local started = loop.monotonic()
        local out = invoke.run({
            rt = rt, app = app, entry = { handler = "flood", timeout_ms = 60000 },
            trigger = "invoke", message_id = "flood-1", attempt = 1, stdin = "{}",
            on_line = function(_, line)
                bytes, pieces = bytes + #line, pieces + 1
            end,
        })
        local flood_took = loop.monotonic() - started
        running = false
        rt:close()
        assert.is_true(out.ok, out.reason)
        assert.are.equal(100000000 + 10000000, bytes)
        -- A loop that drained the pipes to EOF in one callback would lag by
        -- the whole flood; a scheduler hiccup on a loaded host costs far less.
        local summary = ("loop lag %.3f s, %d ticks in a %.3f s flood"):format(max_lag, ticks, flood_took)
        assert.is_true(ticks >= 3, summary)
        assert.is_true(max_lag < flood_took / 2, summary)
        assert.is_true(vm_hwm_kb() - before < 16 * 1024)
    end)

    it("kills a memory hog at the memory limit", function()
        local r = invoke_cli("probe", "hog")
        assert.are.equal(137, r.code, r.stderr)
    end)

    it("stops a fork bomb at the pids limit", function()
        local r = invoke_cli("probe", "forkbomb")
        assert.are.equal(0, r.code, r.stderr)
        local n = tonumber(r.stdout:match("forked (%d+)"))
        assert.is_true(n ~= nil and n < 16, r.stdout)
        assert.truthy(r.stdout:find("fork failed", 1, true))
    end)

    it("has no network, a read-only /app and root, and runs unprivileged", function()
        local r = invoke_cli("probe", "net")
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal("unreachable\nlo\n", r.stdout)
        r = invoke_cli("probe", "fs")
        assert.are.equal(0, r.code, r.stderr)
        assert.truthy(r.stdout:find("^app%-ro\nroot%-ro\ntmp%-ok\n65534\n65534\n"))
        assert.truthy(r.stdout:find("CapEff:\t0000000000000000", 1, true))
        assert.truthy(r.stdout:find("CapBnd:\t0000000000000000", 1, true))
        assert.truthy(r.stdout:find("NoNewPrivs:\t1", 1, true))
    end)

    it("sweeps its own consumer's orphans after a crash, never another's", function()
        local app = { name = "probe", dir = APPS .. "/probe",
            runtime = { image = "host", command = { "/bin/sh", "-c", "exec sleep 1004" } } }
        local other = { name = "probe", dir = APPS .. "/probe",
            runtime = { image = "host", command = { "/bin/sh", "-c", "exec sleep 1005" } } }
        local rt_a = runtime.new({ runtime = "runc", state_dir = STATE, consumer = "orph-a", stream = "events" })
        local rt_b = runtime.new({ runtime = "runc", state_dir = STATE, consumer = "orph-b", stream = "events" })
        local inv = { handler = "h", trigger = "event", message_id = "1-0", attempt = 1, deadline_ms = 0 }
        -- relay-init's fd 3 is a pipe this process keeps open (not its
        -- control socket, which a finished proc closes): the containers
        -- outlive their runc, as they would while anything held it
        local unistd = require("posix.unistd")
        local lifeline, keep = unistd.pipe()
        local function start(rt, a)
            local spec = assert(rt:driver_for(a):prepare(a, inv))
            return assert(proc.spawn({ argv = spec.argv, env = spec.env, pass_fds = { lifeline } })), spec
        end
        local ha = start(rt_a, app)
        local hb, spec_b = start(rt_b, other)
        unistd.close(lifeline)
        for _ = 1, 50 do
            if #runc_ids(rt_a) > 0 and #runc_ids(rt_b) > 0 and #procs_matching("sleep 1005") > 0 then
                break
            end
            loop.sleep(0.1)
        end
        -- the daemon (here: its runc) dies; the container lives on
        ha:kill("KILL")
        ha:wait()
        assert.is_true(#procs_matching("sleep 1004") >= 1) -- the init and the sleep
        assert.are.equal(1, #runc_ids(rt_a))

        assert.are.equal(1, rt_a:sweep())
        assert.are.same({}, runc_ids(rt_a))
        assert.are.same({}, left_after_kill({ "sleep 1004" }))
        assert.are.same({}, fs.list(root_of("orph-a") .. "/bundles/probe"))
        -- the other consumer's container is untouched
        assert.is_true(#procs_matching("sleep 1005") >= 1)
        assert.are.same({ spec_b.id }, runc_ids(rt_b))

        hb:kill("KILL")
        hb:wait()
        rt_b:sweep()
        unistd.close(keep)

        -- a SIGKILLed `relay app invoke` of this consumer: its private root too
        local pidfile = ROOT .. "/invoke.pid"
        os.execute(string.format("env RELAY_APPS=%s RELAY_STATE_DIR=%s RELAY_RUNTIME=runc RELAY_CONSUMER=orph-a " ..
            "%s app invoke long h --event '{}' >/dev/null 2>&1 & echo $! >%s", APPS, STATE, cli.quote(cli.binary()),
            pidfile))
        local pid = tonumber(fs.read_file(pidfile))
        local dir = root_of("orph-a") .. "/invoke-" .. pid
        local function started()
            local report, ids = runtime.exec({ "runc", "--root", dir .. "/runc", "list", "-q" }, 10)
            return fs.is_dir(dir .. "/runc") and report and #ids > 0
        end
        for _ = 1, 50 do
            if started() then
                break
            end
            loop.sleep(0.1)
        end
        assert.truthy(started())
        fs.kill(pid, 9)
        -- its container dies with it (relay-init's control socket); the
        -- sweep removes what is left of its private root
        assert.are.same({}, left_after_kill({ "sleep 1006" }))
        assert.is_true(fs.is_dir(dir))
        -- leaves in the consumer's shared invoke parent: the killed invoke's
        -- (as a runc killed with it leaves it) goes, a live invoke's stays
        local dead_leaf = rt_a.prefix .. "-long-h-" .. pid .. "-1"
        local live_leaf = rt_a.prefix .. "-long-h-" .. fs.getpid() .. "-1"
        local shared = {}
        for _, parent in ipairs(rt_a:cgroup_parents()) do
            shared[#shared + 1] = parent .. "/" .. runtime.INVOKE_CGROUP
            assert(fs.mkdir_p(shared[#shared] .. "/" .. dead_leaf))
            assert(fs.mkdir_p(shared[#shared] .. "/" .. live_leaf))
        end
        daemon.wait_until(function() return not fs.alive(pid) end, 10, "the killed invoke reaped")
        rt_a:sweep()
        assert.is_false(fs.exists(root_of("orph-a") .. "/invoke-" .. pid))
        assert.are.same({}, left_after_kill({ "sleep 1005" }))
        for _, d in ipairs(shared) do
            assert.is_false(fs.exists(d .. "/" .. dead_leaf))
            assert.is_true(fs.rmdir(d .. "/" .. live_leaf))
        end
        local function leaves(parent)
            local out = {}
            for _, e in ipairs(fs.list(parent) or {}) do
                if e.dir and e.name ~= runtime.INVOKE_CGROUP then
                    out[#out + 1] = e.name
                end
            end
            for _, e in ipairs(fs.list(parent .. "/" .. runtime.INVOKE_CGROUP) or {}) do
                if e.dir then
                    out[#out + 1] = runtime.INVOKE_CGROUP .. "/" .. e.name
                end
            end
            return out
        end
        for _, rt in ipairs({ rt_a, rt_b }) do
            for _, parent in ipairs(rt:cgroup_parents()) do
                assert.are.same({}, leaves(parent))
            end
        end
    end)
end)


local maybe_bwrap = (fs.geteuid() == 0 and fs.which("bwrap") and runtime.cgroup_mode()) and describe or pending

maybe_bwrap("bwrap driver", function()
    local BENV = { RELAY_APPS = APPS, RELAY_STATE_DIR = STATE, RELAY_RUNTIME = "bwrap", RELAY_CONSUMER = "bwtest" }

    setup(function()
        make_apps()
    end)

    teardown(function()
        fs.rm_rf(ROOT)
        runtime.remove_cgroup_dirs("relay/bwtest")
    end)

    local function run(handler, event)
        return cli.run({ "app", "invoke", "probe", handler, "--event", event or '{"t":"x"}' }, BENV)
    end

    it("keeps the same contract", function()
        local r = run("env", '{"t":"x"}')
        assert.are.equal(0, r.code, r.stderr)
        assert.truthy(r.stdout:find('^{"t":"x"}\n'))
        assert.truthy(r.stdout:find("\nRELAY_HANDLER=env\n", 1, true))
        assert.truthy(r.stdout:find("\nRELAY_TRIGGER=invoke\n", 1, true))
        assert.are.equal(3, run("exit3").code)
        assert.are.equal(127, cli.run({ "app", "invoke", "nocmd", "h", "--event", "{}" }, BENV).code)
        r = run("fs")
        assert.truthy(r.stdout:find("^app%-ro\nroot%-ro\ntmp%-ok\n65534\n65534\n"))
        assert.truthy(r.stdout:find("CapEff:\t0000000000000000", 1, true))
        r = run("net")
        assert.are.equal("unreachable\nlo\n", r.stdout)
    end)

    it("enforces limits through the cgroups it creates", function()
        assert.are.equal(137, run("hog").code)
        local r = run("forkbomb")
        local n = tonumber(r.stdout:match("forked (%d+)"))
        assert.is_true(n ~= nil and n < 16, r.stdout)
    end)

    it("kills every process at the timeout", function()
        local r = run("hang")
        assert.are.equal(124, r.code, r.stderr)
        assert.are.same({}, left_after_kill({ "sleep 1001", "sleep 1002", "sleep 1003" }))
    end)
end)
