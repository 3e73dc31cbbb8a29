-- No container outlives its deadline or its daemon (issue 12, items 1 and
-- 9), on the test build's compressed constants (grace 0.5 s, heartbeat TTL
-- 1 s): a SIGKILLed daemon's containers die with it (runc and bwrap); a
-- frozen daemon's container dies at timeout + grace all the same, and no
-- next attempt starts before that (its lease), unless a daemon on its host
-- found the holder dead and removed its containers; a daemon removes what a
-- dead consumer on this host left behind, never what a live one owns; and a
-- handler's own exit status 137 is told from a SIGKILL.
-- Real redis-server, runc and bwrap.
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local runtime = require("relay.runtime")
local world = require("helpers.world")

local maybe = world.usable({ compressed = true }) and describe or pending
local maybe_bwrap = world.usable({ tools = { "bwrap" }, compressed = true }) and describe or pending

local APPS = world.APPS:gsub("/worker%-apps$", "/orphan-apps")
local SIGSTOP, SIGCONT = 19, 18
local seq = 0


--- A sleep duration no other run on this host uses ("20.<pid><n>"): its
-- processes are found by their command line, and other suites may run.
local function unique_seconds(whole)
    seq = seq + 1
    return string.format("%d.%d%d", whole, loop.getpid(), seq)
end


