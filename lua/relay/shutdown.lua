--- How far the daemon is in stopping. Written only by the signal handlers
-- (through drain and force), read by everything that must stop starting
-- work:
--   draining   no new reads or starts; running invocations finish
--   forced     a second signal: containers are being killed, nothing more
--              is recorded (their running markers stay for recovery)
--   exit_code  128 + the second signal, the status the process exits with
local sync = require("relay.sync")

local _M = {}
local Shutdown = {}
Shutdown.__index = Shutdown


function _M.new()
    return setmetatable({ draining = false, forced = false, exit_code = nil, began = sync.event() }, Shutdown)
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


--- Waits until draining begins.
function Shutdown:wait()
    self.began.wait()
end


return _M
