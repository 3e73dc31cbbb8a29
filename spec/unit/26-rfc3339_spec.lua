-- relay.rfc3339: the one writer of timestamps, for the host and (as source
-- text) for the Redis scripts.
local rfc3339 = require("relay.rfc3339")

describe("rfc3339", function()
    it("writes UTC with milliseconds, or whole seconds", function()
        assert.are.equal("1970-01-01T00:00:00.000Z", rfc3339.millis(0))
        assert.are.equal("2023-11-14T22:13:20.123Z", rfc3339.millis(1700000000123))
        assert.are.equal("2023-11-14T22:13:20Z", rfc3339.seconds(1700000000123))
        assert.are.equal("2000-02-29T00:00:00.999Z", rfc3339.millis(951782400999))
        assert.are.equal("2099-12-31T23:59:59.999Z", rfc3339.millis(4102444799999))
    end)

    it("gives the civil date of a day count", function()
        assert.are.same({ 1970, 1, 1 }, { rfc3339.civil_from_days(0) })
        assert.are.same({ 2024, 2, 29 }, { rfc3339.civil_from_days(19782) })
        assert.are.same({ 1969, 12, 31 }, { rfc3339.civil_from_days(-1) })
    end)

    it("is source text that runs without os.date, as a Redis script must", function()
        local env = { math = math, string = string, tonumber = tonumber }
        local chunk = assert(loadstring(rfc3339.SOURCE .. "\nreturn rfc3339(...)"))
        setfenv(chunk, env)
        assert.are.equal("2023-11-14T22:13:20.123Z", chunk(1700000000123))
    end)
end)
