-- Warm starts below the daemon: the start record relay-init reads, the
-- config of a container created ahead (no per-invocation values in it),
-- the pool size, and relay-init's wait mode run for real (no container:
-- the init under a deferred proc, activated with a record).
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local runtime = require("relay.runtime")
local warm_pool = require("relay.runtime.warm_pool")

local INV = { handler = "users.created", trigger = "event", message_id = "1-0", attempt = 2,
    deadline_ms = 0, kill_at_ms = 123456789 }


--- Runs `sh -c script` under relay-init -w, deferred; returns the handle
-- and the table its lines go to, by stream (the streams are read apart: no
-- order between them).
local function waiting_init(script, idle_ms)
    local out = { stdout = {}, stderr = {}, control = {} }
    local h = assert(proc.spawn({
        argv = { assert(runtime.init_binary()), "-c", "3", "-w", tostring(idle_ms or 20000), "--",
            "/bin/sh", "-c", script },
        control = true,
        deferred = true,
        on_line = function(stream, line)
            table.insert(out[stream], line)
        end,
    }))
    return h, out
end


describe("the start record", function()
    it("is the deadline and the invocation's variables, NUL-terminated", function()
        local rec = assert(runtime.start_record(INV))
        assert.are.equal(table.concat({ "relay-start", "123456789", "RELAY_ATTEMPT=2",
            "RELAY_DEADLINE=1970-01-01T00:00:00.000Z", "RELAY_HANDLER=users.created", "RELAY_MESSAGE_ID=1-0",
            "RELAY_TRIGGER=event", "", "" }, "\0"), rec)
    end)

    it("refuses a value with a NUL byte, which would end its field early", function()
        local inv = setmetatable({ message_id = "1-0\0RELAY_HANDLER=other" }, { __index = INV })
        local rec, err = runtime.start_record(inv)
        assert.is_nil(rec)
        assert.matches("RELAY_MESSAGE_ID", err)
    end)
end)


describe("a warm container's config", function()
    it("leaves the per-invocation values to the start record", function()
        local warm = { handler = "warm", warm_idle_ms = 600000 }
        assert.are.same({ "/.relay-init", "-w", "600000", "-c", "3", "--" }, runtime.init_args(warm, 3))
        local env = runtime.container_env({ name = "a", runtime = { env = { X = "1" } } }, warm)
        assert.are.same({ PATH = runtime.CONTAINER_PATH, PYTHONUNBUFFERED = "1", X = "1", RELAY_APP = "a" }, env)
    end)

    it("pools warm: N, else the default, never more than the concurrency", function()
        assert.are.equal(warm_pool.DEFAULT_SIZE, warm_pool.size({}, 100))
        assert.are.equal(2, warm_pool.size({}, 2))
        assert.are.equal(0, warm_pool.size({ warm = 0 }, 8))
        assert.are.equal(3, warm_pool.size({ warm = 3 }, 8))
        assert.are.equal(1, warm_pool.size({ warm = 3 }, 1))
    end)
end)


describe("relay-init -w", function()
    it("runs the command with the record's variables and the stdin given at activation", function()
        local h, out = waiting_init('echo "H=$RELAY_HANDLER A=$RELAY_ATTEMPT"; cat')
        assert.is_true(h:activate({ start = assert(runtime.start_record(INV)), stdin = "the event\n", timeout = 10 }))
        local r = h:wait()
        assert.are.equal(0, r.status)
        assert.is_false(r.timed_out)
        assert.are.same({ stdout = { "H=users.created A=2", "the event" }, stderr = {}, control = { "exit 0" } },
            out)
    end)

    it("counts the timeout from the activation, not from the creation", function()
        local h, out = waiting_init("sleep 0.5; echo done")
        loop.sleep(2.5)  -- the premise: the container waited longer than its timeout
        local rec = runtime.start_record(setmetatable({ kill_at_ms = loop.monotonic() * 1000 + 60000 },
            { __index = INV }))
        assert.is_true(h:activate({ start = rec, timeout = 2 }))
        local r = h:wait()
        assert.is_false(r.timed_out)
        assert.are.same({ stdout = { "done" }, stderr = {}, control = { "exit 0" } }, out)
    end)

    it("exits at once, running nothing, when the control socket ends first", function()
        local h, out = waiting_init("echo ran")
        h:close_control()
        local r = h:wait()
        assert.are.equal(137, r.status)
        assert.are.same({ stdout = {}, stderr = {}, control = {} }, out)
    end)

    it("exits without running the command after its idle bound", function()
        local h, out = waiting_init("echo ran", 100)
        local r = h:wait()
        assert.are.equal(137, r.status)
        assert.are.same({ stdout = {}, stderr = {}, control = {} }, out)
    end)

    it("refuses a malformed record as a failure of its own (no status record)", function()
        for _, bad in ipairs({ "relay-start\0x\0\0", "other\0" .. "1\0\0", "relay-start\0" .. "1\0NOEQUALS\0\0" }) do
            local h, out = waiting_init("echo ran")
            assert.is_true(h:activate({ start = bad, timeout = 10 }))
            local r = h:wait()
            assert.are.equal(runtime.INIT_FAILED, r.status, bad)
            assert.are.same({ stdout = {}, stderr = { "relay-init: malformed start record" }, control = {} }, out)
        end
    end)
end)
