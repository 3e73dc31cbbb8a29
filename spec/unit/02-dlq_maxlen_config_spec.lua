-- RELAY_DLQ_MAXLEN (relay.config): the DLQ's approximate bound; 0, the
-- default, keeps every dead letter.
local config = require("relay.config")

describe("RELAY_DLQ_MAXLEN", function()
    it("is unlimited by default and with 0, a bound with N", function()
        assert.is_false(assert(config.load({})).dlq_maxlen)
        assert.is_false(assert(config.load({ RELAY_DLQ_MAXLEN = "0" })).dlq_maxlen)
        assert.are.equal(10000, assert(config.load({ RELAY_DLQ_MAXLEN = "10000" })).dlq_maxlen)
    end)

    it("refuses anything but a whole number, naming the variable", function()
        for _, bad in ipairs({ "", "-1", "1.5", "10k", "ten" }) do
            local cfg, err = config.load({ RELAY_DLQ_MAXLEN = bad })
            assert.is_nil(cfg)
            assert.matches("^invalid RELAY_DLQ_MAXLEN=", err)
        end
    end)
end)
