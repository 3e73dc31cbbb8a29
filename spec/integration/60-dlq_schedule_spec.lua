-- DLQ tooling and schedules against a real worker, real Redis and runc.
local cjson = require("cjson")
local cli = require("helpers.cli")
local daemon = require("helpers.daemon")
local redis_server = require("helpers.redis")
local fs = require("relay.fs")
local core_redis = require("relay.core.redis")
local redis = require("relay.redis")
local scripts = require("relay.scripts")

local function copy_apps(from)
    local dir = daemon.tmpdir("apps")
    assert(os.execute("cp -r " .. from .. "/. " .. dir) == 0)
    return dir
end

--- XADD as Relay's own publishers do: recorded as trusted, so its
-- reserved fields are honoured (a producer's are dead-lettered: 62-…).
local function xadd_trusted(client, ...)
    return assert(redis.eval(client, scripts.publish_trusted, { "events", "relay:events:trusted" }, { ... }))
end

local function lines(text)
    local out = {}
    for l in text:gmatch("[^\n]+") do
        out[#out + 1] = l
    end
    return out
end

describe("relay dlq #compressed", function()
    local server, client, apps, d, env

    before_each(function()
        server = redis_server.start()
        client = assert(core_redis.connect_blocking({ path = server.sock, db = 0 }, 2))
        apps = copy_apps("spec/fixtures/dlq-apps")
        env = { REDIS_URL = server.url }
        d = daemon.start({ url = server.url, consumer = "dq1", apps = apps })
    end)

    after_each(function()
        d:cleanup()
        client:close()
        server:stop()
        fs.rm_rf(apps)
    end)

    local function publish(event)
        local r = cli.run({ "publish", event }, env)
        assert.are.equal(0, r.code, r.stderr)
        return r.stdout:match("^(%S+)")
    end

    local function dlq_len()
        return client:call("XLEN", "relay:events:dlq")
    end

    it("lists, filters, inspects, replays a fixed handler and removes entries", function()
        local ids = { publish('{"t":"fixable","n":1}'), publish('{"t":"fixable","n":2}'),
            publish('{"t":"other","n":3}') }
        client:call("XADD", "events", "*", "event", "not json")
        d:wait_until(function() return dlq_len() == 4 end, 20, "4 dead letters")

        local r = cli.run({ "dlq", "ls" }, env)
        assert.are.equal(0, r.code, r.stderr)
        local rows = lines(r.stdout)
        assert.are.equal("ID\tAPP/HANDLER\tATTEMPTS\tTIMESTAMP\tREASON", table.remove(rows, 1))
        assert.are.equal(4, #rows)
        -- pages: --limit, then --after the last id shown, as stderr says
        local page1 = cli.run({ "dlq", "ls", "--no-header", "--limit", "3" }, env)
        assert.are.equal(3, #lines(page1.stdout))
        local cursor = page1.stderr:match("the next page: %-%-after (%S+)\n$")
        assert.are.equal(lines(page1.stdout)[3]:match("^%S+"), cursor)
        local page2 = cli.run({ "dlq", "ls", "--no-header", "--limit", "3", "--after", cursor }, env)
        assert.are.same({ rows[4], "" }, { page2.stdout:match("^[^\n]+"), page2.stderr })
        assert.are.equal(1, #lines(page2.stdout))
        local by_label, previous = {}, ""
        for _, row in ipairs(rows) do
            local f = {}
            for field in (row .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = field end
            assert.are.equal(5, #f, row)
            assert.is_true(f[1] > previous, "oldest first")
            previous = f[1]
            assert.matches("^%d%d%d%d%-%d%d%-%d%dT", f[4])
            by_label[f[2]] = by_label[f[2]] or {}
            table.insert(by_label[f[2]], f)
        end
        assert.are.equal(2, #by_label["dq/fixable"])
        assert.are.equal("1", by_label["dq/fixable"][1][3])
        assert.are.equal("exit status 3", by_label["dq/fixable"][1][5])
        assert.are.equal("0", by_label["-/-"][1][3])
        assert.matches("invalid JSON", by_label["-/-"][1][5])

        r = cli.run({ "dlq", "ls", "--app", "dq", "--handler", "fixable", "--no-header" }, env)
        assert.are.equal(2, #lines(r.stdout))
        r = cli.run({ "dlq", "ls", "--limit", "1", "--json", "--handler", "fixable" }, env)
        local only = lines(r.stdout)
        assert.are.equal(1, #only)
        local rec = cjson.decode(only[1])
        -- real numbers, the event as an object, id first
        assert.are.equal("number", type(rec.handler_attempts))
        assert.are.equal("table", type(rec.event))
        assert.matches('^{"id":"[%d-]+","original_stream":"events","original_id":', only[1])
        -- the two fixable events ran concurrently: either may have died first
        assert.is_true(rec.original_id == ids[1] or rec.original_id == ids[2])
        local n = rec.original_id == ids[1] and 1 or 2
        assert.are.equal("events", rec.original_stream)
        assert.are.equal("relay", rec.group)
        assert.are.equal("dq1", rec.consumer)
        assert.matches("not fixed yet", rec.output)

        local dlq_id = rec.id
        r = cli.run({ "dlq", "inspect", dlq_id }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.matches("reason: exit status 3", r.stdout)
        assert.matches('event:\n  {\n    "t": "fixable",\n    "n": ' .. n .. '\n  }', r.stdout)
        r = cli.run({ "dlq", "inspect", "1-1" }, env)
        assert.are.equal(1, r.code)
        assert.matches("^relay: no DLQ entry 1%-1", r.stderr)
        -- not an id at all: said so, before anything is read or removed
        r = cli.run({ "dlq", "inspect", "bogus" }, env)
        assert.are.same({ 2, "relay: bogus: not a stream id (<ms>-<seq>, as `relay dlq ls` shows them)\n" },
            { r.code, r.stderr })
        r = cli.run({ "dlq", "rm", dlq_id, "bogus" }, env)
        assert.are.equal(2, r.code)
        assert.matches("bogus: not a stream id", r.stderr)
        assert.are.equal(1, #client:call("XRANGE", "relay:events:dlq", dlq_id, dlq_id))

        -- the malformed entry cannot be replayed
        local malformed_id = by_label["-/-"][1][1]
        r = cli.run({ "dlq", "replay", malformed_id }, env)
        assert.are.equal(1, r.code)
        assert.matches("refusing to replay", r.stderr)

        -- fix the handler, replay one entry: it runs only that handler, once
        assert(fs.write_file(apps .. "/dq/fixed", "yes"))
        r = cli.run({ "dlq", "replay", dlq_id }, env)
        assert.are.equal(0, r.code, r.stderr)
        local new_id = r.stdout:match("^(%S+)\n$")
        assert.is_string(new_id)
        local entry = client:call("XRANGE", "events", new_id, new_id)[1][2]
        local f = {}
        for i = 1, #entry, 2 do f[entry[i]] = entry[i + 1] end
        assert.are.equal("dq/fixable", f.relay_target)
        assert.are.equal(dlq_id, f.relay_replay_of)
        assert.are.equal('{"t":"fixable","n":' .. n .. '}', f.event)
        d:wait_until(function()
            return client:call("HGET", "relay:events:inv:" .. new_id, "dq/fixable") ~= core_redis.null
                and client:call("HGET", "relay:events:inv:" .. new_id, "dq/fixable"):match("^succeeded")
        end, 20, "the replay to succeed")
        assert.are.equal(3, dlq_len())
        assert.are.same({}, client:call("XRANGE", "relay:events:dlq", dlq_id, dlq_id))

        -- rm: one real id and one missing id → prints 1, exits 1
        local other_id = cjson.decode(lines(cli.run({ "dlq", "ls", "--json", "--handler", "other" }, env).stdout)[1]).id
        r = cli.run({ "dlq", "rm", other_id, "1-1" }, env)
        assert.are.equal(1, r.code)
        assert.are.equal("1\n", r.stdout)
        assert.matches("no DLQ entry 1%-1", r.stderr)
        -- replay --all for the app replays the remaining fixable entry
        local last_fixable = cjson.decode(lines(cli.run({ "dlq", "ls", "--json", "--app", "dq",
            "--handler", "fixable" }, env).stdout)[1]).id
        r = cli.run({ "dlq", "replay", "--all", "--app", "dq", "--json" }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal(1, #lines(r.stdout))
        local replayed = cjson.decode(lines(r.stdout)[1])
        assert.are.equal(last_fixable, replayed.dlq_id)
        assert.matches("^%d+%-%d+$", replayed.id)
        r = cli.run({ "dlq", "rm", "--all", "--json" }, env)
        assert.are.equal('{"removed":1}\n', r.stdout)
        assert.are.equal(0, dlq_len())
    end)

    it("keeps the dead letter when deleting it fails after the publish (a duplicate, never a loss)", function()
        publish('{"t":"other"}')
        d:wait_until(function() return dlq_len() == 1 end, 20, "a dead letter")
        local dl_id = client:call("XRANGE", "relay:events:dlq", "-", "+")[1][1]
        server:cli("ACL SETUSER default -xdel")
        local r = cli.run({ "dlq", "replay", dl_id }, env)
        server:cli("ACL SETUSER default +xdel")
        assert.are.equal(1, r.code)
        -- the stream's length would not do: the clock app's tick publishes every second
        local new_id = r.stderr:match("published as (%S+) but could not delete the dead letter")
        assert.is_string(new_id, r.stderr)
        local replayed = client:call("XRANGE", "events", new_id, new_id)[1]
        assert.are.equal(new_id, replayed[1])
        assert.are.equal('{"t":"other"}', replayed[2][2])
        assert.are.equal(dl_id, client:call("XRANGE", "relay:events:dlq", dl_id, dl_id)[1][1])
    end)
end)

describe("schedules #compressed", function()
    local server, client, apps

    before_each(function()
        server = redis_server.start()
        client = assert(core_redis.connect_blocking({ path = server.sock, db = 0 }, 2))
        apps = copy_apps("spec/fixtures/dlq-apps")
    end)

    after_each(function()
        client:close()
        server:stop()
        fs.rm_rf(apps)
    end)

    local function schedule_entries()
        local out = {}
        for _, e in ipairs(client:call("XRANGE", "events", "-", "+")) do
            local f = {}
            for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
            if f.relay_schedule then
                out[#out + 1] = { id = e[1], schedule = f.relay_schedule, occurrence = f.relay_occurrence }
            end
        end
        return out
    end

    it("publishes each occurrence once across two replicas and runs it once", function()
        local a = daemon.start({ url = server.url, consumer = "s1", apps = apps })
        local b = daemon.start({ url = server.url, consumer = "s2", apps = apps })
        a:wait_until(function() return #schedule_entries() >= 5 end, 20, "five occurrences")
        a:stop("TERM")
        b:stop("TERM")
        a:cleanup()
        b:cleanup()
        local seen, prev = {}, nil
        for _, e in ipairs(schedule_entries()) do
            assert.are.equal("clock/tick", e.schedule)
            assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", e.occurrence)
            assert.is_nil(seen[e.occurrence], "published twice: " .. e.occurrence)
            seen[e.occurrence] = true
            if prev then
                assert.is_true(e.occurrence > prev)
            end
            prev = e.occurrence
        end
        -- each published occurrence ran exactly once, on one of the replicas
        local runs = {}
        for _, dmn in ipairs({ a, b }) do
            for _, l in ipairs(dmn:grep("SCHED tick schedule ")) do
                local occ = l:match('"occurrence":"([^"]+)"')
                assert.matches('"app":"clock","schedule":"tick","occurrence":"[^"]+","payload":{"kind":"tick"}', l)
                runs[occ] = (runs[occ] or 0) + 1
            end
        end
        for occ in pairs(seen) do
            assert.is_true((runs[occ] or 0) <= 1, occ .. " ran twice")
        end
        local ran = 0
        for _ in pairs(runs) do ran = ran + 1 end
        assert.is_true(ran >= 4, "only " .. ran .. " occurrences ran")
    end)

    it("dead-letters a failing schedule run and replays it as its schedule", function()
        local d = daemon.start({ url = server.url, consumer = "s1", apps = apps })
        -- an occurrence of the nightly job, as the scheduler would publish it
        local id = xadd_trusted(client, "relay_schedule", "clock/nightly", "relay_occurrence", "2026-11-30T03:00:00Z")
        d:wait_until(function() return client:call("XLEN", "relay:events:dlq") == 1 end, 20, "a dead letter")
        local dl = client:call("XRANGE", "relay:events:dlq", "-", "+")[1]
        local f = {}
        for i = 1, #dl[2], 2 do f[dl[2][i]] = dl[2][i + 1] end
        assert.are.equal("clock", f.app)
        assert.are.equal("report", f.handler)
        assert.are.equal(id, f.original_id)
        assert.are.equal("clock/nightly", f.relay_schedule)
        assert.are.equal("2026-11-30T03:00:00Z", f.relay_occurrence)
        assert.are.equal('{"app":"clock","schedule":"nightly","occurrence":"2026-11-30T03:00:00Z","payload":null}',
            f.event)
        assert.are.equal("exit status 4", f.reason)
        assert(fs.write_file(apps .. "/clock/fixed", "yes"))
        local r = cli.run({ "dlq", "replay", dl[1] }, { REDIS_URL = server.url })
        assert.are.equal(0, r.code, r.stderr)
        local new_id = r.stdout:match("^(%S+)")
        d:wait_until(function()
            local m = client:call("HGET", "relay:events:inv:" .. new_id, "clock/report")
            return m ~= core_redis.null and m:match("^succeeded")
        end, 20, "the replayed occurrence to succeed")
        -- the daemon's log is written by a thread of its own: the line may follow the state
        d:wait_until(function()
            return #d:grep('SCHED report schedule {"app":"clock","schedule":"nightly"') >= 2
        end, 10, "both runs' output in the log")
        d:stop("TERM")
        d:cleanup()
    end)

    it("acknowledges an obsolete occurrence without running anything", function()
        local d = daemon.start({ url = server.url, consumer = "s1", apps = apps })
        local id = xadd_trusted(client, "relay_schedule", "clock/gone", "relay_occurrence", "2026-11-30T03:00:00Z")
        d:wait_until(function()
            return #d:grep("obsolete schedule occurrence acknowledged") > 0
        end, 20, "the obsolete occurrence")
        assert.are.equal(0, client:call("XPENDING", "events", "relay")[1])
        assert.are.equal(0, #d:grep("SCHED report"))
        assert.are.equal(0, client:call("XLEN", "relay:events:dlq"))
        assert.is_string(id)
        d:stop("TERM")
        d:cleanup()
    end)

    it("lists schedules with their next occurrence", function()
        local r = cli.run({ "schedule", "ls", "--apps", apps })
        assert.are.equal(0, r.code, r.stderr)
        assert.matches("^SCHEDULE\tHANDLER\tSPEC\tNEXT %(UTC%)\tNEXT %(LOCAL%)\n", r.stdout)
        assert.matches("^clock/", cli.run({ "schedule", "ls", "--apps", apps, "--no-header" }).stdout)
        assert.matches("clock/tick\ttick\tevery 1s\t%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ\t[^\t\n]+Z UTC\n", r.stdout)
        assert.matches("clock/nightly\treport\tcron 0 3 %* %* %*\t%d%d%d%d%-%d%d%-%d%dT03:00:00Z\t"
            .. "%d%d%d%d%-%d%d%-%d%dT03:00:00Z UTC\n", r.stdout)
    end)
end)
