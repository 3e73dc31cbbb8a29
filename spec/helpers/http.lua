--- The daemon's HTTP endpoints (/metrics, /healthz) as the specs read them:
-- through python3's urllib, a client that is not Relay's own.
--   local http = require("helpers.http")
--   local port = http.free_port()
--   local status, content_type, body = http.get(port, "/healthz")
--   local n = http.metric(port, "relay_log_dropped_total")   -- nil when absent
local core_http = require("relay.core.http")
local proc = require("relay.core.proc")

local _M = {}

local FETCH = [[
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    code, body = r.status, r.read()
    ctype = r.headers["Content-Type"]
except urllib.error.HTTPError as e:
    code, body, ctype = e.code, e.read(), e.headers["Content-Type"]
except Exception as e:
    code, body, ctype = 0, str(e).encode(), ""
sys.stdout.write("%d\n%s\n%s" % (code, ctype, body.decode()))
]]


--- A TCP port on 127.0.0.1 that was free a moment ago.
function _M.free_port()
    local s = assert(core_http.listen("127.0.0.1", 0, function() return 500, "text/plain", "" end))
    local port = s:port()
    s:close()
    return port
end


--- GET http://127.0.0.1:port/path. Returns status (0: no answer),
-- content type and body.
function _M.get(port, path)
    local out = {}
    local h = assert(proc.spawn({
        argv = { "python3", "-c", FETCH, "http://127.0.0.1:" .. port .. path },
        timeout = 10,
        on_line = function(stream, line)
            if stream == "stdout" then
                out[#out + 1] = line
            end
        end,
    }))
    h:wait(15)
    return tonumber(out[1]), out[2], table.concat(out, "\n", 3) .. "\n"
end


--- The value of one series in a /metrics body, or nil.
function _M.sample(body, series)
    for line in body:gmatch("[^\n]+") do
        local name, value = line:match("^(%S+) (%S+)$")
        if name == series then
            return tonumber(value)
        end
    end
    return nil
end


--- One sample of a series from GET /metrics, or nil.
function _M.metric(port, series)
    local _, _, body = _M.get(port, "/metrics")
    return _M.sample(body, series)
end


return _M
