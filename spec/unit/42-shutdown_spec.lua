-- How the daemon stops (relay.shutdown): a first signal drains, a second
-- forces the stop, and the forced stop alone ends the process, after its
-- containers are killed and the instance's death is recorded; a drain that
-- finds nothing running first never ends it under that record.
local shutdown = require("relay.shutdown")
local sync = require("relay.sync")

local LONG = 5         -- a wait that must succeed: generous, never reached
local SETTLE = 0.05    -- how long a task that must stay parked is given to move


--- A forced stop whose kill waits for `recorded` (the death record's
-- answer). Returns the stop's task and the list of what happened, in order.
local function forced_stop(s, recorded, happened)
    return sync.spawn(function()
        s:stop_forced(15, function()
            assert(recorded.wait(LONG), "the record was never answered")
            happened[#happened + 1] = "recorded"
        end, function(code)
            happened[#happened + 1] = "exit " .. code
        end)
    end)
end


describe("shutdown", function()
    it("lets a plain drain end once nothing runs", function()
        local s = shutdown.new()
        s:drain()
        local drain = sync.spawn(function()
            s:wait()
            s:drained()
            return "ended"
        end)
        assert.are.same({ true, "ended" }, { drain.join(LONG) })
        assert.is_nil(s.exit_code)
    end)

    it("leaves the exit to the forced stop while its death record is unanswered", function()
        local s = shutdown.new()
        local recorded, happened = sync.event(), {}
        s:drain()
        local stop = forced_stop(s, recorded, happened)
        -- the drain finds nothing running while the record is still on its way
        local drain = sync.spawn(function()
            s:drained()
            happened[#happened + 1] = "drain ended"
        end)
        assert.is_nil(drain.join(SETTLE), "the drain ended under the death record")
        assert.are.same({}, happened)
        recorded.set(true)
        assert.is_true(stop.join(LONG))
        assert.is_true(drain.join(LONG))
        assert.are.same({ "recorded", "exit 143", "drain ended" }, happened)
    end)

    it("exits 128+signal even when killing the containers fails", function()
        local s = shutdown.new()
        local codes = {}
        s:drain()
        s:stop_forced(2, function() error("runc is gone") end, function(code) codes[#codes + 1] = code end)
        assert.are.same({ 130 }, codes)
        assert.is_true(s.forced)
    end)
end)
