--- Capped, jittered exponential backoff for the loops that retry a failing
-- call: the delay doubles up to a cap, and each wait is a random half to
-- whole of it, so that replicas (and the tasks of one daemon) retrying the
-- same failure spread out instead of hitting Redis in lockstep.
--   local delay = 0.1
--   loop.sleep(backoff.jitter(delay)); delay = backoff.grow(delay, 5)
local loop = require("relay.core.loop")

local _M = {}

-- Seeded per process: the same sequence in every replica would defeat the jitter.
math.randomseed(loop.getpid() * 1000003 + math.floor(loop.monotonic() * 1e6) % 1000003)


--- A random wait between half of delay and delay (any unit).
function _M.jitter(delay)
    return delay * (0.5 + 0.5 * math.random())
end


--- The delay after delay: doubled, at most cap.
function _M.grow(delay, cap)
    return math.min(delay * 2, cap)
end


return _M
