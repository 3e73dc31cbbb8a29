-- Reserved stream fields (relay_target, relay_schedule, relay_replay_of,
-- relay_occurrence) are honoured only on entries Relay's own publishers
-- wrote (`relay dlq replay`, the scheduler), which record the entry id in
-- relay:<stream>:trusted in the same script as the XADD. A producer's copy
-- is dead-lettered once and runs nothing. Then the Redis ACLs of the README:
-- a producer can only XADD; Relay's user runs the lifecycle.
local cli = require("helpers.cli")
local core_redis = require("relay.core.redis")
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local lifecycle = require("relay.lifecycle")
local redis = require("relay.redis")
local runtime = require("relay.runtime")
local scripts = require("relay.scripts")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
local maybe = usable and describe or pending

local UNTRUSTED = "reserved field from a producer"
local TRUSTED = "relay:events:trusted"


local function copy_apps()
    local dir = daemon.tmpdir("apps")
    assert(os.execute("cp -r spec/fixtures/trust-apps/. " .. dir) == 0)
    return dir
end


--- Handler runs logged by the fixture: { handler, id, trigger }.
local function runs(d)
    local out = {}
    for _, l in ipairs(d.lines) do
        local handler, id, trigger = l:match("%] RAN (%S+) (%S+) (%S+)$")
        if handler then
            out[#out + 1] = { handler = handler, id = id, trigger = trigger }
        end
    end
    return out
end


local function ran(d, id)
    local out = {}
    for _, r in ipairs(runs(d)) do
        if r.id == id then
            out[#out + 1] = r.handler
        end
    end
    return out
end


maybe("reserved fields", function()
    local w, d, apps

    before_each(function()
        apps = copy_apps()
        w = world.new({ apps = apps })
        d = w:daemon("c1")
        w:ready(d)
    end)

    after_each(function()
        w:close()
        fs.rm_rf(apps)
    end)

    --- The DLQ entries of one original message.
    local function dead_letters(id)
        local out = {}
        for _, e in ipairs(w:dlq()) do
            if e.fields.original_id == id then
                out[#out + 1] = e
            end
        end
        return out
    end

    local function settled(id)
        return w:inv(id)["~retained"] and w:pending_entries()[id] == nil
    end

    --- Delivers every entry of the stream again (the group restarts at 0),
    -- and waits until a fresh sentinel after them was handled.
    local function redeliver_all()
        w:call("XGROUP", "SETID", "events", "relay", "0")
        local sentinel = w:publish('{"t":"nobody"}')
        d:wait_until(function()
            local g = redis.pairs_to_table(w:call("XINFO", "GROUPS", "events")[1])
            return g["last-delivered-id"] == sentinel and w:pending() == 0
        end, 20, "every entry delivered again and settled")
    end

    local function assert_untrusted(id, event)
        local dl = dead_letters(id)
        assert.are.equal(1, #dl)
        assert.are.equal(UNTRUSTED, dl[1].fields.reason)
        assert.are.equal("-", dl[1].fields.app)
        assert.are.equal("-", dl[1].fields.handler)
        assert.are.equal("0", dl[1].fields.handler_attempts)
        assert.are.equal(event or "", dl[1].fields.event)
        -- a producer's lineage is not copied into the dead letter
        assert.is_nil(dl[1].fields.replay_of)
        assert.are.equal(dl[1].id, w:inv(id)["-/-"])
        assert.are.same({}, ran(d, id))
    end

    it("dead-letters a producer's relay_target once, without running any handler", function()
        -- `guarded` matches t=admin only: the target would bypass its pattern
        local id = w:xadd("event", '{"t":"open"}', "relay_target", "ta/guarded")
        d:wait_until(function() return settled(id) end, 20, "the forged target settled")
        assert_untrusted(id, '{"t":"open"}')
        redeliver_all()
        assert_untrusted(id, '{"t":"open"}')
        assert.are.equal(1, #w:dlq())
    end)

    it("dead-letters a producer's relay_schedule without running the schedule's handler", function()
        local id = w:xadd("relay_schedule", "ta/nightly", "relay_occurrence", "2026-11-30T03:00:00Z")
        d:wait_until(function() return settled(id) end, 20, "the forged occurrence settled")
        assert_untrusted(id)
        for _, r in ipairs(runs(d)) do
            assert.are_not.equal("secret", r.handler)
        end
    end)

    it("dead-letters a producer's relay_replay_of or relay_occurrence on a matching event", function()
        local replay = w:xadd("event", '{"t":"open"}', "relay_replay_of", "1-1")
        local occurrence = w:xadd("event", '{"t":"open"}', "relay_occurrence", "2026-11-30T03:00:00Z")
        local plain = w:publish('{"t":"open"}')
        d:wait_until(function()
            return settled(replay) and settled(occurrence) and settled(plain)
        end, 20, "the three messages settled")
        assert_untrusted(replay, '{"t":"open"}')
        assert_untrusted(occurrence, '{"t":"open"}')
        assert.are.same({ "open" }, ran(d, plain))
        assert.are.equal(2, #w:dlq())
    end)

    it("still runs `relay dlq replay` of a real dead letter, once", function()
        local id = w:publish('{"t":"fails"}')
        d:wait_until(function() return #dead_letters(id) == 1 end, 20, "the dead letter")
        local dl = dead_letters(id)[1]
        assert.are.equal("exit status 3", dl.fields.reason)
        assert(fs.write_file(apps .. "/ta/fixed", "yes"))
        local r = cli.run({ "dlq", "replay", dl.id }, { REDIS_URL = w.server.url })
        assert.are.equal(0, r.code, r.stderr)
        local new_id = r.stdout:match("^(%S+)\n$")
        assert.is_string(new_id)
        assert.are_not.equal(core_redis.null, w:call("ZSCORE", TRUSTED, new_id))
        d:wait_until(function()
            return (w:inv(new_id)["ta/fails"] or ""):match("^succeeded") and settled(new_id)
        end, 20, "the replay to succeed")
        assert.are.same({ "fails" }, ran(d, new_id))
        assert.are.same({}, w:dlq())
        redeliver_all()
        assert.are.same({ "fails" }, ran(d, new_id))
        assert.are.same({}, w:dlq())
    end)

    it("still runs the scheduler's occurrences", function()
        local tick = d:wait_until(function()
            for _, r in ipairs(runs(d)) do
                if r.handler == "tick" and settled(r.id) then
                    return r
                end
            end
        end, 20, "a tick occurrence to run")
        assert.are.equal("schedule", tick.trigger)
        assert.are_not.equal(core_redis.null, w:call("ZSCORE", TRUSTED, tick.id))
        assert.are.same({}, w:dlq())
    end)

    it("refuses a trusted replay whose target is a schedule-only handler (replay target not found)", function()
        -- an event dead letter naming `secret`, as if it had been an event
        -- handler when the message failed
        local dl_id = w:call("XADD", "relay:events:dlq", "*", "original_stream", "events", "original_id", "1-1",
            "group", "relay", "consumer", "c0", "event", '{"t":"open"}', "reason", "exit status 1",
            "app", "ta", "handler", "secret", "deliveries", "1", "handler_attempts", "1",
            "timestamp", "2026-01-01T00:00:00.000Z")
        local r = cli.run({ "dlq", "replay", dl_id }, { REDIS_URL = w.server.url })
        assert.are.equal(0, r.code, r.stderr)
        local new_id = r.stdout:match("^(%S+)\n$")
        d:wait_until(function() return settled(new_id) end, 20, "the replay settled")
        local dl = dead_letters(new_id)
        assert.are.equal(1, #dl)
        assert.are.equal("replay target not found", dl[1].fields.reason)
        assert.are.equal(dl_id, dl[1].fields.replay_of)
        assert.are.same({}, ran(d, new_id))
    end)
end)


describe("trusted records", function()
    local server, client

    before_each(function()
        server = require("helpers.redis").start()
        client = assert(core_redis.connect_blocking({ path = server.sock, db = 0 }, 2))
    end)

    after_each(function()
        client:close()
        server:stop()
    end)

    local function publish(...)
        return assert(redis.eval(client, scripts.publish_trusted, { "events", TRUSTED }, { ... }))
    end

    local function forget()
        return assert(redis.eval(client, scripts.forget_trusted, { "events", TRUSTED }, {}))
    end

    it("records each publish with the XADD and forgets the entries gone from the stream", function()
        local a = publish("event", "{}", "relay_target", "x/y", "relay_replay_of", "1-1")
        local b = publish("event", "{}", "relay_target", "x/y", "relay_replay_of", "1-2")
        assert.are.same({ "event", "{}", "relay_target", "x/y", "relay_replay_of", "1-1" },
            client:call("XRANGE", "events", a, a)[1][2])
        assert.are.equal(tostring(tonumber(a:match("^(%d+)"))), client:call("ZSCORE", TRUSTED, a))
        assert.are.equal(0, forget())
        assert.are.equal(2, client:call("ZCARD", TRUSTED))
        -- a later entry in a later millisecond, then the first two trimmed
        local ms = tonumber(b:match("^(%d+)"))
        local c = client:call("XADD", "events", (ms + 5) .. "-0", "event", "{}")
        client:call("XTRIM", "events", "MINID", c)
        assert.are.equal(2, forget())
        assert.are.equal(0, client:call("EXISTS", TRUSTED))
        local d = publish("event", "{}")
        client:call("XDEL", "events", c, d)
        assert.are.equal(1, forget())
        assert.are.equal(0, client:call("EXISTS", TRUSTED))
    end)
end)


--- The `ACL SETUSER` lines of the README, as word lists by user name.
local function readme_acl()
    local users = {}
    for line in io.lines("README.md") do
        if line:match("^ACL SETUSER ") then
            local words = {}
            for word in line:gmatch("%S+") do
                words[#words + 1] = word
            end
            users[words[3]] = words
        end
    end
    return users
end


maybe("the Redis ACLs of the README", function()
    local w, apps, admin, producer, relay_user

    local function connect(user, password)
        return assert(core_redis.connect_blocking({ path = w.server.sock, user = user, password = password }, 2))
    end

    local function must(v, err)
        assert(v ~= nil, tostring(err))
        return v
    end

    before_each(function()
        apps = copy_apps()
        w = world.new({ apps = apps })
        w:call("ACL", "SETUSER", "admin", "on", ">admin-pw", "~*", "&*", "+@all")
        admin = connect("admin", "admin-pw")
        local acl = readme_acl()
        assert(acl.producer and acl.relay, "the README lists ACL lines for producer and relay")
        must(admin:call(acl.producer))
        must(admin:call(acl.relay))
        -- a unix REDIS_URL carries no credentials: the daemon and the CLI
        -- connect as `default`, given Relay's rules (without the password)
        local default = {}
        for _, word in ipairs(acl.relay) do
            if word:sub(1, 1) ~= ">" then
                default[#default + 1] = word == "relay" and "default" or word
            end
        end
        must(admin:call(default))
        producer = connect("producer", "PRODUCER_PASSWORD")
        relay_user = connect("relay", "RELAY_PASSWORD")
    end)

    after_each(function()
        producer:close()
        relay_user:close()
        admin:close()
        w:close()
        fs.rm_rf(apps)
    end)

    it("lets a producer XADD to the stream and nothing else", function()
        local id = must(producer:call("XADD", "events", "*", "event", '{"t":"open"}'))
        assert.matches("^%d+%-%d+$", id)
        local sha = must(admin:call("SCRIPT", "LOAD", scripts.publish_trusted))
        for _, cmd in ipairs({
            { "ZADD", TRUSTED, "1", id },
            { "XADD", TRUSTED, "*", "a", "b" },
            { "XADD", "relay:events:dlq", "*", "a", "b" },
            { "HSET", "relay:events:inv:" .. id, "~retained", "1" },
            { "EVAL", "return 1", "0" },
            { "EVALSHA", sha, "2", "events", TRUSTED, "event", "{}", "relay_target", "ta/guarded" },
            { "SCRIPT", "LOAD", "return 1" },
            { "FCALL", "f", "0" },
            { "XRANGE", "events", "-", "+" },
            { "XACK", "events", "relay", id },
        }) do
            local v, err = producer:call(cmd)
            assert.is_nil(v, cmd[1] .. " was allowed")
            assert.matches("NOPERM", err, cmd[1])
        end
        assert.are.equal(0, admin:call("EXISTS", TRUSTED))
        assert.are.equal(1, admin:call("XLEN", "events"))
    end)

    it("lets Relay's user run the daemon, a DLQ replay and the lifecycle scripts", function()
        local d = w:daemon("c1")
        w:ready(d)
        local failing = must(producer:call("XADD", "events", "*", "event", '{"t":"fails"}'))
        local forged = must(producer:call("XADD", "events", "*", "event", '{"t":"open"}', "relay_target", "ta/guarded"))
        local function dead_letter(id)
            for _, e in ipairs(w:dlq()) do
                if e.fields.original_id == id then
                    return e
                end
            end
        end
        d:wait_until(function() return dead_letter(failing) and dead_letter(forged) end, 20, "two dead letters")
        assert.are.equal(UNTRUSTED, dead_letter(forged).fields.reason)
        assert(fs.write_file(apps .. "/ta/fixed", "yes"))
        local r = cli.run({ "dlq", "replay", dead_letter(failing).id }, { REDIS_URL = w.server.url })
        assert.are.equal(0, r.code, r.stderr)
        local new_id = r.stdout:match("^(%S+)\n$")
        d:wait_until(function() return (w:inv(new_id)["ta/fails"] or ""):match("^succeeded") end, 20,
            "the replay to succeed")
        d:wait_until(function() return #d:grep("RAN tick ") > 0 end, 20, "a schedule occurrence to run")
        r = cli.run({ "status" }, { REDIS_URL = w.server.url })
        assert.are.equal(0, r.code, r.stderr)
        -- the scripts this run did not reach, as the `relay` user
        local life = lifecycle.new({ client = relay_user, stream = "events", group = "relay", consumer = "acl",
            instance = "acl" })
        must(life:ack_unmatched({ "1-1" }))
        -- the pending-list script, on two entries pending for `acl`, one of them deleted
        must(relay_user:call("XADD", "events", "*", "event", '{"t":"nobody"}'))
        local deleted = must(relay_user:call("XADD", "events", "*", "event", '{"t":"nobody"}'))
        must(relay_user:call("XREADGROUP", "GROUP", "relay", "acl", "STREAMS", "events", ">"))
        must(relay_user:call("XDEL", "events", deleted))
        must(redis.eval(relay_user, scripts.take_pending, { "events", "relay:events:stats" }, { "relay", "acl", "own",
            "-", 10, 1024, 70000, 64, "relay:events:inv:", "relay:events:handling:", 60000, 5, 0 }))
        must(redis.eval(relay_user, scripts.count_trimmed, { "events", "relay:events:stats" }, { "relay", "count" }))
        must(life:trim(1))
        must(redis.eval(relay_user, scripts.forget_trusted, { "events", TRUSTED }, {}))
        assert.are.same({}, d:grep("NOPERM"))
    end)
end)
