-- rediss:// and the TLS variables (relay.config): the address carries a tls
-- table filled from RELAY_REDIS_CA/CERT/KEY/TLS_SERVERNAME; those
-- variables with a plaintext URL are an error, not silently ignored.
local config = require("relay.config")

describe("rediss:// (relay.config)", function()
    it("parses like redis:// and marks the address for TLS", function()
        local addr = assert(config.parse_redis_url("rediss://u:p%40ss@redis.example:6380/2"))
        assert.are.same({ host = "redis.example", port = 6380, db = 2, user = "u", password = "p@ss", tls = {} },
            addr)
        assert.is_nil(assert(config.parse_redis_url("redis://localhost")).tls)
    end)

    it("refuses a bad rediss:// address with the same reasons as redis://", function()
        local addr, err = config.parse_redis_url("rediss://localhost:99999")
        assert.is_nil(addr)
        assert.matches("port", err)
    end)

    it("fills the tls table from the TLS variables", function()
        local cfg = assert(config.load({
            REDIS_URL = "rediss://10.0.0.5:6380", RELAY_REDIS_CA = "/etc/ca.pem", RELAY_REDIS_CERT = "/etc/c.pem",
            RELAY_REDIS_KEY = "/etc/c.key", RELAY_REDIS_TLS_SERVERNAME = "redis.internal",
        }))
        assert.are.same({ ca = "/etc/ca.pem", cert = "/etc/c.pem", key = "/etc/c.key", servername = "redis.internal" },
            cfg.redis_url.tls)
    end)

    it("leaves verification to the system store when no variable is set", function()
        assert.are.same({}, assert(config.load({ REDIS_URL = "rediss://localhost" })).redis_url.tls)
    end)

    it("refuses a TLS variable with a plaintext URL, naming it", function()
        local vars = { "RELAY_REDIS_CA", "RELAY_REDIS_CERT", "RELAY_REDIS_KEY", "RELAY_REDIS_TLS_SERVERNAME" }
        for _, var in ipairs(vars) do
            local cfg, err = config.load({ REDIS_URL = "redis://localhost", [var] = "x" })
            assert.is_nil(cfg)
            assert.matches(var .. " is set but REDIS_URL is not rediss://", err, 1, true)
        end
    end)

    it("keeps TLS on a Cluster redirect to another node", function()
        local addr = assert(assert(config.load({ REDIS_URL = "rediss://u:p@node1:6380", RELAY_REDIS_CA = "/ca.pem" }))
            .redis_url)
        local moved = require("relay.redis_cluster").at(addr, { host = "10.0.0.2", port = 6381 })
        assert.are.same({ ca = "/ca.pem" }, moved.tls)
        assert.are.equal("10.0.0.2", moved.host)
    end)

    it("takes rediss+sentinel:// as TLS to the primary the Sentinels name", function()
        local cfg = assert(config.load({ REDIS_URL = "rediss+sentinel://:pw@s1:26379,s2/mymaster/1",
            RELAY_REDIS_CA = "/ca.pem" }))
        assert.are.same({ { host = "s1", port = 26379 }, { host = "s2", port = 26379 } }, cfg.redis_url.sentinels)
        assert.are.same({ ca = "/ca.pem" }, cfg.redis_url.tls)
        local primary = require("relay.redis_sentinel").at(cfg.redis_url, { host = "10.0.0.9", port = 6380 })
        assert.are.same({ host = "10.0.0.9", port = 6380, db = 1, password = "pw", tls = { ca = "/ca.pem" } },
            primary)
        assert.is_nil(assert(config.parse_redis_url("redis+sentinel://s1/m")).tls)
    end)

    it("names rediss:// in the error for an unknown scheme", function()
        local _, err = config.parse_redis_url("http://localhost")
        assert.matches("rediss://", err, 1, true)
    end)
end)
