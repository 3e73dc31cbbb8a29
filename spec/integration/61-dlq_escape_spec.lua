-- `relay dlq inspect` cannot be made to forge lines or drive the terminal:
-- a dead letter written straight into the DLQ stream, with control bytes
-- in its fields, is shown with them as \xNN; --json stays valid JSON.
local cjson = require("cjson")
local cli = require("helpers.cli")
local redis_server = require("helpers.redis")
local core_redis = require("relay.core.redis")

local DLQ = "relay:events:dlq"


local function lines(text)
    local out = {}
    for l in text:gmatch("([^\n]*)\n") do
        out[#out + 1] = l
    end
    return out
end


--- The one line of lines that starts with prefix (fails unless exactly one).
local function only_line(all, prefix)
    local found = {}
    for _, l in ipairs(all) do
        if l:sub(1, #prefix) == prefix then
            found[#found + 1] = l
        end
    end
    assert.are.equal(1, #found, prefix)
    return found[1]
end


describe("relay dlq inspect escaping", function()
    local server, client, env

    before_each(function()
        server = redis_server.start()
        client = assert(core_redis.connect_blocking({ path = server.sock, db = 0 }, 2))
        env = { REDIS_URL = server.url }
    end)

    after_each(function()
        client:close()
        server:stop()
    end)

    local function add(fields)
        local argv = { "XADD", DLQ, "*" }
        for _, kv in ipairs(fields) do
            argv[#argv + 1] = kv[1]
            argv[#argv + 1] = kv[2]
        end
        return assert(client:call(unpack(argv)))
    end

    it("shows control bytes of every field as \\xNN, one field per line", function()
        local id = add({
            { "original_stream", "events" }, { "original_id", "1-0" }, { "app", "a" }, { "handler", "h" },
            { "reason", "exit status 1\nhandler_attempts: 99" }, { "handler_attempts", "1" },
            { "event", "not json\r\nreason: forged\27]0;title\7" },
            { "output", "\r\27[31mFAKE\0" },
            { "note\nx", "tab\tstays" },
        })
        local r = cli.run({ "dlq", "inspect", id }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.is_nil(r.stdout:find("[%z\1-\8\11-\31\127]"), "no raw control byte but TAB and newline")
        local out = lines(r.stdout)
        assert.are.equal("reason: exit status 1\\x0ahandler_attempts: 99", only_line(out, "reason:"))
        assert.are.equal("handler_attempts: 1", only_line(out, "handler_attempts:"))
        assert.are.equal("note\\x0ax: tab\tstays", only_line(out, "note"))
        -- the event is not JSON: shown as it is, escaped, on one indented line
        local event_at
        for i, l in ipairs(out) do
            if l == "event:" then event_at = i end
        end
        assert.are.equal("  not json\\x0d\\x0areason: forged\\x1b]0;title\\x07", out[event_at + 1])
        assert.are.equal("output:", out[event_at + 2])
        assert.are.equal("  \\x0d\\x1b[31mFAKE\\x00", out[event_at + 3])
        assert.are.equal(event_at + 3, #out)
    end)

    it("pretty-prints a JSON event and keeps each output line on its own indented line", function()
        local id = add({
            { "app", "a" }, { "handler", "h" }, { "reason", "exit status 1" },
            { "event", '{"t":"x\\u001b","n":[1,2]}' },
            { "output", "first\rline\nsecond\27[2J" },
        })
        local r = cli.run({ "dlq", "inspect", id }, env)
        assert.are.equal(0, r.code, r.stderr)
        local block = r.stdout:match("\nevent:\n(.*)$")
        assert.are.equal(table.concat({
            "  {",
            '    "t": "x\\u001b",',
            '    "n": [',
            "      1,",
            "      2",
            "    ]",
            "  }",
            "output:",
            "  first\\x0dline",
            "  second\\x1b[2J",
            "",
        }, "\n"), block)
    end)

    it("--json is one valid JSON object with the exact bytes of valid UTF-8", function()
        local id = add({
            { "app", "a" }, { "handler", "h" }, { "output", "\r\27[31mFAKE\0" },
            { "event", "{\"a\":1}\n" }, { "cut", "caf\195" },
        })
        local r = cli.run({ "dlq", "inspect", "--json", id }, env)
        assert.are.equal(0, r.code, r.stderr)
        local out = lines(r.stdout)
        assert.are.equal(1, #out)
        assert.is_nil(out[1]:find("[%z\1-\31\127]"))
        local record = cjson.decode(out[1])
        assert.are.same({ id = id, app = "a", handler = "h", output = "\r\27[31mFAKE\0", event = { a = 1 },
            cut = "caf\239\191\189" }, record)
    end)
end)
