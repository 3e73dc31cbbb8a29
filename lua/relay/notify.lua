--- Telling a service manager how the daemon is doing (systemd's Type=notify;
-- scripts/packaging/relay.service): READY=1 once the daemon consumes,
-- STOPPING=1 when a drain begins, WATCHDOG=1 at half the watchdog interval.
-- Without NOTIFY_SOCKET (a terminal, a container, `relay dev`) every call
-- does nothing. The variables are read and removed from the environment
-- when this module is first loaded (relay.core.notify).
--   notify.ready("consuming events as host1")
--   notify.start_watchdog()
--   notify.stopping("draining: 3 running")
local core = require("relay.core.notify")
local log = require("relay.log")
local loop = require("relay.core.loop")

local _M = {}

local warned = false


--- STATUS= takes one line: a newline would start another assignment.
local function status_line(text)
    return "STATUS=" .. tostring(text):gsub("[%c]", " ")
end


--- Sends state; a failure is logged once (the service manager going away
-- must not fill the log), and the daemon goes on either way.
local function send(state)
    local ok, err = core.send(state)
    if not ok and not warned then
        warned = true
        log.warn("cannot notify the service manager", { error = err })
    end
    return ok
end


--- Whether a service manager listens (NOTIFY_SOCKET was set and usable).
function _M.enabled()
    return core.enabled
end


--- The daemon consumes: the manager's start job is done.
function _M.ready(status)
    if core.error and not warned then
        warned = true
        log.warn("ignoring unusable service manager variables", { error = core.error })
    end
    return send(status and ("READY=1\n" .. status_line(status)) or "READY=1")
end


--- A drain began: the manager knows the stop is under way and waits for
-- the exit (up to its stop timeout) instead of treating it as a crash.
function _M.stopping(status)
    return send(status and ("STOPPING=1\n" .. status_line(status)) or "STOPPING=1")
end


--- Any other status line (shown by `systemctl status`).
function _M.status(text)
    return send(status_line(text))
end


--- Pings the watchdog from a task of its own at half its interval, until
-- the process exits (a drain included: it can take as long as the longest
-- handler timeout, and a hung loop then is still a hang). A ping proves
-- the event loop turns; Redis being down is not a reason to be restarted.
-- Returns the interval in seconds, or nil when no watchdog watches us.
function _M.start_watchdog()
    local usec = core.watchdog_usec
    if not usec or _M.watchdog_started then
        return nil
    end
    _M.watchdog_started = true
    local every = usec / 2e6
    loop.spawn(function()
        while true do
            send("WATCHDOG=1")
            loop.sleep(every)
        end
    end)
    return every
end


return _M
