-- yaml.load_app precompiles the common events entries in C (src/lua_yaml.c); every entry
-- it compiles must come out exactly as relay.pattern would compile it, and everything it
-- is unsure about must be left as a plain node for the Lua validator.
local yaml = require("relay.yaml")
local pattern = require("relay.pattern")
local apps = require("relay.apps")

local PATTERNS = {
    -- literals of every core-schema type
    '{a: [x]}', '{a: ["x"]}', "{a: ['it''s']}", '{a: [1]}', '{a: [-0]}', '{a: [0.1]}', '{a: [1e300]}',
    '{a: [123456789012345678]}', '{a: [9007199254740993]}', '{a: [2.5e-7]}', '{a: [-1.5]}',
    '{a: [0x1F]}', '{a: [0o17]}', '{a: [.5]}', '{a: [1.]}', '{a: [null]}', '{a: [~]}', '{a: [true]}',
    '{a: [False]}', '{a: [yes]}', '{a: [!!str 1]}', '{a: ["tab\\there"]}', '{a: ["q\\"b\\\\s"]}',
    '{a: ["\\x7f\\x01\\u00e9"]}', '{a: ["é ü"]}', '{a: [""]}', '{"": [x]}', '{"k\\"ey": [x]}',
    '{1: [x]}', '{true: [x]}', '{a: [x, 1, null, {prefix: p}]}',
    -- operators
    '{a: [{prefix: ab}]}', '{a: [{suffix: "z"}]}', '{a: [{exists: true}]}', '{a: [{exists: false}]}',
    '{a: [{gt: 0}]}', '{a: [{gte: -2.5}]}', '{a: [{lt: 1e3}]}', '{a: [{lte: 0x10}]}',
    '{a: [{"prefix": x}]}', '{a: [{gt: "now()-5m"}]}', '{a: [{lt: now()}]}',
    -- nested groups and the map-as-one-element-list shorthand
    '{a: {b: [x]}}', '{a: [{b: [x], c: [{exists: false}]}]}', '{a: {b: {c: {d: [1]}}}}',
    '{a: [x], b: [y], c: {d: [z]}}',
    -- errors the Lua validator must report
    '{a: x}', '{a: []}', '{a: null}', '{a: [[x]]}', '{a: [{}]}', '{a: [{prefix: 1}]}',
    '{a: [{prefix: null}]}', '{a: [{exists: yes}]}', '{a: [{gt: .inf}]}', '{a: [-.inf]}',
    '{a: [{gt: "2020-01-01"}]}', '{a: [{prefx: a}]}', '{a: [{eq: 1}]}', '{a: [{foo: 1}]}',
    '{a: [{prefix: a, suffix: b}]}', '{a: [{prefix: [a, b]}]}', '{a: [{b: [x], prefix: y}]}',
    '{numeric: [1]}', '{a: [{anything-but: x}]}', '{a: [{b: [x], cidr: [y]}]}', '{prefix: [x]}',
    '{"1": [x], 1: [y]}', '{}', '[a]', 'x', 'null',
}

local ENTRIES = {
    "handler: h\n    pattern: %s",
    "pattern: %s\n    handler: h",
    "handler: h\n    pattern: %s\n    timeout: 5s\n    retries: 2",
    "handler: \"h.x-1_y\"\n    pattern: %s",
    "handler: 1\n    pattern: %s",
    "handler: a b\n    pattern: %s",
    "handler: h\n    pattern: %s\n    other: 1",
}


--- apps.validate as it is without the C fast path.
local function validate_slow(text)
    local saved = yaml.load_app
    yaml.load_app = yaml.load
    local ok, app = pcall(apps.validate, text, "t.yaml", "x", "/x")
    yaml.load_app = saved
    assert(ok, app)
    return app
end


local function template(entry, p)
    return "runtime: {image: host}\nevents:\n  - " .. string.format(entry, p) .. "\n"
end


