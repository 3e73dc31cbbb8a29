-- relay.apps: template validation, discovery, reload merging and
-- the matcher built over every loaded app.
local apps = require("relay.apps")
local yaml = require("relay.yaml")
local matcher = require("relay.core.matcher")

local BASIC = "spec/fixtures/apps/basic"
local PATH = "apps/users/template.yaml"


local function validate(text)
    return apps.validate(text, PATH, "users", "apps/users")
end


local function ok(text)
    local app = validate(text)
    assert(app.state == "ok", app.error)
    return app
end


local function invalid(text, want)
    local app = validate(text)
    assert.are.equal("invalid", app.state, text)
    assert.are.equal(want, app.error)
end


-- A minimal valid template with `extra` appended at top level.
local function with(extra)
    return "runtime:\n  command: [run]\n" .. extra
end


describe("template validation", function()
    it("reports every independent error of a file, not only the first", function()
        local app = validate([[
runtime:
  command: [run]
  memroy: 64Mi
  pids: -1
concurrency: 0
events:
  - handler: a
    pattern: {t: [x]}
    timeout: 99h
  - handler: b
    pattern: {t: x}
  - handler: c
    pattern: {t: [ok]}
schedules:
  - name: tick
    handler: t
    every: 0s
]])
        assert.are.equal("invalid", app.state)
        assert.are.equal(6, #app.errors, table.concat(app.errors, "\n"))
        local lines = {}
        for i, err in ipairs(app.errors) do
            lines[i] = tonumber(err:match("^" .. PATH .. ":(%d+):%d+: "))
        end
        assert.are.same({ 3, 4, 5, 9, 11, 17 }, lines)
        assert.matches('unknown key "memroy" in runtime; did you mean memory%?', app.errors[1])
        assert.are.equal(app.errors[1] .. " (and 5 more)", app.error)
    end)

    it("accepts the reference example and applies its values", function()
        local app = ok([[
runtime:
  driver: runc                # optional per-app override of RELAY_RUNTIME
  image: host
  command: [python3, /app/main.py]
  memory: 256Mi
  pids: 64
  cpus: 1
  network: none
  env: {LOG_STYLE: plain}
  init: true
concurrency: 2
events:
  - handler: events.created.handler
    pattern:
      event_name: [INSERT]
      table_name: [users]
    timeout: 20s
    retries: 2
schedules:
  - name: nightly
    handler: reports.nightly.handler
    cron: "0 3 * * *"
]])
        assert.are.equal("users", app.name)
        assert.are.equal(PATH, app.path)
        assert.are.same({
            driver = "runc", image = "host", command = { "python3", "/app/main.py" },
            memory = 256 * 1024 * 1024, pids = 64, cpus = 1, network = "none",
            env = { LOG_STYLE = "plain", PYTHONUNBUFFERED = "1" }, init = true, secrets = {}, mounts = {},
        }, app.runtime)
        assert.are.equal(2, app.concurrency)
        assert.are.same({ {
            handler = "events.created.handler",
            pattern_json = '{"event_name":[{"eq":"INSERT"}],"table_name":[{"eq":"users"}]}',
            timeout_ms = 20000, retries = 2, line = 13, col = 5,
        } }, app.events)
        local sched = app.schedules[1]
        assert.is_table(sched.cron_spec)  -- parsed once, at load
        assert.is_true(sched.cron_spec.hour[3] and sched.cron_spec.minute[0])
        sched.cron_spec = nil
        assert.are.same({ {
            name = "nightly", handler = "reports.nightly.handler", cron = "0 3 * * *",
            payload = yaml.null, payload_json = "null", timeout_ms = 60000, retries = 4, line = 20, col = 5,
        } }, app.schedules)
    end)

    it("applies defaults", function()
        local app = ok("events:\n  - handler: h\n    pattern: {a: [1]}\n")
        assert.are.same({ image = "host", memory = 256 * 1024 * 1024, pids = 64, network = "none",
            env = { PYTHONUNBUFFERED = "1" }, secrets = {}, mounts = {} }, app.runtime)
        assert.is_nil(app.runtime.command)
        assert.is_nil(app.runtime.init)
        assert.is_nil(app.concurrency)
        assert.are.equal(60000, app.events[1].timeout_ms)
        assert.are.equal(4, app.events[1].retries)
        assert.are.same({}, app.schedules)
        assert.are.equal(4, apps.DEFAULT_RETRIES)
    end)

    it("reads every, payload, timeout and retries of schedules", function()
        local app = ok(with([[
schedules:
  - name: tick.5s
    handler: tick
    every: 1m30s
    payload: {a: [1, 2.5, null, "x"], b: {}, c: []}
    timeout: 15m
    retries: 0
]]))
        local s = app.schedules[1]
        assert.are.equal(90000, s.every_ms)
        assert.is_nil(s.cron)
        assert.are.equal('{"a":[1,2.5,null,"x"],"b":{},"c":[]}', s.payload_json)
        assert.are.same({ a = { 1, 2.5, yaml.null, "x" }, b = {}, c = {} }, s.payload)
        assert.are.equal(15 * 60000, s.timeout_ms)
        assert.are.equal(0, s.retries)
    end)

    it("rejects unknown keys anywhere, naming the closest allowed one", function()
        invalid(with("event:\n  - {}\n"), PATH .. ':3:1: unknown key "event" in template; did you mean events? '
            .. "(allowed: runtime, concurrency, warm, events, schedules)")
        invalid("runtime:\n  comand: [x]\n", PATH .. ':2:3: unknown key "comand" in runtime; did you mean '
            .. "command? (allowed: driver, image, command, memory, pids, cpus, network, env, init, nofile, seccomp, "
            .. "secrets, mounts)")
        invalid(with("events:\n  - handler: h\n    pattern: {a: [1]}\n    timout: 5s\n"),
            PATH .. ':6:5: unknown key "timout" in events[1]; did you mean timeout? '
            .. "(allowed: handler, pattern, timeout, retries)")
        invalid(with("schedules:\n  - name: n\n    handler: h\n    every: 1s\n    paylod: 1\n"),
            PATH .. ':7:5: unknown key "paylod" in schedules[1]; did you mean payload? '
            .. "(allowed: name, handler, cron, every, timezone, payload, timeout, retries)")
        invalid(with("zzz: 1\n"), PATH .. ':3:1: unknown key "zzz" in template '
            .. "(allowed: runtime, concurrency, warm, events, schedules)")
    end)

    it("rejects an empty, non-map or unparsable template", function()
        invalid("", PATH .. ":1:1: the template is empty; expected a map with runtime, concurrency, "
            .. "warm, events, schedules")
        invalid("[1]", PATH .. ":1:1: a template must be a map with runtime, concurrency, warm, events, "
            .. "schedules, not a list")
        invalid("a: 1\na: 2\n", PATH .. ':2:1: duplicate key "a" (first at 1:1)')
    end)

    it("validates event entries", function()
        local ev = "events:\n  - handler: h\n    pattern: {a: [1]}\n"
        invalid(with(ev .. "    timeout: 20\n"), PATH .. ":6:14: events[1].timeout must be a duration like "
            .. "20s, 5m or 1h30m, not the number 20; write 20s for seconds")
        invalid(with(ev .. "    timeout: 16m\n"), PATH .. ":6:14: events[1].timeout must be from 1ms to 15m, "
            .. "not 16m")
        invalid(with(ev .. "    timeout: 5 s\n"), PATH .. ':6:14: events[1].timeout: "5 s": durations have '
            .. "no spaces (e.g. 500ms, 20s, 5m, 1h30m, 1d)")
        invalid(with(ev .. "    retries: 21\n"), PATH .. ":6:14: events[1].retries must be from 0 to 20, not 21")
        invalid(with(ev .. "    retries: -1\n"), PATH .. ":6:14: events[1].retries must be from 0 to 20, not -1")
        invalid(with(ev .. "    retries: 2.5\n"), PATH .. ":6:14: events[1].retries must be a whole number "
            .. "from 0 to 20, not the number 2.5")
        invalid(with("events:\n  - handler: a b\n    pattern: {a: [1]}\n"), PATH .. ':4:14: events[1].handler '
            .. '"a b" is invalid: it must match [A-Za-z0-9_.-]+')
        invalid(with("events:\n  - pattern: {a: [1]}\n"), PATH .. ":4:5: events[1]: missing handler")
        invalid(with("events:\n  - handler: h\n"), PATH .. ":4:5: events[1]: missing pattern")
        invalid(with(ev .. "  - handler: h\n    pattern: {b: [1]}\n"), PATH .. ':6:14: duplicate event '
            .. 'handler "h" (first at 4:14); handler names are unique within an app')
        invalid(with("events: {handler: h}\n"), PATH .. ":3:9: events must be a list, not a map")
        invalid(with("events:\n  - handler: h\n    pattern:\n      status: COMPLETED\n"),
            PATH .. ":6:15: status: a field condition must be a list; write [COMPLETED]")
    end)

    it("validates schedule entries", function()
        local s = "schedules:\n  - name: n\n    handler: h\n"
        invalid(with(s), PATH .. ":4:5: schedules[1]: missing cron or every (exactly one is required)")
        invalid(with(s .. "    cron: '* * * * *'\n    every: 1m\n"), PATH .. ":7:5: schedules[1]: give exactly "
            .. "one of cron or every, not both")
        invalid(with(s .. "    every: 1500ms\n"), PATH .. ":6:12: schedules[1].every must be whole seconds, "
            .. "not 1500ms")
        invalid(with(s .. "    every: 0s\n"), PATH .. ":6:12: schedules[1].every must be at least 1s, not 0s")
        invalid(with(s .. "    cron: '0 3 * *'\n"), PATH .. ':6:11: schedules[1].cron: "0 3 * *" has 4 fields; '
            .. 'cron takes 5 (minute hour day-of-month month day-of-week), e.g. "0 3 * * *"')
        invalid(with("schedules:\n  - name: Nightly\n    handler: h\n    every: 1s\n"), PATH .. ":4:11: "
            .. 'schedules[1].name "Nightly" is invalid: it must match [a-z0-9_.-]+')
        invalid(with(s .. "    every: 1s\n  - name: n\n    handler: h2\n    every: 2s\n"), PATH .. ":7:11: "
            .. 'duplicate schedule name "n" (first at 4:11)')
        invalid(with(s .. "    every: 1s\n    payload: [.nan]\n"), PATH .. ":7:15: schedules[1].payload: "
            .. "NaN cannot be represented in JSON")
        invalid(with("schedules:\n  - name: n\n    every: 1s\n"), PATH .. ":4:5: schedules[1]: missing handler")
    end)

    it("keeps a hook for full cron parsing", function()
        local saved = apps.cron_check
        apps.cron_check = function(expr)
            if expr == "bad" then
                return nil, "not a cron expression"
            end
            return { parsed = expr }
        end
        local app = apps.validate(with("schedules:\n  - {name: a, handler: h, cron: '1 2 3 4 5'}\n"), PATH, "u", "d")
        local bad = apps.validate(with("schedules:\n  - {name: a, handler: h, cron: bad}\n"), PATH, "u", "d")
        apps.cron_check = saved
        assert.are.same({ parsed = "1 2 3 4 5" }, app.schedules[1].cron_spec)
        assert.are.equal(PATH .. ":4:33: schedules[1].cron: not a cron expression", bad.error)
    end)

    it("validates runtime values", function()
        local function rt(body)
            return "runtime:\n" .. body
        end
        invalid(rt("  driver: kvm\n"), PATH .. ':2:11: runtime.driver must be one of auto, runc, bwrap, '
            .. 'docker, podman, not "kvm"')
        invalid(rt("  network: bridge\n"), PATH .. ':2:12: runtime.network must be none or host, not "bridge"')
        invalid(rt("  memory: 256M\n"), PATH .. ':2:11: runtime.memory: "256M": unknown size unit "M" '
            .. "(Ki, Mi, Gi, Ti, or plain bytes)")
        invalid(rt("  memory: 1000\n"), PATH .. ":2:11: runtime.memory must be at least 4Mi (the container "
            .. "runtime's own set-up already takes about 2 MiB of it), not 1000")
        invalid(rt("  memory: 3Mi\n"), PATH .. ":2:11: runtime.memory must be at least 4Mi (the container "
            .. "runtime's own set-up already takes about 2 MiB of it), not 3Mi")
        assert.are.equal(4194304, ok(rt("  memory: 4Mi\n")).runtime.memory)
        invalid(rt("  pids: 0\n"), PATH .. ":2:9: runtime.pids must be from 4 to 4194304, not 0")
        invalid(rt("  pids: 3\n"), PATH .. ":2:9: runtime.pids must be from 4 to 4194304, not 3")
        assert.are.equal(4, ok(rt("  pids: 4\n")).runtime.pids)
        invalid(rt("  cpus: 0\n"), PATH .. ":2:9: runtime.cpus must be a number of CPUs greater than 0 "
            .. "(e.g. 1 or 0.5), not the number 0")
        invalid(rt("  cpus: 0.001\n"), PATH .. ":2:9: runtime.cpus must be at least 0.01 (the kernel's "
            .. "smallest quota is 1 ms per 100 ms period), not 0.001")
        assert.are.equal(0.01, ok(rt("  cpus: 0.01\n")).runtime.cpus)
        invalid(rt("  init: yes\n"), PATH .. ':2:9: runtime.init must be true or false, not the string "yes"')
        invalid(rt("  command: python3 main.py\n"), PATH .. ":2:12: runtime.command must be a list of "
            .. 'arguments, e.g. [python3, /app/main.py], not the string "python3 main.py"')
        invalid(rt("  command: []\n"), PATH .. ":2:12: runtime.command must not be empty; e.g. "
            .. "[python3, /app/main.py]")
        invalid(rt("  env: {RELAY_APP: x}\n"), PATH .. ":2:9: runtime.env: RELAY_APP is reserved (Relay sets "
            .. "RELAY_* variables itself)")
        invalid(rt("  env: {1X: x}\n"), PATH .. ':2:9: runtime.env: "1X" is not a valid variable name '
            .. "([A-Za-z_][A-Za-z0-9_]*)")
        invalid(rt("  env: [A=1]\n"), PATH .. ":2:8: runtime.env must be a map (e.g. {LOG_STYLE: plain}), "
            .. "not a list")
        invalid(rt("  image: ''\n"), PATH .. ":2:10: runtime.image must not be empty")
        invalid(with("concurrency: 0\n"), PATH .. ":3:14: concurrency must be from 1 to 65535, not 0")
        invalid(with("warm: 17\n"), PATH .. ":3:7: warm must be from 0 to 16, not 17")
        invalid(with("warm: yes\n"), PATH .. ':3:7: warm must be a whole number from 0 to 16, not the string "yes"')
        assert.are.equal(0, ok(with("warm: 0\n")).warm)
        assert.are.equal(3, ok(with("warm: 3\n")).warm)
        assert.is_nil(ok(with("")).warm)
        local app = ok(rt("  command: [sleep, 5]\n  memory: 4194304\n  cpus: 0.5\n"
            .. "  env: {N: 5, PYTHONUNBUFFERED: 0}\n"))
        assert.are.same({ "sleep", "5" }, app.runtime.command)
        assert.are.equal(4194304, app.runtime.memory)
        assert.are.equal(0.5, app.runtime.cpus)
        assert.are.same({ N = "5", PYTHONUNBUFFERED = "0" }, app.runtime.env)
    end)
end)


describe("discovery", function()
    it("loads every app directory sorted by name, reporting invalid ones", function()
        local list = assert(apps.load_all(BASIC))
        local summary = {}
        for i, app in ipairs(list) do
            summary[i] = { app.name, app.state, app.error }
        end
        assert.are.same({
            { "Bad_Name", "invalid", BASIC .. '/Bad_Name: invalid app name "Bad_Name": app names match '
                .. "[a-z0-9][a-z0-9_-]*" },
            { "alpha", "ok" },
            { "beta", "ok" },
            { "broken", "invalid", BASIC .. "/broken/template.yaml:7:19: status: a field condition must be "
                .. "a list; write [COMPLETED]" },
            { "notemplate", "invalid", BASIC .. "/notemplate: missing template.yaml" },
        }, summary)
        assert.are.equal(BASIC .. "/alpha", list[2].dir)
        assert.are.equal(BASIC .. "/alpha/template.yaml", list[2].path)
        assert.are.same({ "users.created", "any.insert" }, { list[2].events[1].handler, list[2].events[2].handler })
        -- A trailing slash on the apps directory does not change the paths.
        assert.are.equal(BASIC .. "/alpha/template.yaml", assert(apps.load_all(BASIC .. "/"))[2].path)
    end)

    it("tells valid app names by one rule", function()
        for _, name in ipairs({ "a", "users", "0day", "my-app_2" }) do
            assert.is_true(apps.valid_name(name), name)
        end
        for _, name in ipairs({ "", "Users", "-a", "_a", "a.b", "a b", "a/b", ".git" }) do
            assert.is_false(apps.valid_name(name), name)
        end
        assert.is_false(apps.valid_name(nil))
        assert.are.equal("[a-z0-9][a-z0-9_-]*", apps.APP_NAME_RULE)
    end)

    it("fails when the apps directory cannot be read", function()
        local list, err = apps.load_all("spec/fixtures/apps/nonexistent")
        assert.is_nil(list)
        assert.are.equal("apps directory spec/fixtures/apps/nonexistent: No such file or directory", err)
    end)

    it("loads a single app by name", function()
        local app = assert(apps.load_app(BASIC, "beta"))
        assert.are.equal("ok", app.state)
        assert.are.equal(2, app.concurrency)
        assert.are.equal("invalid", assert(apps.load_app(BASIC, "broken")).state)
        local none, err = apps.load_app(BASIC, "nope")
        assert.is_nil(none)
        assert.are.equal('no app "nope" in ' .. BASIC, err)
        assert.is_nil(apps.load_app(BASIC, "notes.txt"))
    end)
end)


describe("merge (the reload seam)", function()
    local function app(name, state, source)
        return { name = name, state = state, source = source, error = state == "invalid" and (name .. ": bad") or nil }
    end

    it("keeps the last good version of an app whose new template is invalid", function()
        local previous = { app("a", "ok", "v1"), app("b", "ok", "v1"), app("c", "invalid", "x"),
            app("gone", "ok", "v") }
        local fresh = { app("a", "invalid", "v2"), app("b", "ok", "v2"), app("c", "invalid", "y"),
            app("d", "ok", "v1"), app("e", "invalid", "z") }
        local merged, changes = apps.merge(previous, fresh)
        assert.are.same({ "a", "b", "c", "d", "e" }, { merged[1].name, merged[2].name, merged[3].name,
            merged[4].name, merged[5].name })
        assert.are.equal("ok", merged[1].state)
        assert.are.equal("v1", merged[1].source)
        assert.are.equal("a: bad", merged[1].reload_error)
        assert.is_nil(previous[1].reload_error) -- inputs are not modified
        assert.are.equal("v2", merged[2].source)
        assert.are.equal("invalid", merged[3].state)
        assert.are.same({
            { name = "a", change = "kept_last_good", error = "a: bad" },
            { name = "b", change = "updated" },
            { name = "c", change = "invalid", error = "c: bad" },
            { name = "d", change = "added" },
            { name = "e", change = "invalid", error = "e: bad" },
            { name = "gone", change = "removed" },
        }, changes)
    end)

    it("keeps the last good version across several bad reloads, and recovers", function()
        local first = apps.merge(nil, { app("a", "ok", "v1") })
        local second = apps.merge(first, { app("a", "invalid", "v2") })
        local third, changes = apps.merge(second, { app("a", "invalid", "v3") })
        assert.are.equal("v1", third[1].source)
        assert.are.equal("kept_last_good", changes[1].change)
        local fourth, changes4 = apps.merge(third, { app("a", "ok", "v1") })
        assert.is_nil(fourth[1].reload_error)
        assert.are.equal("updated", changes4[1].change)
        local _, changes5 = apps.merge(fourth, { app("a", "ok", "v1") })
        assert.are.equal("unchanged", changes5[1].change)
    end)
end)


describe("build_matcher", function()
    it("adds every loaded app's rules in dispatch order with <app>/<handler> labels", function()
        local list = assert(apps.load_all(BASIC))
        local m, labels = assert(apps.build_matcher(list, matcher))
        assert.are.same({ "alpha/users.created", "alpha/any.insert", "beta/users.all" }, labels)
        -- Every matching rule, no deduplication, ascending = dispatch order.
        assert.are.same({ 0, 1, 2 }, m:match('{"event_name":"INSERT","table_name":"users"}', 1024, 0))
        assert.are.same({ 2 }, m:match('{"event_name":"UPDATE","table_name":"users"}', 1024, 0))
        assert.are.same({}, m:match('{"event_name":"DELETE"}', 1024, 0))
    end)

    it("takes a bulk load's rule blocks: the same ids, labels made when first read", function()
        local list = assert(apps.load_all(BASIC, { bulk = true }))
        assert.is_nil(apps.find(list, "alpha").rules) -- timeout and retries: the ordinary load
        assert.is_not_nil(apps.find(list, "beta").rules)
        local m, labels = assert(apps.build_matcher(list, matcher))
        assert.are.same({ "alpha/users.created", "alpha/any.insert" }, labels) -- beta's label not made yet
        assert.are.equal("beta/users.all", labels[3])
        assert.are.equal("beta/users.all", rawget(labels, 3))
        assert.is_nil(labels[4])
        assert.is_nil(labels[2.5])
        assert.is_nil(labels.x)
        assert.are.same({ 0, 1, 2 }, m:match('{"event_name":"INSERT","table_name":"users"}', 1024, 0))
        assert.are.same({ 2 }, m:match('{"event_name":"UPDATE","table_name":"users"}', 1024, 0))
    end)

    it("numbers the rules of a block before an ordinary app's in dispatch order", function()
        local bulk = { bulk = true }
        local list = {
            apps.validate("events:\n  - handler: one\n    pattern: {a: [1]}\n  - handler: two\n"
                .. "    pattern: {a: [1, 2]}\n", "a.yaml", "a", "/a", bulk),
            apps.validate("events:\n  - handler: three\n    pattern: {a: [2]}\n    timeout: 5s\n",
                "b.yaml", "b", "/b", bulk),
        }
        assert.is_not_nil(list[1].rules)
        assert.is_nil(list[2].rules)
        local m, labels = assert(apps.build_matcher(list, matcher))
        assert.are.same({ [3] = "b/three" }, labels)
        assert.are.same({ "a/one", "a/two", "b/three" }, { labels[1], labels[2], labels[3] })
        assert.are.same({ 0, 1 }, m:match('{"a":1}', 1024, 0))
        assert.are.same({ 1, 2 }, m:match('{"a":2}', 1024, 0))
    end)

    it("names the template line of a pattern refused from a rule block", function()
        local list = assert(apps.load_all(BASIC, { bulk = true }))
        local refusing = {
            new = function()
                return {
                    add_many = function(_, jsons) return #jsons end,
                    add_rules = function() return nil, "too deep", 1 end,
                    compile = function() return true end,
                }
            end,
        }
        local m, err = apps.build_matcher(list, refusing)
        assert.is_nil(m)
        local line, col = apps.find(list, "beta").rules:mark(1)
        assert.are.same({ 5, 5 }, { line, col })
        assert.are.equal(string.format("%s/beta/template.yaml:5:5: the matcher refused this pattern: too deep",
            BASIC), err)
    end)

    it("sorts apps by name even when given out of order", function()
        local list = assert(apps.load_all(BASIC))
        local reversed = {}
        for i = #list, 1, -1 do
            reversed[#reversed + 1] = list[i]
        end
        local _, labels = assert(apps.build_matcher(reversed, matcher))
        assert.are.same({ "alpha/users.created", "alpha/any.insert", "beta/users.all" }, labels)
    end)

    it("names the template line of a pattern the matcher refuses", function()
        -- refuses the third rule of all: beta's only one
        local refusing = {
            new = function()
                local added = 0
                return {
                    add_many = function(_, jsons)
                        if added + #jsons >= 3 then
                            return nil, "too deep", 3 - added
                        end
                        added = added + #jsons
                        return #jsons
                    end,
                    compile = function() return true end,
                }
            end,
        }
        local m, err = apps.build_matcher(assert(apps.load_all(BASIC)), refusing)
        assert.is_nil(m)
        assert.matches("^" .. BASIC:gsub("%p", "%%%0") .. "/beta/template%.yaml:%d+:%d+: the matcher refused "
            .. "this pattern: too deep$", err)
        -- a rule within an app, counted across the apps before it
        local list = assert(apps.load_all(BASIC))
        local second = apps.find(list, "alpha").events[2]
        refusing.new = function()
            return { add_many = function() return nil, "too deep", 2 end, compile = function() return true end }
        end
        m, err = apps.build_matcher(list, refusing)
        assert.is_nil(m)
        assert.are.equal(string.format("%s/alpha/template.yaml:%d:%d: the matcher refused this pattern: too deep",
            BASIC, second.line, second.col), err)
    end)
end)
