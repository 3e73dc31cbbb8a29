--- How far the daemon is in stopping. Written only by the signal handlers
-- (through drain and force), read by everything that must stop starting
-- work:
--   draining   no new reads or starts; running invocations finish
--   forced     a second signal: containers are being killed, nothing more
--              is recorded (their running markers stay for recovery)
--   exit_code  128 + the second signal, the status the process exits with
-- A forced stop alone ends the process (stop_forced): a drain that finds
-- nothing running first waits for it (drained), since exiting there would
-- cut short the forced stop's record of the instance's death.
local log = require("relay.log")
local sync = require("relay.sync")

local _M = {}
local Shutdown = {}
Shutdown.__index = Shutdown


function _M.new()
    return setmetatable({ draining = false, forced = false, exit_code = nil, began = sync.event(),
        exited = sync.event() }, Shutdown)
end


--- First signal: stop reading and starting; wakes wait().
function Shutdown:drain()
    self.draining = true
    self.began.set()
end


--- Second signal: the process exits 128 + signum, whoever finishes first.
function Shutdown:force(signum)
    self.draining = true
    self.forced = true
    self.exit_code = 128 + signum
    self.began.set()
end


--- Second signal: force(signum), then kill() (the containers are killed and
-- the instance's death recorded), then exit(128 + signum), which ends the
-- process. An error in kill is logged, never a reason not to exit.
function Shutdown:stop_forced(signum, kill, exit)
    self:force(signum)
    local ok, err = xpcall(kill, debug.traceback)
    if not ok then
        log.error("forced stop: killing the containers failed", { error = tostring(err) })
    end
    exit(self.exit_code)
    self.exited.set()  -- only where exit returns (a test's)
end


--- For the drain, once nothing runs: returns at once unless the stop is
-- forced, and then only after stop_forced's exit.
function Shutdown:drained()
    if self.forced then
        self.exited.wait()
    end
end


--- Waits until draining begins.
function Shutdown:wait()
    self.began.wait()
end


return _M
