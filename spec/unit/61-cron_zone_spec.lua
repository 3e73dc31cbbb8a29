-- Schedules in a time zone: the cron macros, TZif zones read from the
-- system's zoneinfo, occurrences across daylight saving transitions (a
-- wall-clock time a spring-forward skips does not run, one a fall-back
-- repeats runs once, as Kubernetes documents for CronJobs), the template's
-- `timezone:` and `relay schedule ls`.
local apps = require("relay.apps")
local cli = require("helpers.cli")
local cron = require("relay.cron")
local cron_zone = require("relay.cron_zone")
local fs = require("relay.fs")
local rfc3339 = require("relay.rfc3339")
local tmp = require("helpers.tmp")
local tzif = require("relay.tzif")

local HOUR_MS = 3600 * 1000


local function at(y, mo, d, h, mi)
    return (cron.days_from_civil(y, mo, d) * 86400 + (h or 0) * 3600 + (mi or 0) * 60) * 1000
end


local function zone(name)
    return assert(tzif.load(name))
end


--- The next n occurrences after from (UTC ms), as RFC 3339 UTC texts.
local function nexts(expr, zone_name, from, n)
    local c, z, out = assert(cron.parse(expr)), zone(zone_name), {}
    for i = 1, n do
        from = assert(cron_zone.next(c, from, z))
        out[i] = rfc3339.seconds(from)
    end
    return out
end


local function prev_of(expr, zone_name, t)
    return rfc3339.seconds(assert(cron_zone.prev(assert(cron.parse(expr)), t, zone(zone_name))))
end


describe("cron macros", function()
    it("stand for their five fields and keep their text", function()
        local want = { ["@hourly"] = "0 * * * *", ["@daily"] = "0 0 * * *", ["@weekly"] = "0 0 * * 0",
            ["@monthly"] = "0 0 1 * *", ["@yearly"] = "0 0 1 1 *", ["@annually"] = "0 0 1 1 *",
            ["@midnight"] = "0 0 * * *" }
        local from = at(2026, 11, 30, 12, 34)  -- a Monday
        for macro, fields in pairs(want) do
            local c = assert(cron.parse(macro))
            assert.are.equal(macro, c.text)
            assert.are.equal(cron.next(assert(cron.parse(fields)), from), cron.next(c, from), macro)
        end
        assert.are.equal(at(2026, 11, 30, 13), cron.next(assert(cron.parse("@hourly")), from))
        assert.are.equal(at(2026, 12, 6), cron.next(assert(cron.parse("@weekly")), from))
        assert.are.equal(at(2027, 1, 1), cron.next(assert(cron.parse("@yearly")), from))
    end)

    it("refuses an unknown macro, listing the known ones", function()
        local c, err = cron.parse("@fortnightly")
        assert.is_nil(c)
        assert.matches('unknown macro "@fortnightly" %(allowed: @hourly, @daily, @weekly, @monthly, @yearly%)', err)
    end)
end)


describe("tzif", function()
    it("reads offsets from the system's zone files, past the last explicit transition too", function()
        local berlin, ny = zone("Europe/Berlin"), zone("America/New_York")
        assert.are.equal(1 * HOUR_MS, tzif.offset_at(berlin, at(2026, 1, 15)))
        assert.are.equal(2 * HOUR_MS, tzif.offset_at(berlin, at(2026, 7, 15)))
        assert.are.equal(-5 * HOUR_MS, tzif.offset_at(ny, at(2026, 1, 15)))
        assert.are.equal(-4 * HOUR_MS, tzif.offset_at(ny, at(2026, 7, 15)))
        -- the footer's POSIX rule: last Sunday of March / second Sunday of March
        assert.are.equal(2 * HOUR_MS, tzif.offset_at(berlin, at(2150, 3, 31, 12)))
        assert.are.equal(1 * HOUR_MS, tzif.offset_at(berlin, at(2150, 3, 20, 12)))
        assert.are.equal(-4 * HOUR_MS, tzif.offset_at(ny, at(2150, 7, 1)))
        assert.are.equal(0, tzif.offset_at(zone("UTC"), at(2026, 7, 1)))
        assert.are.equal(5.5 * HOUR_MS, tzif.offset_at(zone("Asia/Kolkata"), at(2026, 7, 1)))
        -- southern hemisphere: summer time across the new year
        local sydney = zone("Australia/Sydney")
        assert.are.equal(11 * HOUR_MS, tzif.offset_at(sydney, at(2027, 1, 1)))
        assert.are.equal(10 * HOUR_MS, tzif.offset_at(sydney, at(2026, 7, 1)))
    end)

    it("changes offset at the documented instants", function()
        local berlin = zone("Europe/Berlin")
        -- 2026-03-29 01:00 UTC: 02:00 CET becomes 03:00 CEST
        assert.are.equal(1 * HOUR_MS, tzif.offset_at(berlin, at(2026, 3, 29, 1) - 1))
        assert.are.equal(2 * HOUR_MS, tzif.offset_at(berlin, at(2026, 3, 29, 1)))
        -- 2026-10-25 01:00 UTC: 03:00 CEST becomes 02:00 CET
        assert.are.equal(2 * HOUR_MS, tzif.offset_at(berlin, at(2026, 10, 25, 1) - 1))
        assert.are.equal(1 * HOUR_MS, tzif.offset_at(berlin, at(2026, 10, 25, 1)))
    end)

    it("refuses unknown zones and names that would leave the zoneinfo directory", function()
        local z, err = tzif.load("Europe/Berln")
        assert.is_nil(z)
        assert.matches('unknown time zone "Europe/Berln"', err)
        for _, name in ipairs({ "../../etc/passwd", "/etc/localtime", "Europe/../UTC", "", "Europe" }) do
            assert.is_nil((tzif.load(name)), name)
        end
        assert.matches("not a TZif file", select(2, tzif.parse("hello", "x")))
    end)
end)


