-- Pattern conformance: every rule of docs/patterns.md, through the real validator
-- (relay.pattern) and the real C matcher (relay.core.matcher).
local yaml = require("relay.yaml")
local pattern = require("relay.pattern")
local matcher = require("relay.core.matcher")

local NOW = 1789207200000 -- 2026-09-12T10:00:00Z
local MAX = 1024 * 1024


local function compile(text)
    local root = assert(yaml.load(text, "p.yaml"))
    return pattern.compile(root, "p.yaml")
end


--- Assert how one pattern treats a list of events: { {event_json, true|false}, ... }.
local function check(text, cases, now_ms)
    local json, err = compile(text)
    assert(json, err)
    local m = matcher.new()
    assert.are.equal(0, m:add(json))
    for _, case in ipairs(cases) do
        local ids, reason = m:match(case[1], MAX, now_ms or NOW)
        assert(ids, reason)
        assert.are.equal(case[2], #ids == 1,
            string.format("pattern %q on event %s", text, case[1]))
    end
end


local function rejects(text, want)
    local json, err = compile(text)
    assert.is_nil(json, text)
    assert.are.equal(want, err)
end


describe("pattern syntax", function()
    it("a field's condition is an ordered list of alternatives (OR)", function()
        check("status: [COMPLETED, FAILED]", {
            { '{"status":"COMPLETED"}', true },
            { '{"status":"FAILED"}', true },
            { '{"status":"PENDING"}', false },
        })
        assert.are.equal('{"status":[{"eq":"COMPLETED"},{"eq":"FAILED"}]}',
            compile("status: [COMPLETED, FAILED]"))
    end)

    it("the example rule of docs/patterns.md matches its event", function()
        check("event_name: [INSERT]\ntable_name: [users]", {
            { '{"event_name":"INSERT","table_name":"users"}', true },
            { '{"event_name":"INSERT","table_name":"orders"}', false },
        })
    end)

    it("a bare scalar literal is equality", function()
        check("status: [COMPLETED]", {
            { '{"status":"COMPLETED"}', true },
            { '{"status":"COMPLETED "}', false },
            { '{"status":"completed"}', false },
        })
    end)

    it("a single-operator map is an operator", function()
        check('id: [{prefix: "user_"}]', { { '{"id":"user_1"}', true }, { '{"id":"org_1"}', false } })
        check("score: [{gt: 70}]", { { '{"score":71}', true }, { '{"score":70}', false } })
        check("deleted_at: [{exists: false}]", { { '{}', true }, { '{"deleted_at":null}', false } })
    end)

    it("a nested map is a group of child fields, ANDed", function()
        check("new_image: {status: [COMPLETED], kind: [user]}", {
            { '{"new_image":{"status":"COMPLETED","kind":"user"}}', true },
            { '{"new_image":{"status":"COMPLETED","kind":"org"}}', false },
            { '{"new_image":{"status":"COMPLETED"}}', false },
        })
    end)

    it("a bare map value is shorthand for a single-element list", function()
        assert.are.equal(compile("new_image: [{status: [COMPLETED]}]"), compile("new_image: {status: [COMPLETED]}"))
        assert.are.equal('{"new_image":[{"group":{"status":[{"eq":"COMPLETED"}]}}]}',
            compile("new_image: {status: [COMPLETED]}"))
        -- ... also for a one-operator map.
        assert.are.equal(compile("score: [{gt: 5}]"), compile("score: {gt: 5}"))
    end)

    it("a list element may be a nested map: alternative sub-objects", function()
        check("result: [{ status: [OK] }, { status: [DEGRADED] }]", {
            { '{"result":{"status":"OK"}}', true },
            { '{"result":{"status":"DEGRADED"}}', true },
            { '{"result":{"status":"DOWN"}}', false },
        })
    end)

    it("rejects a scalar as a whole field condition", function()
        rejects("status: COMPLETED", "p.yaml:1:9: status: a field condition must be a list; write [COMPLETED]")
        rejects("new_image:\n  status: 7", "p.yaml:2:11: status: a field condition must be a list; write [7]")
        rejects('a: "two words"', 'p.yaml:1:4: a: a field condition must be a list; write ["two words"]')
    end)

    it("rejects an empty list, an empty map and a null condition", function()
        rejects("status: []", "p.yaml:1:9: status: an empty list matches nothing; give at least one alternative")
        rejects("status: {}",
            "p.yaml:1:9: status: an empty map matches nothing; give a nested field or an operator")
        rejects("status: [{}]",
            "p.yaml:1:10: status: an empty map matches nothing; give a nested field or an operator")
        rejects("status:", "p.yaml:1:8: status: a null condition is not allowed; write a list of "
            .. "alternatives (use [null] to match a JSON null)")
        rejects("status: ~", "p.yaml:1:9: status: a null condition is not allowed; write a list of "
            .. "alternatives (use [null] to match a JSON null)")
        rejects("{}", "p.yaml:1:1: an empty pattern is not allowed; give at least one field condition")
        rejects("", "p.yaml:1:1: the pattern is empty; write a map of field conditions, e.g. status: [COMPLETED]")
        rejects("[a]", "p.yaml:1:1: a pattern must be a map of field conditions, e.g. status: [COMPLETED]; "
            .. "got a list")
    end)

    it("rejects an operator used as a nested field name", function()
        rejects("new_image: {prefix: [abc]}",
            "p.yaml:1:21: new_image: prefix takes a single scalar, not a list; write {prefix: abc}")
        rejects("new_image: {status: [OK], exists: [true]}",
            "p.yaml:1:27: new_image: exists is an operator and cannot be a nested field name; write it "
            .. "as its own alternative, e.g. [{exists: ...}, {...}]")
        rejects("gt: [5]", "p.yaml:1:1: gt is an operator and cannot be a field name here; an operator goes "
            .. "inside a field's list, e.g. field: [{gt: ...}]")
        rejects("a: [{lt: {b: [1]}}]", "p.yaml:1:6: a: lt is an operator and cannot be a nested field name; "
            .. "an operator takes a single scalar, e.g. {lt: ...}")
    end)

    it("rejects unknown or misspelled operator-like keys", function()
        rejects('x: [{prefx: "x"}]', 'p.yaml:1:6: x: unknown operator "prefx"; did you mean prefix?')
        rejects("x: [{Suffix: a}]", 'p.yaml:1:6: x: unknown operator "Suffix"; did you mean suffix?')
        rejects("x: [{exist: true}]", 'p.yaml:1:6: x: unknown operator "exist"; did you mean exists?')
        rejects("x: [{ge: 5}]", 'p.yaml:1:6: x: unknown operator "ge"; did you mean gt? '
            .. "(a nested field is written {ge: [5]})")
        -- Not operator-like: read as a nested field whose condition is a scalar.
        rejects("x: [{status: OK}]", "p.yaml:1:14: status: a field condition must be a list; write [OK]")
    end)

    it("rejects wrong operand types", function()
        rejects("x: [{prefix: 12}]", 'p.yaml:1:14: x: prefix takes a string, not the number 12; write {prefix: "12"}')
        rejects("x: [{suffix: true}]",
            'p.yaml:1:14: x: suffix takes a string, not true; write {suffix: "true"}')
        rejects("x: [{prefix: }]", "p.yaml:1:14: x: prefix takes a string, not null")
        rejects("x: [{exists: [true]}]",
            "p.yaml:1:14: x: exists takes true or false, not a list; write {exists: true}")
        rejects('x: [{exists: "yes"}]', 'p.yaml:1:14: x: exists takes true or false, not the string "yes"')
        rejects("x: [{exists: yes}]", 'p.yaml:1:14: x: exists takes true or false, not the string "yes" '
            .. "(YAML 1.2 reads yes as a string; write true or false)")
        rejects("x: [{exists: 1}]", "p.yaml:1:14: x: exists takes true or false, not the number 1")
        rejects('x: [{gt: "abc"}]', 'p.yaml:1:10: x: gt takes a number or a now()-relative string such as '
            .. '"now()-5m", not the string "abc"')
        rejects('x: [{gte: "70"}]', "p.yaml:1:11: x: gte takes a number, not a string; write {gte: 70} "
            .. "without quotes")
        rejects("x: [{lt: true}]", 'p.yaml:1:10: x: lt takes a number or a now()-relative string such as '
            .. '"now()-5m", not true')
        rejects("x: [{lte: .inf}]", "p.yaml:1:11: x: lte's operand must be a finite number, not .inf")
        rejects("x: [.nan]", "p.yaml:1:5: x: a literal must be a finite number, not .nan")
        rejects("x: [[a]]", "p.yaml:1:5: x: a list inside a list is not allowed; each alternative is a "
            .. "scalar, a one-operator map or a nested map")
    end)
end)


