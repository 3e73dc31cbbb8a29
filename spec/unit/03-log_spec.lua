-- relay.log: text and JSON records on stderr, checked
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

-- Control bytes in a field, a message and a handler line; a backslash and
-- a quote in a field; TAB, which stays as it is.
local ESCAPES = [==[
local log = require("relay.log")
log.configure("info", arg[2])
local nasty = "a\rb\27[2Jc\0d\ne\127f"
log.info("field", { v = nasty })
log.info("msg " .. nasty)
log.info("quoting", { path = [[C:\dir\x1b]] .. "\"", plain = "x\27y", tab = "1\t2" })
log.handler_line({ app = "a", handler = "h", message_id = "1-0", attempt = 1 }, "stderr",
    "\r2026-01-01T00:00:00.000Z ERROR forged\nsecond")
]==]

local function run(level, format, script)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(script or SCRIPT)
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
        -- handler output: a timestamp, the prefix and the line's bytes, at every level
        assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ INFO  %[users/created 1%-0#2%] ", lines[4])
        assert.are.equal("[users/created 1-0#2] raw \255 line", lines[4]:match("Z INFO  (.*)$"))
    end)

    it("keeps each text record on one line: control bytes become \\xNN", function()
        local lines = run("info", "text", ESCAPES)
        assert.are.equal(4, #lines)
        local stamp = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ INFO  "
        for _, l in ipairs(lines) do
            assert.matches(stamp, l)
        end
        assert.are.equal([[field v="a\x0db\x1b[2Jc\x00d\x0ae\x7ff"]], lines[1]:match("Z INFO  (.*)$"))
        assert.are.equal([[msg a\x0db\x1b[2Jc\x00d\x0ae\x7ff]], lines[2]:match("Z INFO  (.*)$"))
        -- quoted values escape \ and ", so a \xNN inside came from the sink
        assert.are.equal([[quoting path="C:\\dir\\x1b\"" plain=x\x1by tab="1]] .. "\t" .. [[2"]],
            lines[3]:match("Z INFO  (.*)$"))
        assert.are.equal([[[a/h 1-0#1] \x0d2026-01-01T00:00:00.000Z ERROR forged\x0asecond]],
            lines[4]:match("Z INFO  (.*)$"))
    end)

    it("escapes NUL, ESC and newlines in JSON records too", function()
        local lines = run("info", "json", ESCAPES)
        assert.are.equal(4, #lines)
        -- DEL stays a raw byte: JSON allows it, and it cannot end a line
        assert.matches([["v":"a\u000db\u001b[2Jc\u0000d\u000ae]] .. "\127" .. [[f"]], lines[1], 1, true)
        assert.matches([["msg":"msg a\u000db\u001b[2Jc\u0000d\u000ae]] .. "\127" .. [[f"]], lines[2], 1, true)
        assert.are.equal("a\rb\27[2Jc\0d\ne\127f", cjson.decode(lines[1]).v)
        assert.are.equal("\r2026-01-01T00:00:00.000Z ERROR forged\nsecond", cjson.decode(lines[4]).line)
    end)

    it("filters by level but always writes handler output", function()
        local lines = run("error", "text")
        assert.are.equal(2, #lines)
        assert.matches("ERROR bad", lines[1])
        assert.matches("Z INFO  %[users/created 1%-0#2%] ", lines[2])
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
