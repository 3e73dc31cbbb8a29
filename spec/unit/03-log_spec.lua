-- relay.log: text and JSON records on stderr (relay.md section 7), checked
-- through a real relay process so that the C sink is what writes them.
local cjson = require("cjson")
local cli = require("helpers.cli")

local SCRIPT = [[
local log = require("relay.log")
log.configure(arg[1], arg[2])
log.debug("debug line", { n = 1 })
log.info("hello world", { app = "users", count = 3, text = "two words", ok = true })
log.warn("careful")
log.error("bad \"quote\"", { bytes = "caf\195\169 \255" })
log.handler_line({ app = "users", handler = "created", message_id = "1-0", attempt = 2 }, "stdout", "raw \255 line")
]]

local function run(level, format)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(SCRIPT)
    f:close()
    local r = cli.run({ "x-lua", path, level, format })
    os.remove(path)
    assert.are.equal(0, r.code, r.stderr)
    local lines = {}
    for l in r.stderr:gmatch("[^\n]+") do
        lines[#lines + 1] = l
    end
    return lines
end

describe("log", function()
    it("writes text lines with a UTC timestamp, a padded level and key=value fields", function()
        local lines = run("info", "text")
        assert.are.equal(4, #lines)
        assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ INFO  hello world ", lines[1])
        assert.matches(' app=users count=3 ok=true text="two words"$', lines[1])
        assert.matches("Z WARN  careful$", lines[2])
        assert.matches("Z ERROR bad \"quote\" bytes=", lines[3])
        -- handler output: the prefix and the line's bytes as written, at every level
        assert.are.equal("[users/created 1-0#2] raw \255 line", lines[4])
    end)

    it("filters by level but always writes handler output", function()
        local lines = run("error", "text")
        assert.are.equal(2, #lines)
        assert.matches("ERROR bad", lines[1])
        assert.matches("^%[users/created 1%-0#2%] ", lines[2])
        assert.are.equal(5, #run("debug", "text"))
    end)

    it("writes one valid JSON object per line, invalid UTF-8 replaced", function()
        local lines = run("info", "json")
        assert.are.equal(4, #lines)
        local records = {}
        for i, l in ipairs(lines) do
            records[i] = cjson.decode(l)
            assert.matches("^%d%d%d%d%-%d%d%-%d%dT[%d:.]+Z$", records[i].ts)
        end
        assert.are.same({ "info", "warn", "error", "info" },
            { records[1].level, records[2].level, records[3].level, records[4].level })
        assert.are.equal("hello world", records[1].msg)
        assert.are.equal(3, records[1].count)
        assert.are.equal(true, records[1].ok)
        assert.are.equal('bad "quote"', records[3].msg)
        assert.are.equal("caf\195\169 \239\191\189", records[3].bytes)
        local h = records[4]
        assert.are.same({ "users", "created", "1-0", 2, "stdout", "raw \239\191\189 line" },
            { h.app, h.handler, h.message_id, h.attempt, h.stream, h.line })
    end)
end)
