--- `relay run` as a background child of the spec host, for the worker suites.
--   local d = daemon.start({ url = server.url, consumer = "c1", apps = DIR, env = { MAX_CONCURRENCY = 4 } })
--   d:wait_until(function() return d:count("T end") > 0 end, 10, "first end")
--   d.lines       -- every stderr line so far (handler output is prefixed
--                 -- `[<app>/<handler> <id>#<attempt>] `)
--   d:runs()      -- the handler stamp lines parsed (see spec/fixtures/worker-apps/wa/h.sh)
--   d:stop("TERM").code -- the exit status (report: { code, status, signal })
--   d:kill9()
-- The binary is RELAY_BIN or, without it, the binary hosting the specs.
local cli = require("helpers.cli")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local tmp = require("helpers.tmp")

local _M = {}
local Daemon = {}
Daemon.__index = Daemon

local STAMP = "^%S+ INFO  %[([^/%s]+)/(%S+) (%S+)#(%d+)%] T (%a+) (%S+) (%d+) (%S+) (%d+)$"


--- A fresh temporary directory (see helpers.tmp), its name tagged, mode
-- 0755: state and apps directories hold what handlers' containers mount.
function _M.tmpdir(tag)
    return tmp.mkdtemp("relay-" .. (tag or "spec") .. "-", 493)
end


--- Polls fn every 20 ms (or every `every` s) until it returns a truthy
-- value or timeout seconds pass; raises with what on timeout (a function:
-- called then, for what it can only tell at the end). Returns the value.
function _M.wait_until(fn, timeout, what, every)
    local deadline = loop.monotonic() + (timeout or 10)
    local value
    repeat
        value = fn()
        if value then
            return value
        end
        loop.sleep(every or 0.02)
    until loop.monotonic() > deadline
    value = fn()
    if value then
        return value
    end
    if type(what) == "function" then
        what = what()
    end
    error(string.format("timed out after %ss waiting for %s", tostring(timeout or 10), what or "a condition"), 2)
end


