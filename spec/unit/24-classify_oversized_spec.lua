-- relay.classify on entries too large to hold and on the stubs the
-- pending-list script hands over instead of bodies; relay.sync.budget, the
-- worker's byte budget for events.
local classify = require("relay.classify")
local core_redis = require("relay.core.redis")
local loop = require("relay.core.loop")
local sync = require("relay.sync")

local function m(max_bytes)
    return {
        trusted = {}, max_bytes = max_bytes, now_ms = function() return 0 end,
        validate = function() return true end,
        matcher = { match = function() return { 0 } end }, labels = { "a/h" },
    }
end

describe("classify and oversized entries", function()
    it("measures an entry as the pending-list script does: bytes plus one reply object each", function()
        local object = core_redis.reply_object_bytes
        local event, cost = classify.measure({ "event", "12345", "x", "yz" })
        assert.are.equal(5, event)
        assert.are.equal(5 + 5 + 1 + 2 + 7 * object, cost)
        assert.are.equal(0, (classify.measure({ "other", "x" })))
        -- the first `event` counts, as everywhere
        assert.are.equal(1, (classify.measure({ "event", "a", "event", "bbb" })))
    end)

    it("dead-letters an event over the limit, or other fields over 64 KiB, truncated", function()
        local msg = classify.classify({ "1-0", { "event", string.rep("x", 1025) } }, m(1024))
        assert.are.equal("malformed", msg.kind)
        assert.are.equal("event too large (1025 bytes > 1024)", msg.reason)
        assert.is_true(msg.truncated)
        assert.is_nil(msg.event)
        msg = classify.classify({ "1-0", { "event", "{}", "blob", string.rep("y", 65 * 1024) } }, m(1024))
        assert.are.equal("malformed", msg.kind)
        assert.matches("^event too large %(entry of %d+ bytes > 66560%)$", msg.reason)
        assert.is_true(msg.truncated)
        msg = classify.classify({ "1-0", { "event", string.rep("x", 1024) } }, m(1024))
        assert.are.equal("matched", msg.kind)
    end)

    it("turns the script's stubs into dead letters without a body", function()
        local msg = classify.classify({ "1-0", core_redis.null, { "oversized", 50000000, 50000300 } }, m(1024))
        assert.are.equal("malformed", msg.kind)
        assert.are.equal("event too large (50000000 bytes > 1024)", msg.reason)
        assert.is_true(msg.truncated)
        msg = classify.classify({ "1-0", core_redis.null, { "poison", 5 } }, m(1024))
        assert.are.equal("malformed", msg.kind)
        assert.are.equal("poison: crashed the worker 5 times", msg.reason)
        assert.is_nil(msg.truncated)
        assert.are.equal("missing", classify.classify({ "1-0", core_redis.null }, m(1024)).kind)
    end)
end)


describe("sync.budget", function()
    it("grants units in order, lets an oversized holder proceed alone, and takes them back", function()
        local b = sync.budget(10)
        local order = {}
        assert.are.equal(6, b.acquire(6))
        local done = sync.event()
        loop.spawn(function()
            order[#order + 1] = "big " .. b.acquire(25)  -- clamped to the whole budget
            b.release(10)
            order[#order + 1] = "small " .. b.acquire(3)
            done.set()
        end)
        loop.sleep(0)
        assert.are.same({}, order)
        b.release(6)
        done.wait(5)
        assert.are.same({ "big 10", "small 3" }, order)
        assert.are.equal(7, b.available)
    end)
end)
