-- The log tells an operator what each attempt did and what Relay does
-- next (issue 14, item 1): a real daemon with real runc containers, in the
-- text and the JSON format, runs a handler that fails once then succeeds,
-- one that exhausts its attempts into the DLQ and one that times out.
-- Every finished attempt is one record with its fields, a scheduled retry
-- says when, and every dead letter is one WARN with the DLQ entry's id.
-- The retries wait for the backoff: compressed constants only. A container
-- the host cannot start is logged with the runtime's own reason.
local build = require("relay.core.build")
local cjson = require("cjson.safe")
local daemon_helper = require("helpers.daemon")
local fs = require("relay.fs")
local runtime = require("relay.runtime")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
local maybe = (usable and build.test_constants) and describe or pending
local maybe_any_build = usable and describe or pending

local RFC3339_MS = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$"
local TEXT_RECORD = "^(%d%d%d%d%-%d%d%-%d%dT%S+Z) (%u+)%s+(.*)$"


--- The fields of a text record's tail (` key=value key="quoted \" value"`),
-- or nil when the tail does not parse. Values are strings, as written.
local function text_fields(tail)
    local fields, pos = {}, 1
    while pos <= #tail do
        local key, after = tail:match("^ ([%w_]+)=()", pos)
        if not key then
            return nil
        end
        if tail:sub(after, after) == '"' then
            local value, i = {}, after + 1
            while tail:sub(i, i) ~= '"' do
                if i > #tail then
                    return nil
                end
                local c = tail:sub(i, i)
                if c == "\\" then
                    i = i + 1
                    c = tail:sub(i, i)
                end
                value[#value + 1] = c
                i = i + 1
            end
            fields[key], pos = table.concat(value), i + 1
        else
            local value, next_pos = tail:match("^([^%s]*)()", after)
            fields[key], pos = value, next_pos
        end
    end
    return fields
end


--- Parses a text record whose message is one of messages:
-- { level, msg, fields } or nil.
local function parse_text(line, messages)
    local _, level, rest = line:match(TEXT_RECORD)
    if not level then
        return nil
    end
    for _, msg in ipairs(messages) do
        if rest == msg or rest:sub(1, #msg + 1) == msg .. " " then
            local fields = text_fields(rest:sub(#msg + 1))
            return fields and { level = level:lower(), msg = msg, fields = fields }
        end
    end
    return nil
end


local function parse_json(line)
    local r = cjson.decode(line)
    if type(r) ~= "table" or not r.msg then
        return nil
    end
    local fields = {}
    for k, v in pairs(r) do
        if k ~= "ts" and k ~= "level" and k ~= "msg" then
            fields[k] = v
        end
    end
    return { level = r.level, msg = r.msg, fields = fields }
end


local OUTCOME_MESSAGES = { "attempt succeeded", "attempt failed", "attempt timed out", "attempt lost",
    "dead-lettered" }
local IS_OUTCOME = {}
for _, msg in ipairs(OUTCOME_MESSAGES) do
    IS_OUTCOME[msg] = true
end


--- The attempt and dead-letter records of message id, in log order.
local function outcome_records(d, format, id)
    local out = {}
    for _, line in ipairs(d.lines) do
        local r
        if format == "json" then
            r = parse_json(line)
        else
            r = parse_text(line, OUTCOME_MESSAGES)
        end
        if r and IS_OUTCOME[r.msg] and r.fields.message_id == id then
            out[#out + 1] = r
        end
    end
    return out
end


--- A field as a number, whichever format wrote it.
local function num(r, key)
    return tonumber(r.fields[key])
end


local function dlq_id_of(w, id)
    for _, e in ipairs(w:dlq()) do
        if e.fields.original_id == id then
            return e.id
        end
    end
    return nil
end


local function assert_attempt(r, want)
    assert.are.equal(want.level, r.level, r.msg)
    assert.are.equal(want.msg, r.msg)
    assert.are.equal("wa", r.fields.app)
    assert.are.equal(want.handler, r.fields.handler)
    assert.are.equal(want.attempt, num(r, "attempt"))
    assert.are.equal(want.max, num(r, "max_attempts"))
    assert.are.equal(want.outcome, r.fields.outcome)
    assert.is_true(num(r, "duration_ms") >= 0, "duration_ms")
    if want.exit_code then
        assert.are.equal(want.exit_code, num(r, "exit_code"))
    end
    assert.are.equal(want.reason, r.fields.reason)
    if want.retry then
        assert.matches(RFC3339_MS, r.fields.next_attempt_at)
    else
        assert.is_nil(r.fields.next_attempt_at)
    end
end


local function scenario(format)
    return function()
        local w, d
        local ids = {}

        setup(function()
            w = world.new()
            d = w:daemon("log-" .. format, { RELAY_LOG_FORMAT = format })
            w:ready(d)
            ids.flaky = w:publish('{"t":"flaky","k":1}')
            ids.exit3 = w:publish('{"t":"exit3"}')
            ids.hang = w:publish('{"t":"hang"}')
            d:wait_until(function()
                return w:pending() == 0 and dlq_id_of(w, ids.exit3) and dlq_id_of(w, ids.hang)
            end, 90, "every message settled")
            -- the records of the last outcome are written before the ACK
            d:wait_until(function() return #outcome_records(d, format, ids.hang) == 3 end, 30, "hang's records")
        end)

        teardown(function()
            if d then
                d:stop("TERM")
            end
            if w then
                w:close()
            end
        end)

        it("logs a failed attempt with its retry, then the success", function()
            local records = outcome_records(d, format, ids.flaky)
            assert.are.equal(2, #records, d:tail(40))
            assert_attempt(records[1], { level = "warn", msg = "attempt failed", handler = "flaky", attempt = 1,
                max = 5, outcome = "failed", exit_code = 1, reason = "exit status 1", retry = true })
            assert_attempt(records[2], { level = "info", msg = "attempt succeeded", handler = "flaky", attempt = 2,
                max = 5, outcome = "succeeded", exit_code = 0 })
        end)

        it("logs every attempt of an exhausted handler and one dead letter with its DLQ id", function()
            local records = outcome_records(d, format, ids.exit3)
            assert.are.equal(4, #records, d:tail(40))
            for n = 1, 3 do
                assert_attempt(records[n], { level = "warn", msg = "attempt failed", handler = "exit3", attempt = n,
                    max = 3, outcome = "failed", exit_code = 3, reason = "exit status 3", retry = n < 3 })
            end
            local dead = records[4]
            assert.are.equal("warn", dead.level)
            assert.are.equal("dead-lettered", dead.msg)
            assert.are.equal("exit3", dead.fields.handler)
            assert.are.equal("exit status 3", dead.fields.reason)
            assert.are.equal(3, num(dead, "attempts"))
            assert.are.equal(dlq_id_of(w, ids.exit3), dead.fields.dlq_id)
        end)

        it("logs a timeout as its own outcome with the reason", function()
            local records = outcome_records(d, format, ids.hang)
            assert.are.equal(3, #records, d:tail(40))
            for n = 1, 2 do
                assert_attempt(records[n], { level = "warn", msg = "attempt timed out", handler = "hang",
                    attempt = n, max = 2, outcome = "timeout", reason = "timeout after 1s", retry = n < 2 })
            end
            assert.are.equal("dead-lettered", records[3].msg)
            assert.are.equal(dlq_id_of(w, ids.hang), records[3].fields.dlq_id)
        end)

        it("writes every record as one line of its format", function()
            for _, line in ipairs(d.lines) do
                if format == "json" then
                    assert.is_table(cjson.decode(line), line)
                else
                    assert.matches(TEXT_RECORD, line)
                end
            end
        end)
    end
end


maybe("attempt outcomes in the text log #compressed", scenario("text"))
maybe("attempt outcomes in the JSON log #compressed", scenario("json"))


maybe_any_build("a container the host cannot start", function()
    it("is logged with the runtime's own reason, uncharged", function()
        -- an image whose /proc is a file: the template is valid (its program is
        -- there), runc refuses to mount proc on it
        local apps = daemon_helper.tmpdir("apps")
        for _, dir in ipairs({ "/hf", "/hf/img", "/hf/img/bin" }) do
            assert(fs.mkdir(apps .. dir, 493))
        end
        assert(fs.write_file(apps .. "/hf/img/bin/true", "#!/bin/sh\n"))
        assert(fs.chmod(apps .. "/hf/img/bin/true", 493))
        assert(fs.write_file(apps .. "/hf/img/proc", ""))
        assert(fs.write_file(apps .. "/hf/template.yaml", "runtime:\n  image: img\n  command: [/bin/true]\n"
            .. "events:\n  - handler: h\n    pattern: {t: [hf]}\n"))
        local w = world.new({ apps = apps })
        local ok, err = pcall(function()
            local d = w:daemon("hostfail")
            w:ready(d)
            local id = w:publish('{"t":"hf"}')
            local line = d:wait_until(function()
                return d:grep("host could not start the container; the attempt is not charged")[1]
            end, 30, "the host failure")
            local r = assert(parse_text(line, { "host could not start the container; the attempt is not charged" }))
            assert.are.equal("warn", r.level)
            assert.are.same({ "hf", "h", id }, { r.fields.app, r.fields.handler, r.fields.message_id })
            assert.matches("runc", r.fields.reason)
            assert.matches('mounting "proc"', r.fields.reason, 1, true)
            assert.are.equal(0, #outcome_records(d, "text", id))  -- not an attempt
            d:stop("TERM")
        end)
        w:close()
        fs.rm_rf(apps)
        assert(ok, err)
    end)
end)