describe("operators", function()
    it("prefix: string value starts with the prefix; non-strings never match", function()
        check('id: [{prefix: "user_"}]', {
            { '{"id":"user_123"}', true },
            { '{"id":"123"}', false },
            { '{"id":"user"}', false },
        })
        check('id: [{prefix: "1"}]', { { '{"id":123}', false }, { '{"id":"123"}', true } })
    end)

    it("suffix: string value ends with the suffix; non-strings never match", function()
        check('file: [{suffix: ".png"}]', {
            { '{"file":"a.png"}', true },
            { '{"file":"a.jpg"}', false },
            { '{"file":{"x":".png"}}', false },
        })
        check('n: [{suffix: "3"}]', { { '{"n":123}', false } })
    end)

    it("exists: key presence only; takes a boolean, not a list", function()
        check("k: [{exists: true}]", {
            { '{"k":null}', true }, { '{"k":false}', true }, { '{"k":0}', true }, { '{"k":""}', true },
            { '{"k":{}}', true }, { '{"k":[]}', true }, { '{}', false }, { '{"other":1}', false },
        })
        check("k: [{exists: false}]", { { '{}', true }, { '{"k":null}', false } })
    end)

    it("gt gte lt lte: numeric thresholds", function()
        check("n: [{gt: 70}]", { { '{"n":70.5}', true }, { '{"n":70}', false }, { '{"n":"71"}', false } })
        check("n: [{gte: 70}]", { { '{"n":70}', true }, { '{"n":69.999}', false } })
        check("n: [{lt: -1.5}]", { { '{"n":-2}', true }, { '{"n":-1.5}', false } })
        check("n: [{lte: 1e3}]", { { '{"n":1000}', true }, { '{"n":1000.0001}', false } })
    end)

    it("multiple prefixes or thresholds for one field are separate alternatives", function()
        check('id:\n  - prefix: "user_"\n  - prefix: "org_"', {
            { '{"id":"user_1"}', true }, { '{"id":"org_1"}', true }, { '{"id":"team_1"}', false },
        })
        check("amount:\n  - lt: 10\n  - gte: 1000", {
            { '{"amount":5}', true }, { '{"amount":5000}', true }, { '{"amount":500}', false },
        })
        rejects('x: [{prefix: "a", suffix: "b"}]', 'p.yaml:1:5: x: an operator map holds exactly one '
            .. 'operator; write them as separate alternatives: [{prefix: "a"}, {suffix: "b"}]')
        rejects("x: [{gt: 1, lt: 9}]", "p.yaml:1:5: x: an operator map holds exactly one operator; "
            .. "write them as separate alternatives: [{gt: 1}, {lt: 9}]")
        rejects("x: [{prefix: [a, b]}]", "p.yaml:1:14: x: prefix takes a single scalar, not a list; write "
            .. "each operand as its own alternative: [{prefix: a}, {prefix: b}]")
    end)

    it("there is no equals operator: a bare literal is equality", function()
        rejects("x: [{equals: a}]", "p.yaml:1:6: x: there is no equals operator; a bare literal is "
            .. "equality: write [a]")
        rejects("x: [{eq: 5}]", "p.yaml:1:6: x: there is no equals operator; a bare literal is "
            .. "equality: write [5]")
    end)
end)


