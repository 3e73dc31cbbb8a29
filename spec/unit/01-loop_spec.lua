-- The coroutine bridge: tasks, waits, timeouts, wakes and failures.
local loop = require("relay.core.loop")
local sync = require("relay.sync")

describe("the coroutine bridge", function()
    it("runs concurrent sleeps in parallel, not one after another", function()
        local started = loop.monotonic()
        local order = {}
        local tasks = {}
        for i, delay in ipairs({ 0.3, 0.1, 0.2 }) do
            tasks[i] = sync.spawn(function()
                loop.sleep(delay)
                order[#order + 1] = delay
                return delay * 10
            end)
        end
        for i, expected in ipairs({ 3, 1, 2 }) do
            local ok, value = tasks[i].join(5)
            assert.is_true(ok)
            assert.are.equal(expected, value)
        end
        local elapsed = loop.monotonic() - started
        assert.are.same({ 0.1, 0.2, 0.3 }, order)
        assert.is_true(elapsed < 0.5, "took " .. elapsed .. "s")
        assert.is_true(elapsed >= 0.29, "took " .. elapsed .. "s")
    end)

    it("times out a wait nobody completes, with nil and 'timeout'", function()
        local started = loop.monotonic()
        local value, err = loop.wait(0.1, function() end)
        assert.is_nil(value)
        assert.are.equal("timeout", err)
        assert.is_true(loop.monotonic() - started >= 0.09)
    end)

    it("delivers woken values once and refuses a second (stale) wake", function()
        local token
        local waker = sync.spawn(function()
            loop.sleep(0.01)
            local first = loop.wake(token, "a", 2, nil, true)
            local second = loop.wake(token, "again")
            return first, second
        end)
        local a, b, c, d = loop.wait(5, function(t) token = t end)
        assert.are.equal("a", a)
        assert.are.equal(2, b)
        assert.is_nil(c)
        assert.is_true(d)
        local ok, first, second = waker.join(5)
        assert.is_true(ok)
        assert.is_true(first)
        assert.is_false(second)
    end)

    it("refuses a wake that arrives after the wait timed out", function()
        local token
        local value, err = loop.wait(0.05, function(t) token = t end)
        assert.is_nil(value)
        assert.are.equal("timeout", err)
        assert.is_false(loop.wake(token, "late"))
    end)

    it("fails only the task whose resumed code raised", function()
        local failing = sync.spawn(function()
            loop.sleep(0.01)
            error("boom inside a resumed coroutine")
        end)
        local healthy = sync.spawn(function()
            loop.sleep(0.05)
            return "still running"
        end)
        local ok, err = failing.join(5)
        assert.is_false(ok)
        assert.matches("boom inside a resumed coroutine", err)
        assert.matches("traceback", err)
        local ok2, value = healthy.join(5)
        assert.is_true(ok2)
        assert.are.equal("still running", value)
    end)

    it("raises a clear error when a wait is attempted outside a task", function()
        local co = coroutine.create(function() loop.sleep(0.01) end)
        local ok, err = coroutine.resume(co)
        assert.is_false(ok)
        assert.matches("can only run inside a relay task", err)
    end)

    it("bounds a semaphore and hands permits over in order", function()
        local sem = sync.semaphore(2)
        local running, peak, done = 0, 0, {}
        local tasks = {}
        for i = 1, 6 do
            tasks[i] = sync.spawn(function()
                assert(sem.acquire(5))
                running = running + 1
                peak = math.max(peak, running)
                loop.sleep(0.02)
                running = running - 1
                done[#done + 1] = i
                sem.release()
            end)
        end
        for i = 1, 6 do
            assert.is_true((tasks[i].join(5)))
        end
        assert.are.equal(2, peak)
        assert.are.equal(6, #done)
        local ok, err = (function()
            local s = sync.semaphore(0)
            return s.acquire(0.02)
        end)()
        assert.is_nil(ok)
        assert.are.equal("timeout", err)
    end)
end)

describe("signal handlers", function()
    it("can be removed without leaving the loop unable to wait on a child", function()
        -- A removed signal watcher once dropped the loop's count of active
        -- watchers one too low, so a task waiting only on a child process
        -- was judged stuck ("waiting on something that can never complete").
        local cli = require("helpers.cli")
        local path = os.tmpname()
        local f = assert(io.open(path, "w"))
        f:write([[
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
loop.on_signal(15, function() end)
loop.on_signal(15, nil)
local h = assert(proc.spawn({ argv = { "/bin/sleep", "0.2" } }))
local report = assert(h:wait())
print("child exited " .. tostring(report.status))
]])
        f:close()
        local r = cli.run({ "x-lua", path })
        os.remove(path)
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal("child exited 0\n", r.stdout)
    end)
end)
