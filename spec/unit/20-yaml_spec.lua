-- relay.core.yaml and relay.yaml: node trees with marks, the YAML 1.2 core schema, strict
-- document rules, and the JSON encoding of YAML values.
local core = require("relay.core.yaml")
local yaml = require("relay.yaml")
local cjson = require("cjson")


local function value_of(text)
    local root = assert(yaml.load(text, "t.yaml"))
    assert.are.equal("scalar", root.kind)
    return root.value, root
end


describe("relay.core.yaml", function()
    it("builds maps with ordered keys, values and 1-based marks", function()
        local root = assert(core.load("zeta: 1\nalpha:\n  - x\n  - {k: v}\n"))
        assert.are.equal("map", root.kind)
        assert.are.same({ 1, 1 }, { root.line, root.col })
        assert.are.equal(2, #root.keys)
        assert.are.equal("zeta", root.keys[1].value)
        assert.are.equal("alpha", root.keys[2].value)
        assert.are.same({ 1, 7 }, { root.values[1].line, root.values[1].col })
        local seq = root.values[2]
        assert.are.equal("seq", seq.kind)
        assert.are.same({ 3, 3 }, { seq.line, seq.col })
        assert.are.equal("x", seq.items[1].value)
        assert.are.same({ 3, 5 }, { seq.items[1].line, seq.items[1].col })
        local flow = seq.items[2]
        assert.are.equal("map", flow.kind)
        assert.are.same({ 4, 5 }, { flow.line, flow.col })
        assert.are.same({ 4, 6 }, { flow.keys[1].line, flow.keys[1].col })
    end)

    it("keeps the raw text and whether a scalar was quoted", function()
        local root = assert(core.load("a: 0x10\nb: '0x10'\nc: |\n  text\n"))
        assert.are.equal(16, root.values[1].value)
        assert.are.equal("0x10", root.values[1].text)
        assert.is_false(root.values[1].quoted)
        assert.are.equal("0x10", root.values[2].value)
        assert.is_true(root.values[2].quoted)
        assert.are.equal("text\n", root.values[3].value)
        assert.is_true(root.values[3].quoted)
    end)

    it("resolves scalars by the YAML 1.2 core schema", function()
        for _, text in ipairs({ "null", "Null", "NULL", "~", "" }) do
            assert.are.equal(cjson.null, (value_of(text)), text)
        end
        assert.are.equal(yaml.null, cjson.null)
        for text, want in pairs({ ["true"] = true, True = true, TRUE = true, ["false"] = false,
            False = false, FALSE = false }) do
            assert.are.equal(want, (value_of(text)), text)
        end
        for text, want in pairs({ ["0"] = 0, ["-17"] = -17, ["+17"] = 17, ["0o17"] = 15, ["0x1F"] = 31,
            ["017"] = 17, ["1.5"] = 1.5, ["-.5"] = -0.5, ["1e3"] = 1000, ["2.5E-1"] = 0.25,
            [".inf"] = math.huge, ["-.Inf"] = -math.huge, ["+.INF"] = math.huge }) do
            assert.are.equal(want, (value_of(text)), text)
        end
        local nan = value_of(".nan")
        assert.is_true(nan ~= nan)
        -- YAML 1.1 booleans and other look-alikes are strings in 1.2.
        for _, text in ipairs({ "yes", "no", "on", "off", "ON", "y", "n", "tRUE", "nULL", "1_000",
            "0o8", "0b101", "1e", ".", "-.nan", "2026-09-12T10:00:00Z", "12:30" }) do
            assert.are.equal(text, (value_of(text)), text)
        end
        -- Quoted and !!str scalars are always strings.
        assert.are.equal("12", (value_of('"12"')))
        assert.are.equal("true", (value_of("'true'")))
        assert.are.equal("null", (value_of('"null"')))
        assert.are.equal("12", (value_of("!!str 12")))
        assert.are.equal("", (value_of("''")))
    end)

    it("returns a null scalar for an empty document", function()
        for _, text in ipairs({ "", "# just a comment\n" }) do
            local root = assert(core.load(text))
            assert.are.equal("scalar", root.kind)
            assert.are.equal(core.null, root.value)
            assert.are.same({ 1, 1 }, { root.line, root.col })
        end
        assert.are.equal(core.null, assert(core.load("---\n...\n")).value)
    end)

    it("rejects what templates must never contain, with line:col", function()
        local cases = {
            { "a: 1\nb: 2\na: 3\n", '3:1: duplicate key "a" (first at 1:1)' },
            { "a: 1\n'a': 2\n", '2:1: duplicate key "a" (first at 1:1)' },
            { "16: a\n0x10: b\n", '2:1: duplicate key "0x10" (first at 1:1)' },
            { "a: &x [1]\nb: *x\n", "2:4: YAML aliases (*x) are not supported; write the value out" },
            { "a: 1\n---\nb: 2\n", "2:1: only one YAML document is allowed per file" },
            { "a: !!int 1\n", "1:4: YAML tag tag:yaml.org,2002:int is not supported (only !!str is); "
                .. "remove the tag" },
            { "a: !custom x\n", "1:4: YAML tag !custom is not supported (only !!str is); remove the tag" },
            { "a: !!set {}\n", "1:4: YAML tag tag:yaml.org,2002:set is not supported on a mapping; "
                .. "remove the tag" },
            { "? [a]\n: b\n", "1:3: mapping keys must be scalars" },
            { string.rep("[", 65), "1:65: nesting deeper than 64 levels" },
        }
        for _, case in ipairs(cases) do
            local root, err = core.load(case[1])
            assert.is_nil(root, case[1])
            assert.are.equal(case[2], err)
        end
        -- "true" and true are different keys; 1 and "1" too (typed).
        assert.is_table(core.load("true: 1\n'true': 2\n1: a\n'1': b\n"))
    end)

    it("reports syntax errors and bad UTF-8 with their position", function()
        local _, err = core.load("a: [1, 2\nb: 3\n")
        assert.matches("^%d+:%d+: ", err)
        _, err = core.load("a: x\n  b: y\n")
        assert.matches("^2:4: mapping values are not allowed", err)
        _, err = core.load("ok: 1\nbad: \255\n")
        assert.matches("^2:6: .*UTF%-8", err)
        _, err = core.load("a: \"\0\"\n")
        assert.matches("^1:%d+: ", err)
    end)

    it("names a tab used for indentation, and still takes tabs between tokens", function()
        local _, err = core.load("runtime:\n\tcommand: [run]\n")
        assert.are.equal("2:1: tabs are not allowed for indentation; indent with spaces", err)
        _, err = core.load("events:\n  - handler: a\n    pattern:\n\t  t: [x]\n")
        assert.are.equal("4:1: tabs are not allowed for indentation; indent with spaces", err)
        assert.is_table(core.load("a: 1\t# a comment\nb:\t2\n"))
    end)

    it("allows nesting up to the bound", function()
        local text = string.rep("[", 64) .. string.rep("]", 64)
        assert.is_table(core.load(text))
        assert.are.equal(64, core.MAX_DEPTH)
    end)

    it("ignores anchors that are never aliased", function()
        local root = assert(core.load("a: &anchor {b: 1}\n"))
        assert.are.equal("map", root.values[1].kind)
    end)
end)


describe("relay.yaml", function()
    it("prefixes parse errors with the file name", function()
        local root, err = yaml.load("a: 1\na: 2\n", "apps/x/template.yaml")
        assert.is_nil(root)
        assert.are.equal('apps/x/template.yaml:2:1: duplicate key "a" (first at 1:1)', err)
        root, err = yaml.load_file("/nonexistent/template.yaml")
        assert.is_nil(root)
        assert.matches("^/nonexistent/template.yaml: cannot read: ", err)
    end)

    it("encodes numbers with full precision and integers exactly", function()
        assert.are.equal("70", yaml.json_number(70))
        assert.are.equal("-3", yaml.json_number(-3))
        assert.are.equal("0.1", yaml.json_number(0.1))
        assert.are.equal("0.3333333333333333", yaml.json_number(1 / 3))
        assert.are.equal("9007199254740992", yaml.json_number(2 ^ 53))
        assert.are.equal("1e+300", yaml.json_number(1e300))
        assert.are.equal(1 / 3, tonumber(yaml.json_number(1 / 3)))
        assert.are.equal(123456.789e-5, tonumber(yaml.json_number(123456.789e-5)))
        assert.is_nil(yaml.json_number(0 / 0))
        assert.is_nil(yaml.json_number(math.huge))
    end)

    it("escapes JSON strings", function()
        assert.are.equal([["a\"b\\c\n\t\u0001é"]], yaml.json_string('a"b\\c\n\t\1é'))
    end)

    it("converts nodes to JSON keeping order and the map/list distinction", function()
        local root = assert(yaml.load('{z: [1, 2.5, null, "x", true], a: {}, b: [], c: "0x10", d: 0x10}'))
        assert.are.equal('{"z":[1,2.5,null,"x",true],"a":{},"b":[],"c":"0x10","d":16}', yaml.to_json(root))
        local text, err, bad = yaml.to_json(assert(yaml.load("a: [1, .inf]")))
        assert.is_nil(text)
        assert.matches("infinite", err)
        assert.are.same({ 1, 8 }, { bad.line, bad.col })
        text, err = yaml.to_json(assert(yaml.load("1: a\n'1': b\n")))
        assert.is_nil(text)
        assert.matches('duplicate key "1"', err)
    end)

    it("converts nodes to plain Lua values", function()
        local root = assert(yaml.load("a: [1, ~, x]\nb: {c: true}\n"))
        assert.are.same({ a = { 1, yaml.null, "x" }, b = { c = true } }, yaml.to_plain(root))
    end)

    it("renders nodes back as flow YAML for hints", function()
        local root = assert(yaml.load('a: [COMPLETED, "two words", "x:y", 5]'))
        assert.are.equal('{a: [COMPLETED, "two words", "x:y", 5]}', yaml.render(root))
    end)
end)
