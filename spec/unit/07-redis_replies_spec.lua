-- How Relay reads Redis's refusals and redirections: the advice given with
-- an error reply, the hash tag a Cluster needs, MOVED/ASK/TRYAGAIN.
local cluster = require("relay.redis_cluster")
local refusal = require("relay.redis_refusal")

describe("redis error replies", function()
    it("tell what refused and the setting that fixes it", function()
        assert.are.equal("redis refused: NOAUTH Authentication required.; put the password in REDIS_URL",
            refusal.describe("NOAUTH Authentication required."))
        assert.are.equal("redis refused: WRONGTYPE Operation against a key holding the wrong kind of value; "
            .. "REDIS_STREAM names a key that is not a stream",
            refusal.describe("WRONGTYPE Operation against a key holding the wrong kind of value"))
        assert.are.equal("redis refused: ERR something else", refusal.describe("ERR something else"))
    end)

    it("find the hash tag of a stream name as Redis Cluster does", function()
        local cases = { ["{orders}"] = "orders", ["app:{orders}:v2"] = "orders", ["a{b}{c}"] = "b" }
        for stream, tag in pairs(cases) do
            assert.are.equal(tag, cluster.hash_tag(stream), stream)
        end
        for _, stream in ipairs({ "orders", "{}orders", "orders{", "orders}" }) do
            assert.is_nil(cluster.hash_tag(stream), stream)
        end
    end)

    it("read MOVED, ASK and TRYAGAIN, nothing else", function()
        local code, node = cluster.redirection("MOVED 105 127.0.0.1:7000")
        assert.are.same({ "MOVED", { host = "127.0.0.1", port = 7000 } }, { code, node })
        code, node = cluster.redirection("ASK 3999 ::1:7001")
        assert.are.same({ "ASK", { host = "::1", port = 7001 } }, { code, node })
        assert.are.equal("TRYAGAIN", (cluster.redirection("TRYAGAIN Multiple keys request during rehashing of slot")))
        assert.is_nil(cluster.redirection("CROSSSLOT Keys in request don't hash to the same slot"))
    end)
end)
