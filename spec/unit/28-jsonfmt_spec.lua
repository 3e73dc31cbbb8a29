-- relay.jsonfmt: the CLI's JSON output.
local cjson = require("cjson")
local jsonfmt = require("relay.jsonfmt")

describe("jsonfmt", function()
    it("encodes the named empty tables as lists, leaving the object as it was", function()
        local object = { a = {}, b = { "x" }, c = {}, n = 1 }
        local text = jsonfmt.encode(object, { "a", "b" })
        assert.matches('"a":%[%]', text)
        assert.matches('"b":%["x"%]', text)
        assert.matches('"c":{}', text)
        assert.are.same({ a = {}, b = { "x" }, c = {}, n = 1 }, object)
        assert.are.equal(1, cjson.decode(text).n)
    end)

    it("pretty-prints JSON as written, and returns other text as it is", function()
        assert.are.equal('> {\n>   "a": 1.50,\n>   "b": []\n> }', jsonfmt.pretty('{"a":1.50,"b":[]}', "> "))
        assert.are.equal("> not json", jsonfmt.pretty("not json", "> "))
    end)
end)
