-- relay.config: every variable of the README's Configuration, strictly.
local config = require("relay.config")

describe("config", function()
    it("has the documented defaults", function()
        local cfg = assert(config.load({}))
        assert.are.same({ host = "127.0.0.1", port = 6379, db = 0 }, cfg.redis_url)
        assert.are.equal("events", cfg.stream)
        assert.are.equal("relay", cfg.group)
        assert.are.equal(4, cfg.max_concurrency)
        assert.are.equal("./apps", cfg.apps)
        assert.are.equal("auto", cfg.runtime)
        assert.are.equal("info", cfg.log_level)
        assert.are.equal("text", cfg.log_format)
        assert.is_nil(cfg.metrics_addr)
        assert.is_nil(cfg.hooks)
        assert.are.equal(24 * 3600 * 1000, cfg.retention_ms)
        assert.are.equal(1024 * 1024, cfg.max_event_bytes)
        assert.is_string(cfg.consumer)
        assert.is_string(cfg.state_dir)
    end)

    it("parses every REDIS_URL form", function()
        local cases = {
            ["redis://10.0.0.5:6380/2"] = { host = "10.0.0.5", port = 6380, db = 2 },
            ["redis://localhost"] = { host = "localhost", port = 6379, db = 0 },
            ["redis://alice:p%40ss@h:7000/1"] = { host = "h", port = 7000, db = 1, user = "alice", password = "p@ss" },
            ["redis://:secret@h:7000"] = { host = "h", port = 7000, db = 0, password = "secret" },
            ["unix:///run/redis.sock"] = { path = "/run/redis.sock", db = 0 },
            ["unix:///run/redis.sock?db=5"] = { path = "/run/redis.sock", db = 5 },
            ["unix://:s%40c@/run/redis.sock"] = { path = "/run/redis.sock", db = 0, password = "s@c" },
            ["unix://bob:pw@/run/redis.sock?db=3"] = {
                path = "/run/redis.sock", db = 3, user = "bob", password = "pw",
            },
            ["unix:///run/redis.sock?password=pw&db=2"] = { path = "/run/redis.sock", db = 2, password = "pw" },
            ["redis+sentinel://:pw@10.0.0.1:26380,10.0.0.2/mymaster/2"] = {
                sentinels = { { host = "10.0.0.1", port = 26380 }, { host = "10.0.0.2", port = 26379 } },
                master = "mymaster", db = 2, password = "pw",
            },
            ["redis+sentinel://s1:5000/m"] = { sentinels = { { host = "s1", port = 5000 } }, master = "m", db = 0 },
        }
        for url, want in pairs(cases) do
            assert.are.same(want, (config.parse_redis_url(url)), url)
        end
    end)

    it("rejects bad values naming the variable and the value", function()
        local cases = {
            { MAX_CONCURRENCY = "abc" }, { MAX_CONCURRENCY = "0" }, { MAX_CONCURRENCY = "2.5" },
            { REDIS_URL = "http://x" }, { REDIS_URL = "redis://h:99999" }, { REDIS_URL = "redis://h:1/x" },
            { REDIS_URL = "unix://relative.sock" }, { REDIS_URL = "unix:///s?database=1" },
            { REDIS_URL = "redis+sentinel://s1:1/" }, { REDIS_URL = "redis+sentinel://s1:99999/m" },
            { RELAY_RUNTIME = "lxc" }, { RELAY_LOG_LEVEL = "verbose" }, { RELAY_LOG_FORMAT = "xml" },
            { RELAY_RETENTION = "1 day" }, { RELAY_RETENTION = "-5m" }, { RELAY_MAX_EVENT_BYTES = "1Mb" },
            { RELAY_METRICS_ADDR = "9090" }, { RELAY_CONSUMER = "a:b" }, { REDIS_STREAM = "" },
        }
        for _, env in ipairs(cases) do
            local var, value = next(env)
            local cfg, err = config.load(env)
            assert.is_nil(cfg, var .. "=" .. value)
            assert.is_truthy(err:find(var .. "=" .. value, 1, true), err)
        end
    end)

    it("lets a flag override its variable and names the flag when bad", function()
        local cfg = assert(config.load({ MAX_CONCURRENCY = "2" }, { max_concurrency = "8", stream = "s2" }))
        assert.are.equal(8, cfg.max_concurrency)
        assert.are.equal("s2", cfg.stream)
        local bad, err = config.load({}, { max_concurrency = "lots" })
        assert.is_nil(bad)
        assert.matches("%-%-max%-concurrency=lots", err)
    end)

    it("masks the password wherever a Redis URL is shown", function()
        local cases = {
            ["redis://:s3cret@h:6379/0"] = "redis://:***@h:6379/0",
            ["redis://alice:s3cret@h:6379/0"] = "redis://alice:***@h:6379/0",
            ["unix://:s3cret@/run/r.sock"] = "unix://:***@/run/r.sock",
            ["unix:///run/r.sock?db=1&password=s3cret"] = "unix:///run/r.sock?db=1&password=***",
            ["redis://h:6379/0"] = "redis://h:6379/0",
            ["unix:///run/r.sock?db=1"] = "unix:///run/r.sock?db=1",
            ["redis+sentinel://u:s3cret@s1:1,s2:2/m"] = "redis+sentinel://u:***@s1:1,s2:2/m",
        }
        for url, want in pairs(cases) do
            assert.are.equal(want, config.mask_redis_url(url))
        end
        local cfg = assert(config.load({ REDIS_URL = "redis://:s3cret@h:7000" }))
        assert.are.equal("redis://:***@h:7000", cfg.redis_url_text)
        local _, err = config.load({ REDIS_URL = "redis://:s3cret@h:99999" })
        assert.are.equal("invalid REDIS_URL=redis://:***@h:99999: the port must be 1..65535", err)
    end)

    it("keeps REDIS_URL's text as given, or its default's, for messages", function()
        assert.are.equal("redis://127.0.0.1:6379/0", assert(config.load({})).redis_url_text)
        assert.are.equal("redis://h:7000", assert(config.load({ REDIS_URL = "redis://h:7000" })).redis_url_text)
        local cfg = assert(config.load({ REDIS_URL = "redis://h:7000" }, { redis_url = "unix:///s.sock" }))
        assert.are.equal("unix:///s.sock", cfg.redis_url_text)
        assert.are.same({ path = "/s.sock", db = 0 }, cfg.redis_url)
    end)

    it("names the consumer after this host by default", function()
        local name = config.hostname()
        assert.is_true(#name > 0)
        assert.are.equal(name, assert(config.load({})).consumer)
    end)

    it("accepts retention 0 (never trim) and sizes in bytes", function()
        local cfg = assert(config.load({ RELAY_RETENTION = "0", RELAY_MAX_EVENT_BYTES = "4096" }))
        assert.are.equal(0, cfg.retention_ms)
        assert.are.equal(4096, cfg.max_event_bytes)
        assert.are.equal(90 * 60 * 1000, assert(config.load({ RELAY_RETENTION = "1h30m" })).retention_ms)
    end)
end)
