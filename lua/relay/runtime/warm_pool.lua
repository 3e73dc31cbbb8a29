--- Warm one-shot starts: a few containers of an app created before their
-- events arrive. Each is the same hardened container a cold start runs
-- (the driver's own prepare, with the per-invocation values left out),
-- whose relay-init waits for a start record before it runs the command
-- (src/relay_init.c, -w); a taken one gets its handler, message id,
-- attempt, deadline and event then (relay.runtime.invoke), and is used once.
--
-- A pool is demand-driven: an app's first invocation starts cold and
-- starts filling its pool, every take refills it in a task of its own (the
-- dispatch never waits for a container to be created), and a pool no one
-- took from for warm_idle_ms goes. An idle container holds no event, no
-- deadline and no slot: drain does not wait for it, and its end is the
-- end of its control socket (the daemon's exit, however it dies, or
-- retire), upon which its relay-init exits at once; relay-init's own
-- warm_wait_ms bounds one whose daemon is frozen.
--
-- opts.size_of(app) says how many an app's pool holds now (0: none, say
-- while it is paused or the daemon drains).
local constants = require("relay.constants")
local invoke = require("relay.runtime.invoke")
local log = require("relay.log")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local runtime = require("relay.runtime")

local _M = {}
local Pool = {}
Pool.__index = Pool

-- The pool size of an app without `warm:` (its concurrency caps it too).
_M.DEFAULT_SIZE = 4
-- How long drain waits for retired containers to be gone.
local CLOSE_WAIT_S = 5
local CLOSE_POLL_S = 0.02


--- The pool size an app asks for: `warm: N`, else DEFAULT_SIZE, never more
-- than the invocations that can run at once.
function _M.size(app, concurrency)
    return math.min(app.warm or _M.DEFAULT_SIZE, concurrency)
end


function _M.new(rt, opts)
    return setmetatable({ rt = rt, size_of = opts.size_of, apps = {}, retiring = 0 }, Pool)
end


--- The handler's lines go to entry.on_line once it is taken (set by the
-- taker); relay-init's record only to the driver.
local function router(entry)
    return function(stream, line, partial)
        local spec = entry.spec
        if spec.observe then
            spec.observe(stream, line, partial)
        end
        if entry.on_line and stream ~= "control" then
            entry.on_line(stream, line, partial)
        end
    end
end


--- Creates one waiting container: the entry, or nil, err.
local function create(drv, app)
    local spec, err = drv:prepare(app, { handler = "warm", warm_idle_ms = constants.warm_wait_ms })
    if not spec then
        return nil, err
    end
    local entry = { drv = drv, spec = spec, born = loop.monotonic() }
    local opts = invoke.spawn_options(spec, router(entry))
    opts.deferred = true
    local h, serr = proc.spawn(opts)
    runtime.close_fds(spec.pass_fds)
    if not h then
        drv:finish(spec, { start_error = serr, timed_out = false })
        return nil, serr
    end
    entry.h = h
    return entry
end


--- Ends an untaken container (its relay-init sees the end of file) and
-- cleans up after it in a task.
function Pool:retire(entry)
    local ended_itself = entry.h.done
    entry.h:close_control()
    self.retiring = self.retiring + 1
    loop.spawn(function()
        local ok, err = pcall(function()
            local report = entry.h:wait()
            local class = entry.drv:finish(entry.spec, report)
            if ended_itself then
                log.info("a warm container ended before it was used", { container_id = entry.spec.id,
                    status = report.status, signal = report.signal, detail = class.detail })
            end
        end)
        self.retiring = self.retiring - 1
        if not ok then
            log.warn("warm container cleanup failed", { error = tostring(err) })
        end
    end)
end


--- An entry still waiting and young enough that relay-init's own bound
-- (warm_wait_ms) cannot end it while it is being started.
local function usable(entry, now)
    return not entry.h.done and (now - entry.born) * 1000 < constants.warm_wait_ms / 2
end


local function fill_task(self, p)
    while not p.closed and #p.entries < self.size_of(p.app) do
        local entry, err = create(p.drv, p.app)
        if not entry then
            log.warn("could not pre-create a warm container; starts stay cold", { app = p.app.name, error = err })
            break
        end
        if p.closed then
            self:retire(entry)
            break
        end
        p.entries[#p.entries + 1] = entry
        loop.sleep(0)  -- one container at a time: the loop runs in between
    end
    p.filling = false
end


function Pool:fill(p)
    if p.filling or p.closed then
        return
    end
    p.filling = true
    loop.spawn(function()
        local ok, err = pcall(fill_task, self, p)
        if not ok then
            p.filling = false
            log.error("warm pool refill failed", { app = p.app.name, error = tostring(err) })
        end
    end)
end


--- The app's pool, made on its first take (and anew when the app's
-- template was reloaded: the containers hold the old version).
function Pool:pool_of(app, drv)
    local p = self.apps[app.name]
    if p and p.app ~= app then
        self:clear(app.name)
        p = nil
    end
    if not p then
        p = { app = app, drv = drv, entries = {} }
        self.apps[app.name] = p
    end
    return p
end


--- A waiting container of the app (the oldest usable one), or nil: then
-- the caller starts cold. Either way the pool is refilled in the
-- background. drv is the app's driver, already checked.
function Pool:take(app, drv)
    if self.closed or not drv.warm or self.size_of(app) <= 0 then
        return nil
    end
    local p = self:pool_of(app, drv)
    local now = loop.monotonic()
    p.last_take = now
    local found
    while not found and #p.entries > 0 do
        local entry = table.remove(p.entries, 1)
        if usable(entry, now) then
            found = entry
        else
            self:retire(entry)
        end
    end
    self:fill(p)
    return found
end


--- Retires the pool of one app, or of every app.
function Pool:clear(app_name)
    for name, p in pairs(self.apps) do
        if app_name == nil or name == app_name then
            p.closed = true
            self.apps[name] = nil
            for _, entry in ipairs(p.entries) do
                self:retire(entry)
            end
            p.entries = {}
        end
    end
end


--- Retires the pools no one took from for warm_idle_ms, or whose app may
-- not have one now (paused, removed, warm: 0); drops dead entries.
function Pool:tidy()
    local now = loop.monotonic()
    for name, p in pairs(self.apps) do
        if (now - p.last_take) * 1000 >= constants.warm_idle_ms or self.size_of(p.app) <= 0 then
            self:clear(name)
        else
            for i = #p.entries, 1, -1 do
                if not usable(p.entries[i], now) then
                    self:retire(table.remove(p.entries, i))
                end
            end
        end
    end
end


--- No more warm containers: retires them all and waits (bounded) until
-- they are gone.
function Pool:close()
    self.closed = true
    self:clear()
    local deadline = loop.monotonic() + CLOSE_WAIT_S
    while self.retiring > 0 and loop.monotonic() < deadline do
        loop.sleep(CLOSE_POLL_S)
    end
end


return _M