describe("yaml.load_app", function()
    it("compiles exactly what relay.pattern compiles, and only valid entries", function()
        local fast = 0
        for _, entry in ipairs(ENTRIES) do
            for _, p in ipairs(PATTERNS) do
                local text = template(entry, p)
                local plain = assert(yaml.load(text))
                local app_root = assert(yaml.load_app(text))
                local node = plain.values[2].items[1]
                local got = app_root.values[2].items[1]
                if got.kind == "event" then
                    fast = fast + 1
                    local pnode
                    for i, key in ipairs(node.keys) do
                        if key.text == "pattern" then
                            pnode = node.values[i]
                        end
                    end
                    local want, err = pattern.compile(pnode, "t")
                    assert.is_nil(err, text)
                    assert.are.equal(want, got.pattern_json, text)
                    assert.are.same({ node.line, node.col }, { got.line, got.col })
                else
                    assert.are.same(node, got, text)
                end
                -- Whole-template validation agrees with the plain-tree path either way.
                assert.are.same(validate_slow(text), apps.validate(text, "t.yaml", "x", "/x"), text)
            end
        end
        assert.is_true(fast > 100, "the fast path was taken " .. fast .. " times")
    end)

    it("reports a duplicate handler at the second one, fast or not", function()
        local text = "events:\n  - handler: h\n    pattern: {a: [1]}\n  - handler: h\n    pattern: {a: x}\n"
            .. "  - handler: h\n    pattern: {a: [2]}\n"
        local app = apps.validate(text, "t.yaml", "x", "/x")
        assert.are.same(validate_slow(text), app)
        assert.are.equal('t.yaml:4:14: duplicate event handler "h" (first at 2:14); handler names are '
            .. "unique within an app", app.errors[1])
        assert.matches('^t.yaml:6:14: duplicate event handler "h"', app.errors[2])
        text = "events:\n  - handler: h\n    pattern: {a: x}\n  - handler: h\n    pattern: {a: [1]}\n"
        app = apps.validate(text, "t.yaml", "x", "/x")
        assert.are.same({ "t.yaml:3:18: a: a field condition must be a list; write [x]",
            't.yaml:4:14: duplicate event handler "h" (first at 2:14); handler names are unique within an app' },
            app.errors)
        text = "events:\n  - handler: h\n    pattern: {a: {b: [1]}}\n  - handler: h\n    pattern: {a: [1]}\n"
        app = apps.validate(text, "t.yaml", "x", "/x")
        assert.are.equal('t.yaml:4:14: duplicate event handler "h" (first at 2:14); handler names are '
            .. "unique within an app", app.errors[#app.errors])
    end)

    it("keeps timeout and retries checks", function()
        local app = apps.validate("events:\n  - handler: h\n    pattern: {a: [1]}\n    timeout: 20\n",
            "t.yaml", "x", "/x")
        assert.are.equal("t.yaml:4:14: events[1].timeout must be a duration like 20s, 5m or 1h30m, "
            .. "not the number 20; write 20s for seconds", app.error)
        app = apps.validate("events:\n  - handler: h\n    pattern: {a: [1]}\n    timeout: 5s\n    retries: 3\n",
            "t.yaml", "x", "/x")
        assert.are.same({ { handler = "h", pattern_json = '{"a":[{"eq":1}]}', line = 2, col = 5,
            timeout_ms = 5000, retries = 3 } }, app.events)
    end)

    it("agrees with relay.pattern on every benchmark rule", function()
        local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$")
        local dir = here .. "/../../tests/bench/patterns"
        for _, name in ipairs({ "cl2-exact", "cl2-prefix", "cl2-suffix", "ours-subset",
            "ours-subset-plus-coords", "q-benchmark-citylots", "many-mixed-1k" }) do
            local fh = assert(io.open(dir .. "/" .. name .. "/bench/template.yaml", "rb"))
            local text = fh:read("*a")
            fh:close()
            local plain = assert(yaml.load(text))
            local fast = assert(yaml.load_app(text))
            local events
            for i, key in ipairs(plain.keys) do
                if key.text == "events" then
                    events = i
                end
            end
            for i, node in ipairs(plain.values[events].items) do
                local got = fast.values[events].items[i]
                local pnode
                for j, key in ipairs(node.keys) do
                    if key.text == "pattern" then
                        pnode = node.values[j]
                    end
                end
                assert.are.equal("event", got.kind, name .. " entry " .. i)
                assert.are.equal(pattern.compile(pnode, "t"), got.pattern_json, name .. " entry " .. i)
            end
        end
    end)
end)


describe("yaml.load_app's bulk form (a rule block per events list)", function()
    local function ordinary(text)
        return apps.validate(text, "t.yaml", "x", "/x")
    end

    local function bulk(text)
        return apps.validate(text, "t.yaml", "x", "/x", { bulk = true })
    end

    --- A rule block as the ordinary load's events list.
    local function as_events(rules)
        local out = {}
        for i = 1, #rules do
            local line, col = rules:mark(i)
            out[i] = { handler = rules:handler(i), pattern_json = rules:pattern(i), line = line, col = col,
                timeout_ms = apps.DEFAULT_TIMEOUT_MS, retries = apps.DEFAULT_RETRIES }
        end
        return out
    end

    --- The bulk load of text: the ordinary load's app, its rules a block or not.
    local function check_agrees(text)
        local want, got = ordinary(text), bulk(text)
        local rules = got.rules
        if rules then
            assert.are.same(want.events, as_events(rules), text)
            assert.is_nil(got.events, text)
            got.rules, got.events = nil, want.events
        end
        assert.are.same(want, got, text)
        return rules
    end

    it("gives the ordinary load's rules, or leaves the list to the ordinary load", function()
        local blocks = 0
        for _, entry in ipairs(ENTRIES) do
            for _, p in ipairs(PATTERNS) do
                local text = template(entry, p) .. "  - handler: second\n    pattern: {b: [1]}\n"
                if check_agrees(text) then
                    blocks = blocks + 1
                end
            end
        end
        assert.is_true(blocks > 50, "a block was made " .. blocks .. " times")
    end)

    it("leaves duplicate handlers, timeout, retries and an empty list to the ordinary load", function()
        local one = "  - handler: h\n    pattern: {a: [1]}\n"
        local base = "runtime: {image: host}\nevents:\n"
        assert.is_not_nil(check_agrees(base .. one))
        for _, text in ipairs({
            base .. one .. one,
            base .. one .. "    timeout: 5s\n",
            base .. one .. "    retries: 0\n",
            base .. one .. "  - handler: g\n    pattern: {a: [1]}\n    timeout: 20\n",
            base .. "  []\n",
        }) do
            assert.is_nil(check_agrees(text), text)
        end
        local dup = bulk(base .. one .. one)
        assert.are.equal('t.yaml:5:14: duplicate event handler "h" (first at 3:14); handler names are '
            .. "unique within an app", dup.error)
        assert.is_nil(dup.rules)
    end)

    it("drops the block of an app that is invalid for another reason", function()
        local app = bulk("runtime: {image: host, memory: 1}\nevents:\n  - handler: h\n    pattern: {a: [1]}\n")
        assert.are.equal("invalid", app.state)
        assert.is_nil(app.rules)
        assert.are.same({}, app.events)
    end)

    it("holds every benchmark rule as the ordinary load does", function()
        local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$")
        for _, name in ipairs({ "cl2-prefix", "ours-subset", "many-mixed-1k", "many-exact-10k" }) do
            local path = here .. "/../../tests/bench/patterns/" .. name .. "/bench/template.yaml"
            local fh = assert(io.open(path, "rb"))
            local rules = check_agrees(fh:read("*a"))
            fh:close()
            assert.is_not_nil(rules, name)
        end
    end)

    it("numbers its rules from 1 and refuses others", function()
        local rules = bulk("events:\n  - handler: h\n    pattern: {a: [1]}\n").rules
        assert.are.equal(1, #rules)
        assert.are.equal("h", rules:handler(1))
        assert.are.same({ 2, 5 }, { rules:mark(1) })
        assert.has_error(function() rules:handler(0) end)
        assert.has_error(function() rules:handler(1.5) end)
        assert.has_error(function() rules:pattern(2) end)
        assert.has_error(function() rules.mark({}, 1) end)
    end)
end)