describe("comparison operators with now()", function()
    it("compiles now(), now()-D, now()+D and compound durations to offsets", function()
        assert.are.equal('{"t":[{"gt":{"now":-300000}},{"lt":{"now":600000}},{"gte":{"now":0}},'
            .. '{"lte":{"now":-5400000}}]}',
            compile('t: [{gt: "now()-5m"}, {lt: "now()+10m"}, {gte: "now()"}, {lte: "now()-1h30m"}]'))
        assert.are.equal('{"t":[{"gt":{"now":-86400500}}]}', compile('t: [{gt: "now()-1d500ms"}]'))
        assert.are.equal('{"t":[{"gt":{"now":-20000}}]}', compile("t: [{gt: now()-20s}]"))
    end)

    it("matches RFC3339 strings as instants relative to now at match time", function()
        local json = assert(compile('created_at: [{gt: "now()-5m"}]'))
        local m = matcher.new()
        m:add(json)
        local event = '{"created_at":"2026-09-12T09:58:00Z"}'
        assert.are.equal(1, #m:match(event, MAX, NOW))
        -- Same compiled rule, later clock: the cutoff moved (evaluated at match time, not load).
        assert.are.equal(0, #m:match(event, MAX, NOW + 10 * 60 * 1000))
    end)

    it("respects offsets, fractional seconds, z and t; never compares lexicographically", function()
        check('t: [{gt: "now()-5m"}]', {
            { '{"t":"2026-09-12T09:56:00Z"}', true },
            { '{"t":"2026-09-12T09:54:00Z"}', false },
            { '{"t":"2026-09-12T11:54:00+02:00"}', false },  -- 09:54Z, though it sorts after
            { '{"t":"2026-09-12T07:56:00-02:00"}', true },   -- 09:56Z, though it sorts before
            { '{"t":"2026-09-12T09:55:00.001Z"}', true },
        })
    end)

    it("treats a missing, null, non-string or invalid value as no match", function()
        check('t: [{lt: "now()"}]', {
            { '{"t":"2026-09-12T09:59:59.999Z"}', true },
            { '{"t":"2026-09-12t09:59:59z"}', true },
            { '{}', false }, { '{"t":null}', false }, { '{"t":1789207100000}', false },
            { '{"t":"yesterday"}', false }, { '{"t":"2026-09-12 09:59:59Z"}', false },
            { '{"t":"2026-02-30T00:00:00Z"}', false },
        })
    end)

    it("rejects literal timestamps: only now()-syntax is valid for strings", function()
        rejects('t: [{gt: "2026-09-12T10:00:00Z"}]', 'p.yaml:1:10: t: literal timestamps are not '
            .. 'accepted ("2026-09-12T10:00:00Z"); only now()-relative cutoffs are, e.g. gt: "now()-5m"')
        rejects("t: [{lt: 2026-09-12}]", 'p.yaml:1:10: t: literal timestamps are not accepted '
            .. '("2026-09-12"); only now()-relative cutoffs are, e.g. lt: "now()-5m"')
    end)

    it("rejects the old bare now-style syntax with the exact correct spelling", function()
        rejects("t: [{gt: now}]", 'p.yaml:1:10: t: "now" is not valid now() syntax; write gt: "now()"')
        rejects("t: [{gt: now-5m}]", 'p.yaml:1:10: t: "now-5m" is not valid now() syntax; write gt: "now()-5m"')
        rejects('t: [{gt: "now() - 5m"}]',
            'p.yaml:1:10: t: "now() - 5m" is not valid now() syntax; write gt: "now()-5m"')
        rejects('t: [{lte: "NOW()+1h"}]',
            'p.yaml:1:11: t: "NOW()+1h" is not valid now() syntax; write lte: "now()+1h"')
        rejects('t: [{gt: "now( )"}]', 'p.yaml:1:10: t: "now( )" is not valid now() syntax; write gt: "now()"')
    end)

    it("rejects bad durations", function()
        rejects('t: [{gt: "now()-5min"}]',
            'p.yaml:1:10: t: bad duration in "now()-5min": "5min": unknown unit "min" (units ms, s, m, h, d)')
        rejects('t: [{gt: "now()-5"}]', 'p.yaml:1:10: t: bad duration in "now()-5": "5": missing unit after 5 '
            .. "(units ms, s, m, h, d; e.g. 500ms, 20s, 5m, 1h30m, 1d)")
        rejects('t: [{gt: "now()-"}]', 'p.yaml:1:10: t: bad duration in "now()-": empty duration '
            .. "(e.g. 500ms, 20s, 5m, 1h30m, 1d)")
        rejects('t: [{gt: "now()-30m1h"}]', 'p.yaml:1:10: t: bad duration in "now()-30m1h": "30m1h": units '
            .. "must go from largest to smallest, each once (like 1h30m)")
        rejects('t: [{gt: "now()-1.5h"}]', 'p.yaml:1:10: t: bad duration in "now()-1.5h": "1.5h" is not a '
            .. "duration (e.g. 500ms, 20s, 5m, 1h30m, 1d)")
    end)

    it("alternatives on one field are OR, so gte+lt is not a range", function()
        check('t: [{gte: "now()-1h"}, {lt: "now()"}]', {
            { '{"t":"2026-09-12T09:30:00Z"}', true },
            { '{"t":"2026-09-12T11:00:00Z"}', true },  -- future: gte holds
            { '{"t":"2020-01-01T00:00:00Z"}', true },  -- long past: lt holds
        })
    end)
end)


describe("exists, recursively", function()
    it("new_image: [{exists: true}] checks the top-level key", function()
        check("new_image: [{exists: true}]", { { '{"new_image":null}', true }, { '{}', false } })
    end)

    it("new_image: {name: [{exists: true}]} checks name inside new_image", function()
        check("new_image: {name: [{exists: true}]}", {
            { '{"new_image":{"name":null}}', true },
            { '{"new_image":{}}', false },
            { '{}', false }, -- a nested exists: true fails when the parent is missing
        })
    end)

    it("a nested exists: false matches when the parent is missing", function()
        check("new_image: {name: [{exists: false}]}", {
            { '{}', true }, { '{"new_image":{}}', true }, { '{"new_image":{"name":1}}', false },
        })
    end)
end)


describe("combining conditions", function()
    it("siblings and nested children are AND; alternatives OR", function()
        check("a: [1, 2]\nb: {c: [x], d: [{prefix: y}]}", {
            { '{"a":2,"b":{"c":"x","d":"yz"}}', true },
            { '{"a":3,"b":{"c":"x","d":"yz"}}', false },
            { '{"a":1,"b":{"c":"x","d":"zz"}}', false },
            { '{"a":1}', false },
        })
    end)

    it("a missing field fails value conditions, exists: false can match absence", function()
        check("a: [null]", { { '{}', false }, { '{"a":null}', true } })
        check('a: [{prefix: ""}]', { { '{}', false } })
        check("a: [{exists: false}, 1]", { { '{}', true }, { '{"a":1}', true }, { '{"a":2}', false } })
    end)

    it("extra event fields are ignored", function()
        check("a: [1]", { { '{"a":1,"b":2,"c":{"d":[1,2,3]}}', true } })
    end)
end)


describe("pattern semantics: literals, arrays, validity", function()
    it("literal equality is typed", function()
        check("n: [70]", { { '{"n":70}', true }, { '{"n":70.0}', true }, { '{"n":7e1}', true },
            { '{"n":"70"}', false } })
        check('n: ["70"]', { { '{"n":"70"}', true }, { '{"n":70}', false } })
        check("b: [true]", { { '{"b":true}', true }, { '{"b":1}', false }, { '{"b":"true"}', false } })
        check("z: [null]", { { '{"z":null}', true }, { '{}', false }, { '{"z":"null"}', false } })
        check("s: [ON, yes]", { { '{"s":"ON"}', true }, { '{"s":"yes"}', true }, { '{"s":true}', false } })
    end)

    it("strings compare byte-exactly after JSON unescaping", function()
        check('s: ["a/b é"]', { { '{"s":"a\\/b \\u00e9"}', true }, { '{"s":"a/b e"}', false } })
    end)

    it("a condition holds on an array if it holds for one element, recursively", function()
        check("tags: [red]", {
            { '{"tags":["blue","red"]}', true }, { '{"tags":[["red"]]}', true }, { '{"tags":["blue"]}', false },
        })
    end)

    it("a nested group holds within one element; non-object elements act as {}", function()
        check("items: {a: [1], b: [2]}", {
            { '{"items":[{"a":1,"b":2}]}', true },
            { '{"items":[{"a":1},{"b":2}]}', false },
        })
        check("items: {a: [{exists: false}]}", { { '{"items":[5]}', true } })
        check("items: {a: [1]}", { { '{"items":[5]}', false } })
    end)

    it("{prefix: \"\"} matches every string and only strings", function()
        check('s: [{prefix: ""}]', { { '{"s":""}', true }, { '{"s":"x"}', true }, { '{"s":1}', false } })
    end)

    it("numbers compare as IEEE doubles and encode with full precision", function()
        assert.are.equal('{"n":[{"eq":0.1},{"gt":9007199254740992},{"lt":-1e-300}]}',
            compile("n: [0.1, {gt: 9007199254740992}, {lt: -1e-300}]"))
        check("n: [0.1]", { { '{"n":0.1}', true }, { '{"n":0.10000000000000001}', true } })
    end)

    it("rejects other systems' operator names wherever they key a list element", function()
        local hints = {
            numeric = "use the comparison operators gt, gte, lt, lte, one per alternative, e.g. [{gt: 0}]",
            ["anything-but"] = "Relay has no negation: use a separate rule for the values you want, "
                .. "or {exists: false} to match absence",
            wildcard = "use {prefix: ...} or {suffix: ...}",
            ["equals-ignore-case"] = "list every accepted spelling as an alternative, e.g. [ok, OK, Ok]",
            cidr = "use {prefix: ...} on the address's string form, e.g. {prefix: \"10.0.\"}",
            ["$or"] = "write the alternatives as a list: field: [a, b], or several nested maps "
                .. "field: [{...}, {...}]",
        }
        for name, hint in pairs(hints) do
            local msg = name .. " is not a Relay operator; " .. hint
            local key = name == "$or" and '"$or"' or name
            rejects("x: [{" .. key .. ": [1]}]", "p.yaml:1:6: x: " .. msg)
            rejects("x: [{" .. key .. ": abc}]", "p.yaml:1:6: x: " .. msg)
            rejects("x: {a: [1], " .. key .. ": [1]}", "p.yaml:1:13: x: " .. msg)
            rejects("x: [{a: [{" .. key .. ": 1}]}]", "p.yaml:1:11: a: " .. msg)
        end
        rejects('"$or": [{a: [1]}, {b: [2]}]', "p.yaml:1:1: $or is not a Relay operator; write the "
            .. "alternatives as a list: field: [a, b], or several nested maps field: [{...}, {...}]")
    end)

    it("never silently widens: duplicate field names are refused", function()
        rejects("1: [a]\n'1': [b]", 'p.yaml:2:1: duplicate field "1" (first at 1:1)')
    end)
end)


describe("pattern.load_file", function()
    it("compiles a pattern file and names it in errors", function()
        assert.are.equal('{"new_image":[{"group":{"status":[{"eq":"COMPLETED"},{"eq":"FAILED"}],'
            .. '"id":[{"prefix":"user_"}]}}]}', pattern.load_file("spec/fixtures/patterns/nested.yaml"))
        local json, err = pattern.load_file("spec/fixtures/patterns/invalid.yaml")
        assert.is_nil(json)
        assert.are.equal('spec/fixtures/patterns/invalid.yaml:4:7: id: unknown operator "prefx"; '
            .. "did you mean prefix?", err)
        json, err = pattern.load_file("spec/fixtures/patterns/broken_yaml.yaml")
        assert.is_nil(json)
        assert.matches("^spec/fixtures/patterns/broken_yaml.yaml:%d+:%d+: ", err)
    end)
end)


describe("the operator table (relay_matcher_ops, read through relay.core.matcher)", function()
    it("is the validator's list of operators and foreign names", function()
        local written, foreign = {}, {}
        for _, op in ipairs(matcher.operators) do
            if op.written then
                written[#written + 1] = op.name
            elseif op.operand == "foreign" then
                foreign[op.name] = true
            end
        end
        assert.are.same({ "prefix", "suffix", "exists", "gt", "gte", "lt", "lte" }, written)
        assert.are.same(written, pattern.OPERATORS)
        local hinted = {}
        for name in pairs(pattern.FOREIGN) do
            hinted[name] = true
        end
        assert.are.same(foreign, hinted)
    end)

    it("accepts each written operator with its operand kind and refuses it as a field name", function()
        local samples = { string = { "ab", '"ab"' }, boolean = { "true", "true" }, threshold = { "1.5", "1.5" } }
        for _, op in ipairs(matcher.operators) do
            if op.written then
                local sample = samples[op.operand]
                assert.are.equal('{"x":[{"' .. op.name .. '":' .. sample[2] .. "}]}",
                    compile("x: [{" .. op.name .. ": " .. sample[1] .. "}]"))
                local json, err = compile(op.name .. ": [1]")
                assert.is_nil(json)
                assert.matches("is an operator and cannot be a field name", err, 1, true)
            end
        end
        -- The operators only the normal form spells are ordinary field names in a pattern.
        assert.are.equal('{"eq":[{"eq":1}],"group":[{"eq":2}]}', compile("eq: [1]\ngroup: [2]"))
    end)
end)
