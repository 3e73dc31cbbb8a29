--- Cooperative synchronisation between tasks, built on loop.wait/loop.wake:
-- joinable tasks, one-shot events and counting semaphores. No busy waiting,
-- and every wait may carry a timeout.
local loop = require("relay.core.loop")

local _M = {}

local unpack = unpack


--- A one-shot event: set(...) once; wait(timeout) returns those values.
function _M.event()
    local ev = { waiters = {}, done = false }

    function ev.set(...)
        if ev.done then
            return
        end
        ev.done, ev.values = true, { n = select("#", ...), ... }
        local waiters = ev.waiters
        ev.waiters = {}
        for _, token in ipairs(waiters) do
            loop.wake(token, unpack(ev.values, 1, ev.values.n))
        end
    end

    function ev.wait(timeout)
        if ev.done then
            return unpack(ev.values, 1, ev.values.n)
        end
        return loop.wait(timeout, function(token)
            ev.waiters[#ev.waiters + 1] = token
        end)
    end

    return ev
end


--- Spawns fn(...) as a task; the handle's join(timeout) returns
-- true, results... or false, error message.
function _M.spawn(fn, ...)
    local finished = _M.event()
    local args = { n = select("#", ...), ... }
    loop.spawn(function()
        local results = { xpcall(function() return fn(unpack(args, 1, args.n)) end, debug.traceback) }
        finished.set(unpack(results, 1, table.maxn(results)))
        if not results[1] then
            error(results[2], 0)  -- still logged by the bridge as a failed task
        end
    end)
    return { join = finished.wait }
end


--- A counting semaphore with FIFO waiters.
function _M.semaphore(count)
    local sem = { available = count, queue = {} }

    function sem.acquire(timeout)
        if sem.available > 0 and #sem.queue == 0 then
            sem.available = sem.available - 1
            return true
        end
        local entry = {}
        local ok, err = loop.wait(timeout, function(token)
            entry.token = token
            sem.queue[#sem.queue + 1] = entry
        end)
        if not ok then
            for i, e in ipairs(sem.queue) do
                if e == entry then
                    table.remove(sem.queue, i)
                    break
                end
            end
            return nil, err
        end
        return true
    end

    function sem.release()
        while #sem.queue > 0 do
            local entry = table.remove(sem.queue, 1)
            if loop.wake(entry.token, true) then
                return  -- the permit passes straight to the waiter
            end
        end
        sem.available = sem.available + 1
    end

    return sem
end


--- A budget of units (bytes) shared by tasks, with FIFO waiters:
-- acquire(n) parks until n units are free and returns what it took (n, or
-- the whole budget for a larger n, so that one oversized holder can still
-- proceed alone); release(taken) gives them back.
function _M.budget(total)
    local b = { available = total, queue = {} }

    local function grant()
        while b.queue[1] and b.queue[1].n <= b.available do
            local entry = table.remove(b.queue, 1)
            b.available = b.available - entry.n
            if not loop.wake(entry.token, true) then
                b.available = b.available + entry.n  -- its waiter is gone
            end
        end
    end

    function b.acquire(n)
        n = math.min(n, total)
        if #b.queue == 0 and b.available >= n then
            b.available = b.available - n
            return n
        end
        loop.wait(nil, function(token)
            b.queue[#b.queue + 1] = { n = n, token = token }
        end)
        return n
    end

    function b.release(taken)
        b.available = b.available + taken
        grant()
    end

    return b
end


return _M
