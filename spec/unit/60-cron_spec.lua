-- relay.cron: parsing and next/previous occurrences in UTC.
local cron = require("relay.cron")
local rfc3339 = require("relay.rfc3339")

local function at(y, mo, d, h, mi)
    return (cron.days_from_civil(y, mo, d) * 86400 + (h or 0) * 3600 + (mi or 0) * 60) * 1000
end

local function next_of(expr, from)
    return rfc3339.seconds(assert(cron.next(assert(cron.parse(expr)), from)))
end

local function prev_of(expr, from)
    return rfc3339.seconds(assert(cron.prev(assert(cron.parse(expr)), from)))
end

describe("cron", function()
    it("converts civil dates both ways across leap years and the epoch", function()
        assert.are.equal(0, cron.days_from_civil(1970, 1, 1))
        assert.are.equal(-1, cron.days_from_civil(1969, 12, 31))
        assert.are.same({ 2024, 2, 29 }, { cron.civil_from_days(cron.days_from_civil(2024, 2, 29)) })
        assert.are.same({ 2000, 3, 1 }, { cron.civil_from_days(cron.days_from_civil(2000, 2, 29) + 1) })
        assert.are.equal("2026-11-30T12:34:00Z", rfc3339.seconds(at(2026, 11, 30, 12, 34)))
    end)

    it("finds the next and previous occurrence of a daily job", function()
        assert.are.equal("2026-12-01T03:00:00Z", next_of("0 3 * * *", at(2026, 11, 30, 3, 0)))
        assert.are.equal("2026-11-30T03:00:00Z", next_of("0 3 * * *", at(2026, 11, 30, 2, 59)))
        assert.are.equal("2026-11-30T03:00:00Z", prev_of("0 3 * * *", at(2026, 11, 30, 3, 0)))
        assert.are.equal("2026-11-29T03:00:00Z", prev_of("0 3 * * *", at(2026, 11, 30, 2, 59)))
    end)

    it("handles month ends and leap days", function()
        assert.are.equal("2026-12-31T00:00:00Z", next_of("0 0 31 * *", at(2026, 11, 30)))
        assert.are.equal("2027-01-31T00:00:00Z", next_of("0 0 31 * *", at(2026, 12, 31, 0, 0)))
        assert.are.equal("2028-02-29T00:00:00Z", next_of("0 0 29 2 *", at(2026, 11, 30)))
        assert.are.equal("2024-02-29T00:00:00Z", prev_of("0 0 29 2 *", at(2026, 11, 30)))
        assert.are.equal("2026-12-01T00:00:00Z", next_of("0 0 1 * *", at(2026, 11, 30, 23, 59)))
    end)

    it("treats Sunday as 0 and 7 and accepts names", function()
        -- 2026-11-29 is a Sunday
        assert.are.equal("2026-12-06T09:00:00Z", next_of("0 9 * * 0", at(2026, 11, 30)))
        assert.are.equal("2026-12-06T09:00:00Z", next_of("0 9 * * 7", at(2026, 11, 30)))
        assert.are.equal("2026-12-06T09:00:00Z", next_of("0 9 * * sun", at(2026, 11, 30)))
        assert.are.equal("2026-12-04T09:00:00Z", next_of("0 9 * * MON-fri/4", at(2026, 11, 30, 10)))
        assert.are.equal("2027-01-01T00:00:00Z", next_of("0 0 1 jan *", at(2026, 11, 30)))
    end)

    it("expands steps over ranges and stars", function()
        local c = assert(cron.parse("*/15 8-18/5 * * *"))
        local mins, hours = {}, {}
        for m = 0, 59 do if c.minute[m] then mins[#mins + 1] = m end end
        for h = 0, 23 do if c.hour[h] then hours[#hours + 1] = h end end
        assert.are.same({ 0, 15, 30, 45 }, mins)
        assert.are.same({ 8, 13, 18 }, hours)
        assert.are.same({ 5, 25, 45 }, (function()
            local s, out = assert(cron.parse("5/20 * * * *")), {}
            for m = 0, 59 do if s.minute[m] then out[#out + 1] = m end end
            return out
        end)())
        assert.are.equal("2026-11-30T00:07:00Z", next_of("1,7,30-31 * * * *", at(2026, 11, 30, 0, 1)))
    end)

    it("matches either day field when both are restricted (Vixie)", function()
        -- the 13th, or any Friday
        local from = at(2026, 11, 30)
        assert.are.equal("2026-12-04T00:00:00Z", next_of("0 0 13 * 5", from))
        assert.are.equal("2026-12-13T00:00:00Z", next_of("0 0 13 * 5", at(2026, 12, 12)))
        -- with one day field a star, only the other one counts
        assert.are.equal("2026-12-13T00:00:00Z", next_of("0 0 13 * *", from))
        assert.are.equal("2026-12-04T00:00:00Z", next_of("0 0 * * 5", from))
    end)

    it("rejects malformed expressions with a reason", function()
        local bad = {
            ["* * * *"] = "5", ["60 * * * *"] = "minute", ["* 24 * * *"] = "hour", ["* * 0 * *"] = "day%-of%-month",
            ["* * * 13 *"] = "month", ["* * * * 8"] = "day%-of%-week", ["*/0 * * * *"] = "step",
            ["5-1 * * * *"] = "backwards", ["1,,2 * * * *"] = "empty", ["* * * foo *"] = "month",
        }
        for expr, why in pairs(bad) do
            local c, err = cron.parse(expr)
            assert.is_nil(c, expr)
            assert.matches(why, err)
        end
    end)

    it("reports a schedule that can never fire", function()
        local apps = require("relay.apps")
        local ok, err = apps.cron_check("0 0 30 2 *")
        assert.is_nil(ok)
        assert.matches("never fires", err)
        assert.is_table((apps.cron_check("0 3 * * *")))
    end)
end)