describe("cron in a time zone", function()
    it("runs a daily job at the zone's wall-clock time, whatever its offset", function()
        assert.are.same({ "2026-01-15T02:00:00Z", "2026-01-16T02:00:00Z" },
            nexts("0 3 * * *", "Europe/Berlin", at(2026, 1, 14, 12), 2))
        assert.are.same({ "2026-07-15T01:00:00Z" }, nexts("0 3 * * *", "Europe/Berlin", at(2026, 7, 14, 12), 1))
        assert.are.same({ "2026-07-15T07:00:00Z" }, nexts("0 3 * * *", "America/New_York", at(2026, 7, 14, 12), 1))
    end)

    it("skips a wall-clock time that a spring-forward skips (Europe/Berlin)", function()
        -- 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day
        assert.are.same({ "2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z" },
            nexts("30 2 * * *", "Europe/Berlin", at(2026, 3, 27, 12), 2))
        -- hourly: 01:00 CET (00:00Z) is followed by 03:00 CEST (01:00Z)
        assert.are.same({ "2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z" },
            nexts("@hourly", "Europe/Berlin", at(2026, 3, 28, 23, 30), 3))
    end)

    it("runs a wall-clock time that a fall-back repeats once, at its first instant (Europe/Berlin)", function()
        -- 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens at 00:30Z and 01:30Z
        assert.are.same({ "2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z" },
            nexts("30 2 * * *", "Europe/Berlin", at(2026, 10, 23, 12), 3))
        -- every 15 minutes: the repeated hour runs once, then the clock goes on from 03:00 CET
        assert.are.same({ "2026-10-25T00:45:00Z", "2026-10-25T02:00:00Z", "2026-10-25T02:15:00Z" },
            nexts("*/15 * * * *", "Europe/Berlin", at(2026, 10, 25, 0, 30), 3))
    end)

    it("handles America/New_York's transitions the same way", function()
        -- 2026-03-08: 02:00 EST jumps to 03:00 EDT
        assert.are.same({ "2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z" },
            nexts("30 2 * * *", "America/New_York", at(2026, 3, 6, 12), 2))
        -- 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 runs once, at 05:30Z (EDT)
        assert.are.same({ "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z" },
            nexts("30 1 * * *", "America/New_York", at(2026, 10, 31, 12), 2))
        assert.are.same({ "2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z" },
            nexts("@hourly", "America/New_York", at(2026, 11, 1, 3, 30), 3))
    end)

    it("finds the latest occurrence the same way, so a repeated time is published once", function()
        -- during the repeated hour (01:45 EST), the latest 01:30 is still the one at 05:30Z
        assert.are.equal("2026-11-01T05:30:00Z", prev_of("30 1 * * *", "America/New_York", at(2026, 11, 1, 6, 45)))
        assert.are.equal("2026-11-01T05:30:00Z", prev_of("30 1 * * *", "America/New_York", at(2026, 11, 1, 5, 30)))
        assert.are.equal("2026-10-31T05:30:00Z", prev_of("30 1 * * *", "America/New_York", at(2026, 11, 1, 5, 29)))
        -- the skipped 02:30 of 2026-03-29 is never the latest one
        assert.are.equal("2026-03-28T01:30:00Z", prev_of("30 2 * * *", "Europe/Berlin", at(2026, 3, 29, 12)))
        assert.are.equal("2026-10-25T00:00:00Z", prev_of("@hourly", "Europe/Berlin", at(2026, 10, 25, 1, 30)))
        assert.are.equal("2026-10-25T02:00:00Z", prev_of("@hourly", "Europe/Berlin", at(2026, 10, 25, 2)))
    end)

    it("is what the scheduler publishes for a schedule with a zone", function()
        local scheduler = require("relay.scheduler")
        local sched = { name = "s", cron = "30 2 * * *", cron_spec = assert(cron.parse("30 2 * * *")),
            timezone = "Europe/Berlin", zone = zone("Europe/Berlin") }
        local latest, following = scheduler.occurrences(sched, at(2026, 3, 29, 12))
        assert.are.same({ "2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z" },
            { rfc3339.seconds(latest), rfc3339.seconds(following) })
    end)

    it("agrees with plain UTC cron in UTC", function()
        local c, z = assert(cron.parse("7 */5 * * 1-5")), zone("UTC")
        local t = at(2026, 11, 30, 1, 2)
        for _ = 1, 20 do
            assert.are.equal(cron.next(c, t), cron_zone.next(c, t, z))
            assert.are.equal(cron.prev(c, t), cron_zone.prev(c, t, z))
            t = cron.next(c, t) + 17000
        end
    end)
end)


