-- User hooks: loading, the sandbox, no waiting, errors
-- that are logged (rate-limited) and change nothing, runaway hooks cut off,
-- absent hooks, relay.udp, and the two examples.
local cli = require("helpers.cli")
local hooks = require("relay.hooks")
local log = require("relay.log")
local loop = require("relay.core.loop")
local metrics = require("relay.metrics")
local observe = require("relay.observe")
local proc = require("relay.core.proc")

local CHILD_TIMEOUT_S = 10
local DIR = os.tmpname()
os.remove(DIR)
os.execute("mkdir -p " .. DIR)
local seq = 0
-- Loading a hooks file removes string.dump from the whole Lua state (see
-- the module header); these specs restore it for the specs that follow.
local string_dump = string.dump


local function hook_file(text)
    seq = seq + 1
    local path = string.format("%s/hooks%d.lua", DIR, seq)
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    return path
end


local function load_text(text)
    return hooks.load(hook_file(text))
end


--- Captures log records of the given levels while fn runs.
local function capture_logs(fn)
    local records, saved = {}, {}
    for _, level in ipairs({ "info", "warn", "error" }) do
        saved[level] = log[level]
        log[level] = function(msg, fields)
            records[#records + 1] = { level = level, msg = msg, fields = fields or {} }
        end
    end
    local ok, err = pcall(fn)
    for level, f in pairs(saved) do
        log[level] = f
    end
    assert(ok, err)
    return records
end


-- Loads argv[1] as a hooks file and calls its on_event, printing what the
-- hook error reporter logs: runs in a child so that a runaway hook which
-- escapes the budget fails the spec (timed out) instead of hanging it.
local CHILD_SCRIPT = [[
local hooks = require("relay.hooks")
local log = require("relay.log")
log.error = function(_, fields) io.write("error: ", fields.error, "\n") end
local h, err = hooks.load(arg[1])
if not h then
    io.write("load: ", err, "\n")
    os.exit(0)
end
h.on_event({})
io.write("returned\n")
]]


--- Runs the hooks file text in a child relay; returns its stdout and
-- whether the bounded wait ran out.
local function run_child(text)
    local script = hook_file(CHILD_SCRIPT)
    local out = {}
    local h = assert(proc.spawn({
        argv = { cli.binary(), "x-lua", script, hook_file(text) },
        timeout = CHILD_TIMEOUT_S,
        on_line = function(_, line) out[#out + 1] = line end,
    }))
    local report = assert(h:wait(CHILD_TIMEOUT_S + 5))
    return table.concat(out, "\n"), report.timed_out
end


--- Runs one hook that reports its result through relay.log.
local function probe(body)
    local h = assert(load_text("return { on_event = function(e) " .. body .. " end }"))
    local records = capture_logs(function() h.on_event({ id = "1-0" }) end)
    return records
end


describe("hooks", function()
    teardown(function()
        os.execute("rm -rf " .. DIR)
        rawset(string, "dump", string_dump)
    end)

    describe("loading", function()
        it("rejects a missing file, a non-table, unknown hooks, non-functions and bytecode", function()
            local h, err = hooks.load(DIR .. "/nope.lua")
            assert.is_nil(h)
            assert.matches("No such file", err)
            h, err = load_text("return 42")
            assert.is_nil(h)
            assert.matches("must return a table", err)
            h, err = load_text("return { on_evnt = function() end }")
            assert.is_nil(h)
            assert.matches("unknown hook 'on_evnt'", err)
            h, err = load_text("return { on_event = 1 }")
            assert.is_nil(h)
            assert.matches("on_event must be a function", err)
            h, err = load_text(string_dump(function() return {} end))
            assert.is_nil(h)
            assert.matches("bytecode is not allowed", err)
            h, err = load_text("return {")
            assert.is_nil(h)
            assert.matches("expected", err)
        end)

        it("fails a file whose top level errors or runs away", function()
            local h, err = load_text("io.write('x') return {}")
            assert.is_nil(h)
            assert.matches("'io' is not available in the hook sandbox", err)
            h, err = load_text("while true do end")
            assert.is_nil(h)
            assert.matches("instruction budget", err)
        end)

        it("has a field only for each defined hook, so absent ones cost a nil test", function()
            local h = assert(load_text("return { on_dlq = function() end }"))
            assert.is_function(h.on_dlq)
            assert.is_nil(h.on_event)
            assert.is_nil(h.on_attempt)
            assert.is_nil(h.on_log)
            assert.are.same({ "on_dlq" }, h.names)
        end)
    end)

    describe("the sandbox", function()
        it("denies io, os.execute, os.exit, require, package, debug, coroutine and getfenv", function()
            for _, expr in ipairs({ "io", "require", "package", "debug", "coroutine", "getfenv", "setfenv",
                "dofile", "loadfile", "collectgarbage", "jit", "newproxy" }) do
                local records = probe("local x = " .. expr)
                assert.are.equal(1, #records, expr)
                assert.matches("'" .. expr .. "' is not available in the hook sandbox", records[1].fields.error)
            end
            local records = probe("relay.log('info', 'os', { execute = type(os.execute), exit = type(os.exit), " ..
                "remove = type(os.remove), getenv = type(os.getenv), time = type(os.time), " ..
                "meta = type(getmetatable('')) })")
            assert.are.same({ execute = "nil", exit = "nil", remove = "nil", getenv = "nil",
                time = "function", meta = "nil" }, records[1].fields)
        end)

        it("hides the environment (it holds the Redis password)", function()
            local h, err = load_text("local password = os.getenv('REDIS_PASSWORD') return {}")
            assert.is_nil(h)
            assert.matches("getenv", err)
            local records = probe("os.getenv('HOME')")
            assert.matches("getenv", records[1].fields.error)
        end)

        it("has no string.dump, not even through a string's methods", function()
            local records = probe("relay.log('info', 'dump', { lib = type(string.dump), method = type(('').dump), " ..
                "upper = type(('').upper) })")
            assert.are.same({ lib = "nil", method = "nil", upper = "function" }, records[1].fields)
            local h, err = load_text("local bytes = ('').dump(function() end) return {}")
            assert.is_nil(h)
            assert.matches("dump", err)
        end)

        it("refuses new globals and bytecode through loadstring, and binds loaded text to the sandbox", function()
            local records = probe("counter = 1")
            assert.matches("assignment to undeclared global 'counter'", records[1].fields.error)
            records = probe("relay.log('info', 'l', { r = select(2, loadstring('\\27LJ')) })")
            assert.matches("bytecode is not allowed", records[1].fields.r)
            records = probe("local f = loadstring('return io') f()")
            assert.matches("'io' is not available", records[1].fields.error)
        end)

        it("keeps the standard library usable", function()
            local records = probe("relay.log('info', 'std', { s = string.format('%03d', 7) .. ('ab'):upper(), " ..
                "t = table.concat({ 1, 2 }, ','), m = math.max(1, 3), now = type(relay.now()), " ..
                "x = select(2, xpcall(error, function(e) return 'handled ' .. e end, 'x', 0)) })")
            assert.are.same({ s = "007AB", t = "1,2", m = 3, now = "number", x = "handled x" }, records[1].fields)
        end)
    end)

    describe("waiting", function()
        it("raises a clear error for anything that would park the daemon", function()
            local ok, err = hooks.run_budgeted(function() loop.sleep(0.01) end)
            assert.is_false(ok)
            assert.matches("can only run inside a relay task %(not in a hook", err)
            ok, err = hooks.run_budgeted(function() coroutine.yield() end)
            assert.is_false(ok)
            assert.matches("must not yield", err)
        end)
    end)

    describe("errors", function()
        it("are logged once per hook per interval with the suppressed count, and return nil", function()
            local h = assert(load_text("return { on_event = function() error('boom') end, " ..
                "on_dlq = function() error('bang') end }"))
            local records = capture_logs(function()
                for _ = 1, 5 do
                    assert.is_nil(h.on_event({ id = "1-0" }))
                end
                h.on_dlq({})
            end)
            assert.are.equal(2, #records)
            assert.are.equal("error", records[1].level)
            assert.are.equal("hook failed; outcome unchanged", records[1].msg)
            assert.are.equal("on_event", records[1].fields.hook)
            assert.matches("boom", records[1].fields.error)
            assert.are.equal("on_dlq", records[2].fields.hook)
        end)

        it("never change what is counted", function()
            local w = { metrics_registry = metrics.new() }
            w.hooks = assert(load_text("return { on_attempt = function() error('x') end, " ..
                "on_event = function() while true do end end, on_dlq = function() error('y') end }"))
            local m = observe.reporter(w)
            capture_logs(function()
                m.attempt({ app = "a", handler = "h" }, "failed", { duration_ms = 5, status = 1 }, { id = "1-0" }, 1)
                m.event("matched", { id = "1-0", labels = { "a/h" } })
                m.dlq({ app = "a", handler = "h" }, { id = "1-0" }, "exit status 1", 1, "9-0")
            end)
            local reg = w.metrics_registry
            assert.are.equal(1, reg:get("relay_attempts_total", { app = "a", handler = "h", outcome = "failed" }))
            assert.are.equal(1, reg:get("relay_events_total", { outcome = "matched" }))
            assert.are.equal(1, reg:get("relay_dlq_entries_total", { app = "a", handler = "h" }))
        end)
    end)

    describe("runaway hooks", function()
        it("are cut off by the instruction budget, even when compiled code would not check", function()
            local h = assert(load_text([[
                local function spin(n) local x = 0 for i = 1, n do x = x + i end return x end
                return {
                    on_event = function() while true do end end,
                    on_attempt = function() return spin(1e13) end,
                    on_dlq = function() while true do pcall(function() while true do end end) end end,
                }]]))
            for _, name in ipairs({ "on_event", "on_attempt", "on_dlq" }) do
                local started = loop.monotonic()
                local records = capture_logs(function() h[name]({}) end)
                assert.is_true(loop.monotonic() - started < 2, name)
                assert.matches("instruction budget", records[1].fields.error, nil, true)
            end
        end)

        -- LuaJIT calls an xpcall message handler before unwinding, so after
        -- the budget error (raised inside the count hook) the handler runs
        -- while that hook is active, and LuaJIT calls no hook then.
        it("cannot escape through an xpcall message handler", function()
            for _, body in ipairs({
                "xpcall(function() while true do end end, function() while true do end end)",
                "xpcall(error, function() while true do end end)",
                "xpcall(function() while true do end end, function(e) return xpcall(error, function() " ..
                    "while true do end end) end)",
            }) do
                local started = loop.monotonic()
                local out, timed_out = run_child("return { on_event = function() " .. body .. " end }")
                assert.is_false(timed_out, body)
                assert.is_true(loop.monotonic() - started < CHILD_TIMEOUT_S, body)
                assert.matches("error: hook exceeded its instruction budget", out, 1, true)
                assert.matches("returned$", out)
            end
        end)

        it("cannot escape through an error object's __tostring", function()
            local obj = "setmetatable({}, { __tostring = function() while true do end end })"
            local out, timed_out = run_child("return { on_event = function() error(" .. obj .. ") end }")
            assert.is_false(timed_out)
            assert.matches("error: (error object is a table value)", out, 1, true)
            assert.matches("returned$", out)
            out, timed_out = run_child("error(" .. obj .. ")")
            assert.is_false(timed_out)
            assert.matches("load: .*%(error object is a table value%)", out)
            -- stringified by the hook itself, it is the hook's time
            out, timed_out = run_child("return { on_event = function() " ..
                "local _, e = pcall(error, " .. obj .. ") return tostring(e) end }")
            assert.is_false(timed_out)
            assert.matches("error: hook exceeded its instruction budget", out, 1, true)
        end)

        it("leave the daemon's own code and count hooks as they were", function()
            local before = debug.gethook()
            local h = assert(load_text("return { on_event = function() return 1 end }"))
            h.on_event({})
            assert.are.equal(before, debug.gethook())
        end)
    end)

    describe("on_log", function()
        it("sees Relay's records, can suppress them, and does not see its own", function()
            local h = assert(load_text([[
                return { on_log = function(r)
                    relay.log("info", "seen", { msg = r.msg, level = r.level, key = r.fields.key })
                    return r.msg ~= "hide me"
                end }]]))
            hooks.install_log_hook(h)
            local written = {}
            local core = require("relay.core.log")
            local saved = core.write
            core.write = function(_, msg, fields) written[#written + 1] = msg .. (fields or "") end
            local ok, err = pcall(function()
                log.info("hide me", { key = 1 })
                log.info("show me")
            end)
            core.write = saved
            hooks.install_log_hook({})
            assert(ok, err)
            assert.are.equal(3, #written)
            assert.matches("^seen", written[1])
            assert.matches("hide me", written[1])
            assert.matches("^seen", written[2])
            assert.are.equal("show me", written[3])
        end)
    end)

    describe("on_log records", function()
        it("hold copies of Relay's tables, so a hook cannot set a metatable on one", function()
            local h = assert(load_text([[
                return { on_log = function(r)
                    setmetatable(r.fields.t, { __index = function() while true do end end })
                    r.fields.t.inner.x = 2
                end }]]))
            hooks.install_log_hook(h)
            local shared = { inner = { x = 1 } }
            shared.self = shared
            local core = require("relay.core.log")
            local saved = core.write
            core.write = function() end
            local ok, err = pcall(log.info, "t", { t = shared })
            core.write = saved
            hooks.install_log_hook({})
            assert(ok, err)
            assert.is_nil(getmetatable(shared))
            assert.are.equal(1, shared.inner.x)
        end)
    end)

    describe("relay.udp", function()
        it("takes numeric addresses at run time, names only while loading, and never raises on send", function()
            local h = assert(load_text([[
                local early = relay.udp("localhost", 9)
                return { on_event = function(e)
                    local sock, err = relay.udp("relay-no-such-host.invalid", 9)
                    local num = relay.udp("127.0.0.1", 9)
                    local sent = num:send("x") or true
                    early:send("y")
                    relay.log("info", "udp", { sock = tostring(sock), err = err, sent = sent })
                end }]]))
            local records = capture_logs(function() h.on_event({}) end)
            assert.are.equal("udp", records[1].msg)
            assert.are.equal("nil", records[1].fields.sock)
            assert.matches("names resolve only while the hooks file loads", records[1].fields.err)
        end)
    end)

    describe("the examples", function()
        it("jsonl_metrics writes one record per attempt and dead letter", function()
            local h = assert(hooks.load("examples/hooks/jsonl_metrics.lua"))
            local records = capture_logs(function()
                h.on_start({ stream = "events", group = "relay", consumer = "c", apps = { "a" } })
                h.on_event({ id = "1-0", outcome = "matched", matches = { "a/h" } })
                h.on_attempt({ app = "a", handler = "h", message_id = "1-0", attempt = 1, outcome = "succeeded",
                    duration_ms = 12, exit_code = 0 })
                h.on_dlq({ app = "a", handler = "h", message_id = "1-0", reason = "exit status 1", attempts = 1 })
            end)
            assert.are.equal(3, #records)
            assert.are.same({ kind = "start", stream = "events", consumer = "c", apps = 1 }, records[1].fields)
            assert.are.same({ kind = "attempt", app = "a", handler = "h", outcome = "succeeded", attempt = 1,
                duration_ms = 12, exit_code = 0 }, records[2].fields)
            assert.are.equal("dlq", records[3].fields.kind)
        end)

        it("statsd sends counters and timings over UDP", function()
            local lines = {}
            local receiver = assert(proc.spawn({
                argv = { "python3", "-u", "-c", [[
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
s.settimeout(5)
try:
    while True:
        print(s.recvfrom(65535)[0].decode(), flush=True)
except OSError:
    pass
]] },
                timeout = 10,
                on_line = function(stream, line)
                    if stream == "stdout" then
                        lines[#lines + 1] = line
                    end
                end,
            }))
            local deadline = loop.monotonic() + 5
            while #lines == 0 and loop.monotonic() < deadline do
                loop.sleep(0.02)
            end
            -- hooks cannot read the environment: configure a copy of the example
            local f = assert(io.open("examples/hooks/statsd.lua", "rb"))
            local text = f:read("*a")
            f:close()
            local n1, n2
            text, n1 = text:gsub("\nlocal PORT = %d+\n", "\nlocal PORT = " .. lines[1] .. "\n")
            text, n2 = text:gsub('\nlocal PREFIX = "relay"\n', '\nlocal PREFIX = "t"\n')
            assert.are.same({ 1, 1 }, { n1, n2 })
            local h = assert(load_text(text))
            h.on_event({ id = "1-0", outcome = "matched", matches = { "a/h" } })
            h.on_attempt({ app = "a", handler = "h.x", outcome = "failed", duration_ms = 12 })
            h.on_dlq({ app = "a", handler = "h" })
            while #lines < 5 and loop.monotonic() < deadline do
                loop.sleep(0.02)
            end
            receiver:kill("KILL")
            receiver:wait(5)
            assert.are.same({ "t.events.matched:1|c", "t.attempts.a.h_x.failed:1|c",
                "t.attempts.a.h_x.duration:12|ms", "t.dlq.a.h:1|c" }, { unpack(lines, 2) })
        end)
    end)
end)
