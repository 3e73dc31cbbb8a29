-- Every userdata class of the C bindings (src/lua_*.c) prints as what it is: a
-- metatable named relay.* in the registry without __tostring fails here.
local CORE_MODULES = {
    "relay.core.loop", "relay.core.log", "relay.core.redis", "relay.core.build", "relay.core.matcher",
    "relay.core.yaml", "relay.core.proc", "relay.core.http", "relay.core.udp", "relay.core.seccomp",
    "relay.core.safefs",
}


describe("userdata classes", function()
    it("all have __tostring", function()
        for _, name in ipairs(CORE_MODULES) do
            require(name)
        end
        local classes = {}
        for key, value in pairs(debug.getregistry()) do
            if type(key) == "string" and key:find("^relay%.") and type(value) == "table" then
                classes[#classes + 1] = key
                assert.is_function(rawget(value, "__tostring"), key .. " has no __tostring")
            end
        end
        table.sort(classes)
        assert.are.same({
            "relay.core.http.server", "relay.core.matcher", "relay.core.proc.handle", "relay.core.udp.socket",
            "relay.core.yaml.rules", "relay.core.yaml.tree", "relay.redis.async", "relay.redis.stream_batch",
            "relay.redis.sync",
        }, classes)
    end)

    it("say what state the object is in", function()
        local m = require("relay.core.matcher").new()
        assert.are.equal("relay.core.matcher (0 rules)", tostring(m))
        m:add('{"a":[{"eq":1}]}')
        assert.are.equal("relay.core.matcher (1 rule)", tostring(m))

        local rules = require("relay.yaml").load_app("events:\n  - handler: h\n    pattern: {a: [1]}\n",
            "t.yaml", true).values[1].rules
        assert.are.equal("relay.core.yaml.rules (1 rule)", tostring(rules))

        local sock = assert(require("relay.core.udp").open("127.0.0.1", 9))
        assert.are.equal("relay.core.udp.socket (sent 0, dropped 0)", tostring(sock))
        sock:close()
        assert.are.equal("relay.core.udp.socket (closed)", tostring(sock))

        local server = assert(require("relay.core.http").listen("127.0.0.1", 0, function()
            return 200, "text/plain", ""
        end))
        assert.are.equal("relay.core.http.server (port " .. server:port() .. ")", tostring(server))
        server:close()
        assert.are.equal("relay.core.http.server (closed)", tostring(server))
    end)
end)