describe("timezone in template.yaml", function()
    local PATH = "apps/users/template.yaml"
    local HEAD = "runtime:\n  image: host\n  command: [/bin/true]\nschedules:\n  - name: n\n    handler: h\n"

    it("loads the zone with the schedule", function()
        local app = apps.validate(HEAD .. "    cron: '@daily'\n    timezone: Europe/Berlin\n", PATH, "users",
            "apps/users")
        assert.are.equal("ok", app.state, app.error)
        assert.are.equal("Europe/Berlin", app.schedules[1].timezone)
        assert.are.equal("Europe/Berlin", app.schedules[1].zone.name)
    end)

    it("refuses an unknown zone at its file:line:col", function()
        local app = apps.validate(HEAD .. "    cron: '0 3 * * *'\n    timezone: Europe/Berln\n", PATH, "users",
            "apps/users")
        assert.are.equal("invalid", app.state)
        assert.matches('^apps/users/template%.yaml:8:15: schedules%[1%]%.timezone: unknown time zone '
            .. '"Europe/Berln"', app.error)
        assert.matches("did you mean Europe/Berlin%?$", app.error)
        app = apps.validate(HEAD .. "    cron: '0 3 * * *'\n    timezone: Mars/Olympus_Mons\n", PATH, "users",
            "apps/users")
        assert.matches(':8:15: schedules%[1%]%.timezone: unknown time zone "Mars/Olympus_Mons".*'
            .. "use an IANA name such as Europe/Berlin", app.error)
    end)

    it("refuses a timezone on an interval schedule", function()
        local app = apps.validate(HEAD .. "    every: 1m\n    timezone: UTC\n", PATH, "users", "apps/users")
        assert.are.equal("invalid", app.state)
        assert.matches("template%.yaml:8:5: schedules%[1%]%.timezone applies to cron schedules only", app.error)
    end)
end)


describe("relay schedule ls", function()
    it("shows the next occurrence in UTC and on the schedule's own clock", function()
        local dir = tmp.mkdtemp("relay-sched-ls-", 493)
        assert(fs.mkdir(dir .. "/clock"))
        assert(fs.write_file(dir .. "/clock/template.yaml", "runtime:\n  image: host\n  command: [/bin/true]\n"
            .. "schedules:\n  - {name: berlin, handler: h, cron: '0 3 * * *', timezone: Europe/Berlin}\n"
            .. "  - {name: plain, handler: h, cron: '@daily'}\n"))
        local r = cli.run({ "schedule", "ls", "--apps", dir })
        local json = cli.run({ "schedule", "ls", "--json", "--apps", dir })
        fs.rm_rf(dir)
        assert.are.equal(0, r.code, r.stderr)
        local utc, wall = r.stdout:match("clock/berlin\th\tcron 0 3 %* %* %*\t(%S+)\t(%S+) Europe/Berlin\n")
        assert.matches("^%d%d%d%d%-%d%d%-%d%dT0[12]:00:00Z$", utc)
        assert.matches("^%d%d%d%d%-%d%d%-%d%dT03:00:00%+0[12]:00$", wall)
        assert.are.equal(utc:sub(12, 13), string.format("%02d", 3 - tonumber(wall:sub(-5, -4))))
        assert.matches("clock/plain\th\tcron @daily\t%d%d%d%d%-%d%d%-%d%dT00:00:00Z\t[-%dT:]+Z UTC\n", r.stdout)
        assert.are.equal(0, json.code, json.stderr)
        assert.truthy(json.stdout:find('"timezone":"Europe/Berlin"', 1, true), json.stdout)
        local first = require("cjson").decode(json.stdout:match("^[^\n]+"))
        assert.are.same({ "Europe/Berlin", utc, wall }, { first.timezone, first.next, first.next_local })
    end)
end)
