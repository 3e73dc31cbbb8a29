-- RELAY_CLAIM_WAIT=N[/timeout] (relay.config): replicas to acknowledge each
-- claim before its container starts, and how long to wait for them.
local config = require("relay.config")


local function load(value)
    return config.load({ RELAY_CLAIM_WAIT = value })
end


describe("RELAY_CLAIM_WAIT", function()
    it("is off unless set, and off at 0", function()
        assert.is_nil(assert(config.load({})).claim_wait)
        assert.is_false(assert(load("0")).claim_wait)
        assert.is_false(assert(load("0/2s")).claim_wait)
    end)

    it("takes a replica count and an optional timeout (default 1s)", function()
        assert.are.same({ replicas = 1, timeout_ms = 1000 }, assert(load("1")).claim_wait)
        assert.are.same({ replicas = 2, timeout_ms = 250 }, assert(load("2/250ms")).claim_wait)
        assert.are.same({ replicas = 1, timeout_ms = 90000 }, assert(load("1/1m30s")).claim_wait)
    end)

    it("refuses anything else, naming the variable", function()
        for _, bad in ipairs({ "", "x", "-1", "1.5", "101", "1/", "1/0ms", "1/2", "1:2s", "1/2s/3" }) do
            local cfg, err = load(bad)
            assert.is_nil(cfg, bad)
            assert.matches("^invalid RELAY_CLAIM_WAIT=", err)
        end
    end)
end)
