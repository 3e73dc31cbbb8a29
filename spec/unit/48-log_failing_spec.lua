-- relay.log's failure conditions (a WARN per change, a "still failing" line
-- per still_failing_log_ms, an INFO on recovery, nothing of its own during
-- an outage) and relay.backoff, through a real relay process so that the C
-- sink writes the records. The conditions' clock is a fake one.
local cli = require("helpers.cli")
local backoff = require("relay.backoff")
local constants = require("relay.constants")

local SCRIPT = [[
local log = require("relay.log")
local constants = require("relay.constants")
log.configure("info", "text")
local now = 0
log.set_clock(function() return now end)
local period = constants.still_failing_log_ms / 1000
local down = false
log.set_outage("redis", function() return down end)

for _ = 1, 5 do log.failing("read", "reading failed", { error = "boom" }) end  -- one WARN
now = now + period
log.failing("read", "reading failed", { error = "boom" })                      -- still failing
log.failing("read", "reading failed", { error = "boom" })                      -- quiet
now = now + period / 2
log.recovered("read", "reading again")                                         -- INFO
log.recovered("read", "reading again")                                         -- nothing: not failing

down = true
log.failing("redis", "redis unreachable")                                      -- the outage's WARN
for _ = 1, 3 do log.failing("heartbeat", "heartbeat failed") end               -- its consequences: quiet
log.recovered("heartbeat", "heartbeat again")                                  -- never failed: nothing
down = false
log.recovered("redis", "reconnected")
log.failing("heartbeat", "heartbeat failed")                                   -- a failure of its own: WARN
now = now + math.max(60, 2 * period) + 1
log.failing("heartbeat", "heartbeat failed")                                   -- long after: a new one
]]


local function run(script)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(script)
    f:close()
    local r = cli.run({ "x-lua", path })
    os.remove(path)
    assert.are.equal(0, r.code, r.stderr)
    local lines = {}
    for l in r.stderr:gmatch("[^\n]+") do
        lines[#lines + 1] = l:match("^%S+ (.*)$")
    end
    return lines
end


describe("log.failing", function()
    it("logs a failure once per change, once per period while it lasts, and not during an outage", function()
        local period_s = constants.still_failing_log_ms / 1000
        assert.are.same({
            'WARN  reading failed error=boom',
            string.format('WARN  reading failed: still failing (%d s) error=boom failures=6', period_s),
            string.format('INFO  reading again failed_s=%d failures=7', math.floor(period_s * 1.5 + 0.5)),
            'WARN  redis unreachable',
            'INFO  reconnected failed_s=0 failures=1',
            'WARN  heartbeat failed',
            'WARN  heartbeat failed',
        }, run(SCRIPT))
    end)
end)


describe("backoff", function()
    it("waits half to all of the delay, and doubles it up to the cap", function()
        for _ = 1, 200 do
            local wait = backoff.jitter(4)
            assert.is_true(wait >= 2 and wait <= 4)
        end
        assert.are.equal(0.2, backoff.grow(0.1, 5))
        assert.are.equal(5, backoff.grow(4, 5))
        assert.are.equal(5, backoff.grow(5, 5))
    end)
end)
