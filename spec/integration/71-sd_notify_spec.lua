-- `relay run` under a service manager (the units' Type=notify): the spec
-- binds the datagram socket the manager would, passes it as NOTIFY_SOCKET,
-- and reads what arrives with the sender's pid (as the manager checks it for
-- NotifyAccess=main): READY=1 once the daemon consumes, WATCHDOG=1 at half
-- WATCHDOG_USEC, STOPPING=1 as soon as SIGTERM starts the drain.
local cjson = require("cjson")
local cli = require("helpers.cli")
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local proc = require("relay.core.proc")
local runtime = require("relay.runtime")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil

-- The manager's end of the protocol: each datagram becomes one JSON line
-- {"pid": sender, "state": text, "t": monotonic seconds}.
local LISTENER = [[
import json, socket, struct, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind(sys.argv[1])
print("bound", flush=True)
while True:
    data, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
    pid = -1
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = struct.unpack("iII", payload[:12])[0]
    print(json.dumps({"pid": pid, "state": data.decode(), "t": time.monotonic()}), flush=True)
]]


local Listener = {}
Listener.__index = Listener


local function listen()
    local self = setmetatable({ dir = daemon.tmpdir("notify"), got = {}, bound = false }, Listener)
    self.path = self.dir .. "/notify.sock"
    self.h = assert(proc.spawn({
        argv = { "python3", "-c", LISTENER, self.path },
        on_line = function(stream, line)
            if stream ~= "stdout" then
                io.stderr:write("notify listener: ", line, "\n")
            elseif line == "bound" then
                self.bound = true
            else
                self.got[#self.got + 1] = cjson.decode(line)
            end
        end,
    }))
    daemon.wait_until(function() return self.bound end, 10, "the notify listener")
    return self
end


--- Messages whose state holds the line `line` (e.g. "READY=1").
function Listener:with(line)
    local out = {}
    for _, m in ipairs(self.got) do
        for l in (m.state .. "\n"):gmatch("([^\n]*)\n") do
            if l == line then
                out[#out + 1] = m
                break
            end
        end
    end
    return out
end


function Listener:close()
    self.h:kill("KILL")
    self.h:wait(5)
    fs.rm_rf(self.dir)
end


describe("relay run and a service manager", function()
    local w, listener, empty_apps

    before_each(function()
        listener = listen()
        empty_apps = daemon.tmpdir("apps")
        w = world.new()
    end)

    after_each(function()
        w:close()
        listener:close()
        fs.rm_rf(empty_apps)
    end)

    it("says READY=1 once it consumes, pings the watchdog, and STOPPING=1 on SIGTERM", function()
        local d = w:daemon("n1", { NOTIFY_SOCKET = listener.path, WATCHDOG_USEC = 200000 }, { apps = empty_apps })
        d:wait_until(function() return #listener:with("READY=1") > 0 end, 15, "READY=1")
        local ready = listener:with("READY=1")[1]
        assert.are.equal(d.pid, ready.pid)
        -- ready means consuming: the group exists and the consumer is claimed
        local groups = w.server:cli("XINFO GROUPS events")
        assert.matches("relay", groups)
        assert.matches("STATUS=", ready.state)
        assert.are.equal(1, #listener:with("READY=1"))

        -- WATCHDOG_USEC=0.2 s: a ping about every 0.1 s, from the daemon itself
        d:wait_until(function() return #listener:with("WATCHDOG=1") >= 4 end, 5, "four watchdog pings")
        local pings = listener:with("WATCHDOG=1")
        for _, p in ipairs(pings) do
            assert.are.equal(d.pid, p.pid)
        end
        local span = pings[#pings].t - pings[1].t
        assert.is_true(span > 0.15 and span < 1.5, "ping spacing " .. span)
        assert.are.equal(0, #listener:with("STOPPING=1"))

        d:signal("TERM")
        d:wait_until(function() return #listener:with("STOPPING=1") > 0 end, 10, "STOPPING=1")
        assert.are.equal(d.pid, listener:with("STOPPING=1")[1].pid)
        local r = d:wait(30)
        assert.are.equal(0, r.code)
        assert.are.equal(1, #listener:with("READY=1"))
    end)

    it("takes the variables out of its environment, and ignores unusable ones", function()
        local script = os.tmpname()
        local f = assert(io.open(script, "w"))
        f:write([[
local core = require("relay.core.notify")
print(tostring(os.getenv("NOTIFY_SOCKET")), tostring(os.getenv("WATCHDOG_USEC")),
    tostring(core.enabled), tostring(core.watchdog_usec), tostring(core.error))
print(tostring(core.send("READY=1")))
]])
        f:close()
        local r = cli.run({ "x-lua", script }, { NOTIFY_SOCKET = listener.path, WATCHDOG_USEC = "4000000" })
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal("nil\tnil\ttrue\t4000000\tnil\ntrue\n", r.stdout)
        daemon.wait_until(function() return #listener:with("READY=1") == 1 end, 5, "the script's READY=1")

        -- another process's watchdog (WATCHDOG_PID) is not ours to ping
        r = cli.run({ "x-lua", script }, { NOTIFY_SOCKET = listener.path, WATCHDOG_USEC = "4000000",
            WATCHDOG_PID = "1" })
        assert.matches("^nil\tnil\ttrue\tnil\tnil\n", r.stdout)

        r = cli.run({ "x-lua", script }, { NOTIFY_SOCKET = "relative/notify.sock" })
        os.remove(script)
        assert.matches("^nil\tnil\tfalse\tnil\tNOTIFY_SOCKET must be", r.stdout)
        assert.matches("\ntrue\n$", r.stdout)  -- sends are no-ops then
    end)

    local maybe = usable and it or pending
    maybe("says STOPPING=1 when the drain begins, while a handler still runs", function()
        local d = w:daemon("n2", { NOTIFY_SOCKET = listener.path })
        d:wait_until(function() return #listener:with("READY=1") > 0 end, 15, "READY=1")
        w:publish('{"t":"sleep","s":"3"}')
        d:wait_until(function() return #d:runs("start") > 0 end, 15, "the handler start")
        d:signal("TERM")
        d:wait_until(function() return #listener:with("STOPPING=1") > 0 end, 5, "STOPPING=1")
        assert.are.equal(0, #d:runs("end"), "STOPPING=1 came only after the handler finished")
        assert.is_true(d:alive())
        local r = d:wait(30)
        assert.are.equal(0, r.code)
        assert.are.equal(1, #d:runs("end"))
    end)
end)
