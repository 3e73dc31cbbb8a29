-- relay.classify: reserved fields count only on trusted entries, and the
-- precedence relay_schedule > relay_target > event among trusted ones.
local classify = require("relay.classify")
local core_redis = require("relay.core.redis")

local function m(trusted)
    return {
        trusted = trusted, max_bytes = 1024, now_ms = function() return 0 end,
        validate = function() return true end,
        matcher = { match = function() return { 0 } end }, labels = { "a/h" },
    }
end

describe("classify", function()
    it("finds a reserved field under any occurrence of its name", function()
        assert.is_false(classify.reserved({ "event", "{}" }))
        assert.is_false(classify.reserved(core_redis.null))
        assert.is_true(classify.reserved({ "event", "{}", "relay_occurrence", "x" }))
        assert.is_true(classify.reserved({ "event", "{}", "event", "{}", "relay_replay_of", "1-1" }))
        -- a value that looks like a name is not a name
        assert.is_false(classify.reserved({ "event", "relay_target" }))
    end)

    it("dead-letters reserved fields on an untrusted entry, and defers when trust is unknown", function()
        for _, flat in ipairs({
            { "event", "{}", "relay_target", "a/h" },
            { "relay_schedule", "a/s", "relay_occurrence", "t" },
            { "event", "{}", "relay_replay_of", "1-1" },
            { "event", "{}", "relay_occurrence", "t" },
        }) do
            local msg = classify.classify({ "5-0", flat }, m({ ["4-0"] = true }))
            assert.are.equal("malformed", msg.kind)
            assert.are.equal("reserved field from a producer", msg.reason)
            assert.is_nil(msg.lineage)
            assert.are.equal("unverified", classify.classify({ "5-0", flat }, m(false)).kind)
        end
        assert.are.equal("matched", classify.classify({ "5-0", { "event", "{}" } }, m({})).kind)
    end)

    it("reads a repeated field's first value, as the scripts do", function()
        local msg = classify.classify({ "5-0", { "event", '{"a":1}', "event", '{"a":2}' } }, m({}))
        assert.are.equal('{"a":1}', msg.event)
    end)

    it("honours a trusted entry's fields: relay_schedule, then relay_target, then the event", function()
        local trusted = m({ ["5-0"] = true })
        local msg = classify.classify({ "5-0", { "event", "{}", "relay_target", "a/h", "relay_schedule", "a/s" } },
            trusted)
        assert.are.equal("schedule", msg.kind)
        msg = classify.classify({ "5-0", { "event", "{}", "relay_target", "a/h", "relay_replay_of", "1-1" } }, trusted)
        assert.are.equal("targeted", msg.kind)
        assert.are.equal("a/h", msg.target)
        assert.are.same({ replay_of = "1-1" }, msg.lineage)
    end)
end)
