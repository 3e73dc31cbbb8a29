-- rediss:// end to end: a TLS-only redis-server (Debian's is built with TLS)
-- with a throw-away CA, server and client certificates made by openssl at
-- test time. The CLI (blocking client) publishes and reports over TLS; the
-- daemon (async client) runs a handler, dead-letters an entry that `relay
-- dlq ls` then lists over TLS; a CA that did not sign the server, a name the
-- certificate does not carry and a missing client certificate are refused,
-- each naming the variable that fixes it. Under TLS the per-reply cap, the
-- reconnect and the connect timeout hold as they do in plaintext.
local cjson = require("cjson")
local cli = require("helpers.cli")
local config = require("relay.config")
local core_redis = require("relay.core.redis")
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local redis = require("relay.redis")
local runtime = require("relay.runtime")
local tls = require("helpers.tls")
local world = require("helpers.world")

local MiB = 1024 * 1024

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
local maybe = usable and describe or pending


describe("rediss:// from the CLI", function()
    local pki, server, silent_port

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

    -- Linked, OpenSSL cost every `relay` process ~2 ms of start-up; only a
    -- TLS connection loads it now (src/tls_library.c).
    it("loads OpenSSL only for a TLS connection", function()
        local script = pki.dir .. "/maps.lua"
        assert(fs.write_file(script, table.concat({
            'local fs = require("relay.fs")',
            'local function ssl() return fs.read_file("/proc/self/maps"):find("libssl", 1, true) ~= nil end',
            'local before = ssl()',
            'local addr = assert(require("relay.config").load()).redis_url',
            'local client = assert(require("relay.core.redis").connect_blocking(addr, 5))',
            'assert(client:call("PING"))',
            'print(tostring(before) .. " " .. tostring(ssl()))',
        }, "\n")))
        local r = cli.run({ "x-lua", script }, server:env({ RELAY_REDIS_CA = pki.ca }))
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal("false true\n", r.stdout)
    end)

    -- The tests above run only blocking code (openssl, cli.run's
    -- os.execute): the loop's cached time stayed where the loop last woke.
    -- On a loaded machine that was over 5 s behind, and the next test's
    -- connect timed out at once. Blocking here makes it certain.
    it("counts connect, command and process timeouts from the call, not from the loop's last wake-up", function()
        local addr = assert(config.load(server:env({ RELAY_REDIS_CA = pki.ca }))).redis_url
        loop.sleep(0.01) -- the loop's time is now fresh...
        os.execute("sleep 5.5") -- ...and falls behind both connect timeouts (5 s)
        local client = assert(core_redis.connect(addr, 5, MiB))
        os.execute("sleep 1.5")
        assert.are.equal("PONG", assert(client:call_timeout(1, "PING")).ok)
        client:close()
        os.execute("sleep 1.5")
        local status = assert(assert(proc.spawn({ argv = { "true" }, timeout = 1 })):wait())
        assert.is_false(status.timed_out)
        assert.are.equal(0, status.status)
    end)

    it("keeps the per-reply cap and reconnects after a reset or a killed connection", function()
        local addr = assert(config.load(server:env({ RELAY_REDIS_CA = pki.ca }))).redis_url
        local client = assert(core_redis.connect(addr, 5, MiB))
        assert(client:call("SET", "big", string.rep("b", 3 * MiB)))
        assert(client:call("SET", "small", string.rep("s", 512 * 1024)))
        local value, err, kind = client:call("GET", "big")
        assert.is_nil(value)
        assert.matches("^reply too large", err)
        assert.are.equal("io", kind)
        daemon.wait_until(function() return client:connected() end, 5, "reconnected after the reset")
        assert.are.equal(512 * 1024, #assert(client:call("GET", "small")))
        server.plain:cli("CLIENT KILL TYPE normal")
        daemon.wait_until(function() return client:call("PING") ~= nil end, 10, "reconnected after the kill")
        assert.is_true(client:info().reconnects >= 2)
        client:close()
    end)

    it("fails within the connect timeout against a port that accepts TCP but never answers TLS", function()
        local silent = assert(proc.spawn({ argv = { "python3", "-c",
            "import socket, sys, time\n" ..
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n" ..
            "print(s.getsockname()[1]); sys.stdout.flush(); time.sleep(60)" },
            on_line = function(_, line) silent_port = tonumber(line) end }))
        daemon.wait_until(function() return silent_port end, 10, "the silent listener")
        local env = { REDIS_URL = "rediss://localhost:" .. silent_port, RELAY_REDIS_CA = pki.ca }
        local started = loop.monotonic()
        local r = cli.run({ "status" }, env)
        assert.are.equal(2, r.code, r.stderr)
        assert.matches("timed out", r.stderr, 1, true)
        assert.is_true(loop.monotonic() - started < 10, "bounded by the 5 s timeout")
        started = loop.monotonic()
        local client, err = redis.connect(assert(config.load(env)))
        assert.is_nil(client)
        assert.truthy(err:find("timeout", 1, true) or err:find("timed out", 1, true), err)
        assert.is_true(loop.monotonic() - started < 10, "bounded by the 5 s timeout")
        silent:kill("KILL")
        silent:wait(5)
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

        local r = cli.run({ "dlq", "ls", "--no-header" }, env)
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