--- opts: url (REDIS_URL), consumer, apps, state_dir (default: a temp dir),
-- env (more variables), args (more flags after `run`), bin.
function _M.start(opts)
    local self = setmetatable({ lines = {}, stdout = {}, opts = opts }, Daemon)
    self.state_dir = opts.state_dir or _M.tmpdir("state")
    local env = {
        PATH = os.getenv("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin",
        HOME = os.getenv("HOME") or "/root",
        REDIS_URL = opts.url,
        RELAY_APPS = opts.apps,
        RELAY_CONSUMER = opts.consumer,
        RELAY_STATE_DIR = self.state_dir,
        RELAY_RUNTIME = "runc",
        RELAY_LOG_LEVEL = "info",
        MAX_CONCURRENCY = "4",
    }
    for k, v in pairs(opts.env or {}) do
        env[k] = v ~= false and tostring(v) or nil
    end
    self.env = env
    local argv = { opts.bin or cli.binary(), "run" }
    for _, a in ipairs(opts.args or {}) do
        argv[#argv + 1] = a
    end
    local lines, stdout = self.lines, self.stdout
    local h = assert(proc.spawn({
        argv = argv,
        env = env,
        on_line = function(stream, line)
            if stream == "stderr" then
                lines[#lines + 1] = line
            else
                stdout[#stdout + 1] = line
            end
            if os.getenv("RELAY_SPEC_ECHO") then
                io.stderr:write("[", opts.consumer or "?", "] ", line, "\n")
            end
        end,
    }))
    self.h, self.pid = h, h.pid
    return self
end


function Daemon:wait_until(fn, timeout, what)
    local ok, err = pcall(_M.wait_until, fn, timeout, what)
    if not ok then
        error(tostring(err) .. "\n--- daemon " .. tostring(self.opts.consumer) .. " log tail:\n" .. self:tail(40), 2)
    end
    return err
end


--- The last n stderr lines as text (for assertion messages).
function Daemon:tail(n)
    local from = math.max(1, #self.lines - (n or 30) + 1)
    return table.concat(self.lines, "\n", from, #self.lines)
end


--- Lines (stderr) containing needle, plainly.
function Daemon:grep(needle)
    local out = {}
    for _, l in ipairs(self.lines) do
        if l:find(needle, 1, true) then
            out[#out + 1] = l
        end
    end
    return out
end


function Daemon:count(needle)
    return #self:grep(needle)
end


--- The handler stamp lines: { app, handler, id, attempt, what = "start"|"end", us }.
-- The prefix is checked against the stamp's own fields, so a wrong prefix
-- shows up as a missing run.
function Daemon:runs(what)
    local out = {}
    for _, l in ipairs(self.lines) do
        local app, handler, id, attempt, kind, sid, sattempt, shandler, ns = l:match(STAMP)
        if app and id == sid and attempt == sattempt and handler == shandler and (not what or kind == what) then
            out[#out + 1] = { app = app, handler = handler, id = id, attempt = tonumber(attempt), what = kind,
                us = tonumber(ns:sub(1, -4)), label = app .. "/" .. handler }
        end
    end
    return out
end


function Daemon:alive()
    return fs.exists("/proc/" .. self.pid) and not self.report
end


--- Sends signal (default TERM) and waits up to timeout s for the exit.
-- Returns the exit report { code = exit status (128+N if killed by signal
-- N), status = N | nil, signal = N | nil }, or nil, "timeout".
function Daemon:stop(signal, timeout)
    if not self.report then
        self.h:kill(signal or "TERM")
    end
    return self:wait(timeout or 30)
end


--- Sends a signal without waiting.
function Daemon:signal(signal)
    return self.h:kill(signal or "TERM")
end


--- Waits for the exit; the report, or nil, "timeout".
function Daemon:wait(timeout)
    if self.report then
        return self.report
    end
    local r, err = self.h:wait(timeout)
    if r then
        r.code = r.status or (128 + (r.signal or 0))
        self.report = r
    end
    return r, err
end


--- SIGKILL (a crash: containers stay behind for the next start's sweep).
function Daemon:kill9()
    if self.report then
        return self.report
    end
    self.h:kill("KILL")
    return self:wait(10)
end


--- Kills the daemon if it still runs, removes its consumer's leftover
-- containers and cgroups, and its state dir when start() made it.
function Daemon:cleanup()
    local runtime = require("relay.runtime")
    if not self.report then
        self:kill9()
    end
    local rt = runtime.new({ runtime = "runc", state_dir = self.state_dir, consumer = self.opts.consumer,
        stream = self.env.REDIS_STREAM or "events", group = self.env.REDIS_GROUP or "relay" })
    pcall(function() rt:sweep() end)
    runtime.remove_cgroup_dirs(rt.cgroup_parent)
    if not self.opts.state_dir then
        fs.rm_rf(self.state_dir)
    end
end


--- The daemon's CPU time (user + system) in seconds, from /proc/<pid>/stat.
function Daemon:cpu_seconds()
    local stat = fs.read_file("/proc/" .. self.pid .. "/stat")
    if not stat then
        return nil
    end
    local fields = {}
    for f in stat:gsub("^.*%) ", ""):gmatch("%S+") do
        fields[#fields + 1] = f
    end
    -- after "pid (comm) ": state is field 1, utime field 12, stime field 13
    return (tonumber(fields[12]) + tonumber(fields[13])) / 100
end


--- The daemon's runtime root name (relay.runtime: consumer, stream, group).
local function runtime_root_name(self)
    return require("relay.runtime").root_name(self.opts.consumer, self.env.REDIS_STREAM or "events",
        self.env.REDIS_GROUP or "relay")
end


--- Container ids runc still lists under this daemon's runtime root.
function Daemon:runc_list()
    local root = self.state_dir .. "/" .. runtime_root_name(self) .. "/runc"
    local p = io.popen("runc --root " .. cli.quote(root) .. " list -q 2>/dev/null")
    local ids = {}
    for l in p:lines() do
        if l ~= "" then
            ids[#ids + 1] = l
        end
    end
    p:close()
    return ids
end


--- The runc_list ids but this daemon's own waiting warm containers
-- (relay.runtime.warm_pool): once its attempts have settled, what is left
-- of attempts. (A taken warm container keeps its name: only while nothing
-- runs does the name tell a waiting one.)
function Daemon:containers_but_pool()
    local pool = "-warm-" .. self.pid .. "-"
    local out = {}
    for _, id in ipairs(self:runc_list()) do
        if not id:find(pool, 1, true) then
            out[#out + 1] = id
        end
    end
    return out
end


--- Stamp lines of several daemons grouped per invocation ("<id> <app>/<handler>"):
-- { [key] = { starts = {run…}, ends = {run…} } }, starts and ends in time order.
function _M.by_invocation(daemons)
    local out = {}
    for _, d in ipairs(daemons) do
        for _, r in ipairs(d:runs()) do
            local key = r.id .. " " .. r.label
            local inv = out[key] or { starts = {}, ends = {} }
            out[key] = inv
            r.daemon = d
            local list = r.what == "start" and inv.starts or inv.ends
            list[#list + 1] = r
        end
    end
    for _, inv in pairs(out) do
        table.sort(inv.starts, function(a, b) return a.us < b.us end)
        table.sort(inv.ends, function(a, b) return a.us < b.us end)
    end
    return out
end


--- Pids whose command line contains needle.
function _M.procs_matching(needle)
    local out = {}
    for _, e in ipairs(fs.list("/proc") or {}) do
        if e.name:match("^%d+$") then
            local cmd = (fs.read_file("/proc/" .. e.name .. "/cmdline") or ""):gsub("%z", " ")
            if cmd:find(needle, 1, true) then
                out[#out + 1] = tonumber(e.name)
            end
        end
    end
    return out
end


return _M
