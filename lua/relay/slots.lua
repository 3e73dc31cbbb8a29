--- Who may run a handler now: the global permits (MAX_CONCURRENCY), one
-- pool per app (its effective concurrency), the count of invocations
-- running and their container handles (a forced stop terminates them).
--   local slots = slots_mod.new({ max = 4, limit_of = function(app_name) return 2 end })
--   local release = slots:acquire("app", wait_s) -- nil when none came free in time
--   release()                                    -- gives back exactly what was taken
--   slots:resize()                               -- after a reload: limit_of is asked again
local loop = require("relay.core.loop")
local sync = require("relay.sync")

local _M = {}
local Slots = {}
Slots.__index = Slots


--- A pool of permits that can be resized while permits are held. Shrinking
-- below what is held leaves a debt that returned permits pay off before any
-- waiter gets one, so the holders never outnumber the new size.
local function pool(size)
    local sem = sync.semaphore(size)
    local p = { size = size, debt = 0, take = sem.acquire }

    function p.give()
        if p.debt > 0 then
            p.debt = p.debt - 1
        else
            sem.release()
        end
    end

    function p.resize(new_size)
        for _ = new_size, p.size - 1 do
            if sem.available > 0 then
                sem.acquire()  -- a free permit: returns at once
            else
                p.debt = p.debt + 1
            end
        end
        for _ = p.size, new_size - 1 do
            p.give()
        end
        p.size = new_size
    end

    return p
end


--- opts: { max = the global permits, limit_of = function(app_name) → that
-- app's permits now }.
function _M.new(opts)
    local self = setmetatable({}, Slots)
    self.global = pool(opts.max)
    self.limit_of = opts.limit_of
    self.per_app = {}
    self.running = 0
    self.handles = {}
    return self
end


function Slots:app_pool(name)
    local p = self.per_app[name]
    if not p then
        p = pool(self.limit_of(name))
        self.per_app[name] = p
    end
    return p
end


--- Takes a global and an app permit, waiting up to wait_s in all.
-- @return release (gives back exactly these two permits, once) | nil
function Slots:acquire(app_name, wait_s)
    local started = loop.monotonic()
    local global = self.global
    if not global.take(wait_s) then
        return nil
    end
    local app_pool = self:app_pool(app_name)
    if not app_pool.take(math.max(0, wait_s - (loop.monotonic() - started))) then
        global.give()
        return nil
    end
    local released = false
    return function()
        if not released then
            released = true
            app_pool.give()
            global.give()
        end
    end
end


--- Re-reads every app's limit (after a reload) and resizes its pool in
-- place: permits held under the old limit still count against the new one.
function Slots:resize()
    for name, p in pairs(self.per_app) do
        p.resize(self.limit_of(name))
    end
end


--- Counts one invocation as running until the returned function is called.
function Slots:enter()
    self.running = self.running + 1
    local left = false
    return function()
        if not left then
            left = true
            self.running = self.running - 1
        end
    end
end


--- Keeps a running container's handle for a forced stop; the returned
-- function forgets it.
function Slots:track(handle)
    local key = {}
    self.handles[key] = handle
    return function() self.handles[key] = nil end
end


--- Starts every tracked container's kill sequence. @return whether any ran.
function Slots:terminate_all()
    local any = false
    for _, handle in pairs(self.handles) do
        any = true
        pcall(function() handle:terminate() end)
    end
    return any
end


return _M