--- Starts daemon c1 (env: more variables) and one `kind` handler on it
-- that sleeps unique_seconds(whole). Returns the daemon, the message id and
-- the handler's command line ("sleep <seconds>").
local function one_running(w, kind, whole, env)
    local secs = unique_seconds(whole)
    local d = w:started("c1", env)
    local id = w:publish(string.format('{"t":"%s","s":%s}', kind, secs))
    d:wait_until(function() return #d:runs("start") == 1 end, 10, "the handler's start")
    return d, id, "sleep " .. secs
end


--- Waits until no process has needle in its command line; raises after
-- timeout seconds with what is left.
local function wait_gone(needle, timeout, what)
    daemon.wait_until(function() return #daemon.procs_matching(needle) == 0 end, timeout,
        what .. " (" .. needle .. ")")
end


--- The start stamps of one invocation, oldest first.
local function starts_of(daemons, id, label)
    local inv = daemon.by_invocation(daemons)[id .. " " .. label]
    return inv and inv.starts or {}
end


--- A daemon's runtime root (relay.runtime names it after its consumer, stream and group).
local function root_dir(state_dir, consumer, stream)
    return runtime.new({ runtime = "runc", state_dir = state_dir, consumer = consumer, stream = stream or "events" })
        .base_dir
end


--- The `runc run` processes of a consumer's runtime root.
local function runc_runs(state_dir, consumer)
    local out = {}
    for _, pid in ipairs(daemon.procs_matching("--root " .. root_dir(state_dir, consumer) .. "/runc")) do
        local cmd = (fs.read_file("/proc/" .. pid .. "/cmdline") or ""):gsub("%z", " ")
        if cmd:find(" run ", 1, true) then
            out[#out + 1] = pid
        end
    end
    return out
end


--- The state letter of a process's stat (R, S, T, Z...), or nil once gone.
local function stat_state(path)
    return (fs.read_file(path .. "/stat") or ""):match("^%d+ %b() (%a)")
end


--- Whether every thread of process pid is stopped (state T): a stop
-- reaches a process's threads one at a time.
local function stopped(pid)
    for _, e in ipairs(fs.list("/proc/" .. pid .. "/task") or {}) do
        if stat_state("/proc/" .. pid .. "/task/" .. e.name) ~= "T" then
            return false
        end
    end
    return true
end


--- Whether process pid is dead: gone, or a zombie its parent has not reaped.
local function dead(pid)
    local state = stat_state("/proc/" .. pid)
    return state == nil or state == "Z" or state == "X"
end


--- Container ids runc lists under a consumer's runtime root.
local function runc_list(state_dir, consumer, stream)
    local runc_root = root_dir(state_dir, consumer, stream) .. "/runc"
    local report, ids = runtime.exec({ "runc", "--root", runc_root, "list", "-q" }, 10)
    assert(report)
    local out = {}
    for _, id in ipairs(ids) do
        if id ~= "" then
            out[#out + 1] = id
        end
    end
    return out
end


--- The invocation leaves left in a consumer's cgroup parents.
local function cgroup_leaves(state_dir, consumer)
    local rt = runtime.new({ runtime = "runc", state_dir = state_dir, consumer = consumer, stream = "events" })
    local out = {}
    for _, parent in ipairs(rt:cgroup_parents()) do
        for _, e in ipairs(fs.list(parent) or {}) do
            if e.dir then
                out[#out + 1] = parent .. "/" .. e.name
            end
        end
    end
    return out
end


--- A handler that exits 137 itself and one killed by SIGKILL, both
-- dead-lettered, each with its own reason.
local function assert_137_told_apart(w, runtime_name)
    local d = w:started("c1", { RELAY_RUNTIME = runtime_name })
    local exited = w:publish('{"t":"exit137"}')
    local killed = w:publish('{"t":"selfkill"}')
    d:wait_until(function() return #w:dlq() == 2 end, 15, "two dead letters")
    local reasons = {}
    for _, e in ipairs(w:dlq()) do
        reasons[e.fields.original_id] = e.fields.reason
    end
    assert.are.equal("exit status 137", reasons[exited])
    assert.are.equal("killed by signal 9", reasons[killed])
end


maybe("orphaned containers (runc) #compressed", function()
    local w, frozen

    after_each(function()
        if frozen then
            fs.kill(frozen, SIGCONT)
            frozen = nil
        end
        w = world.close(w)
    end)

    it("kills a SIGKILLed daemon's containers at once; the next attempt runs alone", function()
        w = world.new({ apps = APPS })
        local d1, id, sleep = one_running(w, "sleep", 20)
        assert.are.equal(1, #runc_runs(w.state_dir, w:consumer("c1")))
        local instance = w:inv(id)["oa/sleep"]:match("^running:1:(.+)%.%d+:%d+$")
        d1:kill9()
        -- runc and the container were not in the daemon's process group:
        -- only the daemon's death itself can have ended them
        wait_gone(sleep, 2, "the orphaned handler to die with its daemon")
        daemon.wait_until(function() return #runc_runs(w.state_dir, w:consumer("c1")) == 0 end, 5,
            "runc to clean up after its container")

        -- another name on the same host: its start-up sweep of the dead
        -- consumer's root declares the instance dead, so the next attempt
        -- does not wait out the lease (31 s)
        local d2 = w:started("c2")
        assert.is_true(w:pttl("relay:events:dead:" .. instance) > 0, "the dead instance is not recorded")
        d2:wait_until(function() return #d2:runs("start") == 1 end, 10, "the next attempt")
        local starts = starts_of({ d1, d2 }, id, "oa/sleep")
        assert.are.same({ 1, 2 }, { starts[1].attempt, starts[2].attempt })
        -- the rerun alone (its start line comes just before its sleep)
        daemon.wait_until(function() return #daemon.procs_matching(sleep) == 1 end, 5, "the rerun's handler")
        d2:kill9()
        wait_gone(sleep, 2, "the second daemon's handler")
    end)

    it("kills a frozen daemon's container at timeout + grace, and the daemon reports the timeout", function()
        w = world.new({ apps = APPS })
        local d, id, sleep = one_running(w, "hang", 30)
        frozen = d.pid
        fs.kill(d.pid, SIGSTOP)
        -- 1 s timeout + 0.5 s grace from the spawn (before the start line):
        -- nothing in the frozen daemon can act, so the container did it itself
        wait_gone(sleep, 3, "the container to end itself at its deadline")
        fs.kill(d.pid, SIGCONT)
        frozen = nil
        d:wait_until(function() return #w:dlq() == 1 end, 10, "the dead letter")
        local f = w:dlq()[1].fields
        assert.are.equal(id, f.original_id)
        assert.are.equal("timeout after 1s", f.reason)
        assert.are.same({}, runc_list(w.state_dir, w:consumer("c1")))
    end)

    it("never starts the next attempt while a frozen daemon's container may still run", function()
        w = world.new({ apps = APPS })
        local d1, _, sleep = one_running(w, "long", 20)
        -- the start line comes just before the handler's sleep
        local first = daemon.wait_until(function()
            local procs = daemon.procs_matching(sleep)
            return #procs == 1 and procs
        end, 5, "the handler's sleep")
        -- frozen, not dead: its heartbeat lapses while its container runs
        -- on (6 s timeout: longer than the heartbeat TTL, MinPendingIdle
        -- and the first backoff step together), and nothing on this host
        -- can say it is dead
        frozen = d1.pid
        fs.kill(d1.pid, SIGSTOP)
        local d2 = w:started("c2")
        -- the start is looked at before the container: seen alive after
        -- the start line, the two overlapped
        local gone_at, overlapped
        d2:wait_until(function()
            local started = #d2:runs("start") == 1
            local alive = fs.exists("/proc/" .. first[1])
            overlapped = overlapped or (started and alive)
            gone_at = gone_at or (not alive and loop.now_ms()) or nil
            return started
        end, 30, "the next attempt")
        assert.is_falsy(overlapped, "attempt 2 started while attempt 1's container ran")
        assert.is_true(gone_at <= d2:runs("start")[1].us / 1000, "attempt 2 started before attempt 1 ended")
        assert.are.equal(2, d2:runs("start")[1].attempt)
        fs.kill(d1.pid, SIGCONT)
        frozen = nil
    end)

    it("charges a killed daemon's attempt before its lease ends once its host confirmed it dead", function()
        w = world.new({ apps = APPS })
        -- 30 s timeout: the attempt's lease ends 31 s after its claim
        local d1, id = one_running(w, "sleep", 20)
        local instance = w:inv(id)["oa/sleep"]:match("^running:1:(.+)%.%d+:%d+$")
        d1:kill9()
        -- the same name on the same host: it takes the name over from the
        -- dead process and removes what that process left in its root
        local d2 = w:started("c1")
        assert.is_true(w:pttl("relay:events:dead:" .. instance) > 0, "the dead instance is not recorded")
        d2:wait_until(function() return #d2:runs("start") == 1 end, 15, "the next attempt, long before the lease")
        assert.are.equal(2, d2:runs("start")[1].attempt)
    end)

    it("removes a dead consumer's leftovers on this host at start", function()
        w = world.new({ apps = APPS })
        local d1, _, sleep = one_running(w, "sleep", 20)
        -- a crash of the daemon and of its runc: nobody is left to clean up.
        -- The daemon is frozen while runc is killed, or it would clean up
        -- after runc; a runc frozen instead would be thawed by the kernel
        -- (SIGHUP and SIGCONT to a stopped process whose process group the
        -- daemon's death orphans) and clean up after its container.
        local runs = runc_runs(w.state_dir, w:consumer("c1"))
        assert.are.equal(1, #runs)
        fs.kill(d1.pid, SIGSTOP)
        daemon.wait_until(function() return stopped(d1.pid) end, 5, "the daemon's stop")
        fs.kill(runs[1], 9)
        -- its parent is frozen: it stays a zombie until the daemon dies
        daemon.wait_until(function() return dead(runs[1]) end, 5, "runc's death")
        d1:kill9()
        assert.are.equal(1, #runc_list(w.state_dir, w:consumer("c1")))

        local d2 = w:started("c2")
        assert.are.same({}, runc_list(w.state_dir, w:consumer("c1")))
        wait_gone(sleep, 2, "the dead consumer's container")
        assert.are.same({}, fs.list(root_dir(w.state_dir, w:consumer("c1")) .. "/bundles/oa") or {})
        assert.are.same({}, cgroup_leaves(w.state_dir, w:consumer("c1")))
        assert.is_true(d2:count("removed orphaned containers") >= 1, d2:tail(20))
    end)

    it("never touches a live daemon's containers, whatever stream it reads", function()
        w = world.new({ apps = APPS })
        local secs = unique_seconds(20)
        local sleep = "sleep " .. secs
        -- a daemon of another stream: its consumer key is not in this stream
        local other = w:started("c1", { REDIS_STREAM = "other" })
        w:publish(string.format('{"t":"sleep","s":%s}', secs), "other")
        other:wait_until(function() return #other:runs("start") == 1 end, 10, "the other stream's handler")
        -- the same consumer name on this stream has a runtime root of its own
        local same = w:started("c1")
        local fresh = w:started("c2")
        -- both swept at start, before "relay started"
        assert.are.equal(1, #daemon.procs_matching(sleep))
        assert.are.equal(1, #runc_list(w.state_dir, w:consumer("c1"), "other"))
        assert.are.equal(0, same:count("removed orphaned containers"))
        assert.are.equal(0, fresh:count("removed orphaned containers"))
        other:kill9()
        wait_gone(sleep, 2, "the other stream's handler after its daemon")
    end)

    it("tells a handler's exit status 137 from a SIGKILL in the dead letter", function()
        w = world.new({ apps = APPS })
        assert_137_told_apart(w, "runc")
    end)
end)


maybe_bwrap("orphaned sandboxes (bwrap) #compressed", function()
    local w

    after_each(function() w = world.close(w) end)

    it("kills a SIGKILLed daemon's sandboxes at once (--die-with-parent)", function()
        w = world.new({ apps = APPS })
        local d, _, sleep = one_running(w, "sleep", 21, { RELAY_RUNTIME = "bwrap" })
        d:kill9()
        wait_gone(sleep, 2, "the sandbox to die with its daemon")
    end)

    it("tells a handler's exit status 137 from a SIGKILL in the dead letter", function()
        w = world.new({ apps = APPS })
        assert_137_told_apart(w, "bwrap")
    end)
end)
