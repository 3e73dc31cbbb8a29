-- rediss:// end to end: a TLS-only redis-server (Debian's is built with TLS)
-- with a throw-away CA, server and client certificates made by openssl at
-- test time. The CLI (blocking client) publishes and reports over TLS; the
-- daemon (async client) runs a handler, dead-letters an entry that `relay
-- dlq ls` then lists over TLS; a CA that did not sign the server, a name the
-- certificate does not carry and a missing client certificate are refused,
-- each naming the variable that fixes it.
local cjson = require("cjson")
local cli = require("helpers.cli")
local config = require("relay.config")
local fs = require("relay.fs")
local redis = require("relay.redis")
local runtime = require("relay.runtime")
local tls = require("helpers.tls")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
local maybe = usable and describe or pending


describe("rediss:// from the CLI", function()
    local pki, server

    setup(function()
        pki = tls.pki()
        server = tls.server(pki)
    end)

    teardown(function()
        server:stop()
        pki.remove()
    end)

    it("publishes and shows status over TLS, the server verified against RELAY_REDIS_CA", function()
        local env = server:env({ RELAY_REDIS_CA = pki.ca })
        local r = cli.run({ "publish", '{"t":"ok"}' }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal("1", server.plain:cli("XLEN events"))
        r = cli.run({ "status", "--json" }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal(1, cjson.decode(r.stdout).length)
    end)

    it("refuses a server its CA did not sign, naming RELAY_REDIS_CA", function()
        for _, env in ipairs({ server:env({ RELAY_REDIS_CA = pki.other_ca }), server:env() }) do
            local r = cli.run({ "publish", "{}" }, env)
            assert.are.equal(2, r.code, r.stderr)
            assert.matches("certificate is not trusted", r.stderr, 1, true)
            assert.matches("set RELAY_REDIS_CA", r.stderr, 1, true)
        end
        assert.are.equal("1", server.plain:cli("XLEN events"))
    end)

    it("checks the name: refuses one the certificate lacks, RELAY_REDIS_TLS_SERVERNAME overrides it", function()
        local r = cli.run({ "status" },
            server:env({ RELAY_REDIS_CA = pki.ca, RELAY_REDIS_TLS_SERVERNAME = "wrong.test" }))
        assert.are.equal(2, r.code, r.stderr)
        assert.matches("does not name wrong.test", r.stderr, 1, true)
        assert.matches("RELAY_REDIS_TLS_SERVERNAME", r.stderr, 1, true)
        -- by address, checked against the certificate's name redis.test
        r = cli.run({ "status" }, { REDIS_URL = "rediss://127.0.0.1:" .. server.port,
            RELAY_REDIS_CA = pki.ca, RELAY_REDIS_TLS_SERVERNAME = "redis.test" })
        assert.are.equal(0, r.code, r.stderr)
    end)

    it("refuses a TLS variable with a plaintext URL, and a missing CA file, naming the variable", function()
        local r = cli.run({ "status" }, { REDIS_URL = "redis://localhost:" .. server.port, RELAY_REDIS_CA = pki.ca })
        assert.are.equal(2, r.code, r.stderr)
        assert.matches("RELAY_REDIS_CA is set but REDIS_URL is not rediss://", r.stderr, 1, true)
        r = cli.run({ "status" }, server:env({ RELAY_REDIS_CA = pki.dir .. "/nosuch.crt" }))
        assert.are.equal(2, r.code, r.stderr)
        assert.matches("RELAY_REDIS_CA=" .. pki.dir .. "/nosuch.crt", r.stderr, 1, true)
    end)
end)


describe("rediss:// with a client certificate required", function()
    local pki, server

    setup(function()
        pki = tls.pki()
        server = tls.server(pki, { auth_clients = "yes" })
    end)

    teardown(function()
        server:stop()
        pki.remove()
    end)

    it("is refused without one, naming RELAY_REDIS_CERT and RELAY_REDIS_KEY", function()
        local r = cli.run({ "publish", "{}" }, server:env({ RELAY_REDIS_CA = pki.ca }))
        assert.are.equal(2, r.code, r.stderr)
        assert.matches("client certificate: set RELAY_REDIS_CERT and RELAY_REDIS_KEY", r.stderr, 1, true)
        local cfg = assert(config.load(server:env({ RELAY_REDIS_CA = pki.ca })))
        local client, err = redis.connect(cfg)
        assert.is_nil(client)
        assert.matches("client certificate: set RELAY_REDIS_CERT and RELAY_REDIS_KEY", err, 1, true)
    end)

    it("works with one, from the CLI and the async client", function()
        local env = server:env({ RELAY_REDIS_CA = pki.ca, RELAY_REDIS_CERT = pki.client_cert,
            RELAY_REDIS_KEY = pki.client_key })
        local r = cli.run({ "publish", '{"t":"ok"}' }, env)
        assert.are.equal(0, r.code, r.stderr)
        local client = assert(redis.connect(assert(config.load(env))))
        assert.are.equal(1, client:call("XLEN", "events"))
        client:close()
    end)
end)


maybe("relay run over rediss://", function()
    local pki, w, env

    before_each(function()
        pki = tls.pki()
        local args, url = tls.redis_args(pki)
        w = world.new({ redis_args = args })
        env = { REDIS_URL = url, RELAY_REDIS_CA = pki.ca }
    end)

    after_each(function()
        w:close()
        pki.remove()
    end)

    it("runs a handler to success, dead-letters a malformed entry, and reports both over TLS", function()
        local d = w:daemon("c1", env)
        w:ready(d)
        local id = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(id)["~retained"] end, 15, "the message retained")
        assert.are.equal(1, #d:runs("end"))
        w:xadd("event", "not json")
        d:wait_until(function() return #w:dlq() == 1 end, 15, "a dead letter")
        assert.are.equal(0, w:pending())

        local r = cli.run({ "dlq", "ls" }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal(1, select(2, r.stdout:gsub("\n", "")))
        r = cli.run({ "status", "--json" }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal(1, cjson.decode(r.stdout).dlq_length)
    end)

    it("exits 2 at start-up against a server its CA did not sign, naming RELAY_REDIS_CA", function()
        local r = cli.run({ "run" }, { REDIS_URL = env.REDIS_URL, RELAY_REDIS_CA = pki.other_ca,
            RELAY_APPS = world.APPS, RELAY_CONSUMER = w:consumer("badca"), RELAY_STATE_DIR = w.state_dir })
        assert.are.equal(2, r.code, r.stderr)
        assert.matches("set RELAY_REDIS_CA", r.stderr, 1, true)
    end)
end)
