-- Redis Cluster: a local 3-master cluster. Relay pointed at a node that does
-- not own the stream's slot runs the whole lifecycle there (publish, run,
-- retries, DLQ, status); a stream name without a hash tag is refused at
-- start, naming the fix.
local build = require("relay.core.build")
local cli = require("helpers.cli")
local cluster = require("helpers.cluster")
local config = require("relay.config")
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local redis = require("relay.redis")
local runtime = require("relay.runtime")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
local maybe = (usable and build.test_constants) and describe or pending

local STREAM = "{orders}"


maybe("a 3-master Redis Cluster #compressed", function()
    local c
    local daemons = {}

    setup(function()
        c = cluster.start()
    end)

    teardown(function()
        for _, d in ipairs(daemons) do
            d:cleanup()
        end
        c:stop()
    end)

    local function start(url, stream, name)
        local d = daemon.start({ url = url, consumer = "cluster-" .. name, apps = world.APPS,
            env = { REDIS_STREAM = stream } })
        daemons[#daemons + 1] = d
        return d
    end

    it("refuses a stream name without a hash tag, naming the fix (run and CLI)", function()
        local d = start(c.nodes[1].url, "orders", "plain")
        local report = d:wait(30)
        local text = table.concat(d.lines, "\n")
        assert.are.equal(2, report and report.code, text)
        assert.matches("REDIS_STREAM='{orders}'", text, 1, true)
        local r = cli.run({ "publish", "{}" }, { REDIS_URL = c.nodes[2].url, REDIS_STREAM = "orders" })
        assert.are.equal(2, r.code, r.stderr)
        assert.truthy(r.stderr:find("REDIS_STREAM='{orders}'", 1, true), r.stderr)
    end)

    it("runs the full lifecycle pointed at a node that does not own the stream", function()
        local owner = c:owner(STREAM)
        local elsewhere = c:non_owner(STREAM)
        local other = 6 - owner - elsewhere
        local d = start(c.nodes[elsewhere].url, STREAM, "lifecycle")
        d:wait_until(function() return d:count("relay started") > 0 end, 20, "relay started")

        local env = { REDIS_URL = c.nodes[other].url, REDIS_STREAM = STREAM }
        local function publish(event)
            local r = cli.run({ "publish", event }, env)
            assert.are.equal(0, r.code, r.stderr)
            return (r.stdout:gsub("%s+$", ""))
        end
        local ok_id = publish('{"t":"ok"}')
        local failing_id = publish('{"t":"exit3"}')
        local unmatched_id = publish('{"t":"nobody"}')

        local function inv(id, field)
            return c:cli(owner, string.format("HGET 'relay:%s:inv:%s' %s", STREAM, id, field))
        end
        d:wait_until(function() return inv(ok_id, "wa/ok"):match("^succeeded:1:") end, 20, "the handler succeeded")
        d:wait_until(function() return c:cli(owner, "XLEN 'relay:" .. STREAM .. ":dlq'") == "1" end, 30,
            "the failing handler dead-lettered after its retries")
        assert.matches("^exhausted:3:", inv(failing_id, "wa/exit3"))
        d:wait_until(function()
            return c:cli(owner, "XPENDING '" .. STREAM .. "' relay"):match("^0") ~= nil
        end, 20, "every entry acknowledged")
        assert.are.equal("", inv(unmatched_id, "wa/ok"))

        local status = cli.run({ "status", "--json" }, env)
        assert.are.equal(0, status.code, status.stderr)
        assert.matches('"dlq_length": *1', status.stdout)
        assert.matches('"length": *3', status.stdout)
        local dlq = cli.run({ "dlq", "ls" }, env)
        assert.are.equal(0, dlq.code, dlq.stderr)
        assert.truthy(dlq.stdout:find("\twa/exit3\t3\t", 1, true), dlq.stdout)
        local apps_env = { REDIS_URL = c.nodes[other].url, REDIS_STREAM = STREAM, RELAY_APPS = world.APPS }
        local pause = cli.run({ "app", "pause", "wb" }, apps_env)
        assert.are.equal(0, pause.code, pause.stderr)
        local ls = cli.run({ "app", "ls" }, apps_env)
        assert.are.equal(0, ls.code, ls.stderr)
        assert.are.equal("", ls.stderr)
        assert.matches("\nwb\tpaused\t", "\n" .. ls.stdout)
        assert.are.equal(0, cli.run({ "app", "resume", "wb" }, apps_env).code)
        assert.is_true(d:alive())
    end)

    it("follows the stream's slot to its new owner while events keep coming", function()
        local owner = c:owner(STREAM)
        local target = owner % 3 + 1
        local d = start(c.nodes[owner].url, STREAM, "reshard")
        d:wait_until(function() return d:count("relay started") > 0 end, 20, "relay started")
        local env = { REDIS_URL = c.nodes[target].url, REDIS_STREAM = STREAM }
        local ids = {}
        local function publish(n)
            for _ = 1, n do
                local r = cli.run({ "publish", '{"t":"ok"}' }, env)
                assert.are.equal(0, r.code, r.stderr)
                ids[#ids + 1] = (r.stdout:gsub("%s+$", ""))
            end
        end
        local dead_letters = c:cli(owner, "XLEN 'relay:" .. STREAM .. ":dlq'")
        publish(10)
        -- A producer keeps publishing while the slot moves (one that is refused publishes again).
        local produced = c.dir .. "/produced"
        os.execute(string.format("(for i in $(seq 1 20); do until id=$(env REDIS_URL=%s REDIS_STREAM=%s %s " ..
            "publish '{\"t\":\"ok\"}' 2>/dev/null); do sleep 0.05; done; echo \"$id\" >>%s; done; " ..
            "echo done >>%s) >/dev/null 2>&1 &", c.nodes[target].url, cli.quote(STREAM), cli.quote(cli.binary()),
            produced, produced))
        local slot = tonumber(c:cli(owner, "CLUSTER KEYSLOT '" .. STREAM .. "'"))
        c:move_slot(slot, owner, target)
        local lines = d:wait_until(function()
            local text = fs.read_file(produced) or ""
            return text:find("done\n", 1, true) and text
        end, 60, "the producer's 20 events")
        for id in lines:gmatch("(%d+%-%d+)\n") do
            ids[#ids + 1] = id
        end
        assert.are.equal(30, #ids)
        publish(5)

        local function succeeded(id)
            local v = c:cli(target, string.format("HGET 'relay:%s:inv:%s' wa/ok", STREAM, id))
            return v:match("^succeeded:1:") ~= nil
        end
        d:wait_until(function()
            for _, id in ipairs(ids) do
                if not succeeded(id) then
                    return false
                end
            end
            return true
        end, 60, "every event handled once, on the new owner")
        d:wait_until(function()
            return c:cli(target, "XPENDING '" .. STREAM .. "' relay"):match("^0") ~= nil
        end, 20, "every entry acknowledged")
        assert.are.equal(dead_letters, c:cli(target, "XLEN 'relay:" .. STREAM .. ":dlq'"))
        assert.is_true(d:alive())
    end)

    it("follows ASK during a migration, a script the importing node lacks included, then MOVED", function()
        local owner = c:owner(STREAM)
        local target = owner % 3 + 1
        local cfg = assert(config.load({ REDIS_URL = c.nodes[owner].url, REDIS_STREAM = STREAM }))
        local client = assert(redis.connect(cfg))
        local length = client:call("XLEN", STREAM)
        assert.is_number(length)
        local script = "return {redis.call('XLEN', KEYS[1]), '" .. c.dir .. "'}"  -- a text no node has loaded
        assert.are.same({ length, c.dir }, redis.eval(client, script, { STREAM }, {}))

        local slot = tonumber(c:cli(owner, "CLUSTER KEYSLOT '" .. STREAM .. "'"))
        c:begin_migration(slot, owner, target)
        c:migrate(owner, target, { STREAM })  -- the stream alone has moved: the old owner answers ASK
        assert.are.equal(length, client:call("XLEN", STREAM))
        local value, err = redis.eval(client, script, { STREAM }, {})
        assert.are.same({ length, c.dir }, value, err)

        c:finish_migration(slot, owner, target)
        assert.are.equal(length, client:call("XLEN", STREAM))  -- MOVED: now on the new owner
        assert.are.same({ length, c.dir }, redis.eval(client, script, { STREAM }, {}))
        client:close()
    end)
end)
