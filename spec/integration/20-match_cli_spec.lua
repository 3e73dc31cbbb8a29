-- `relay match` and `relay app validate`, run as the built binary on the fixtures under
-- spec/fixtures: stdout, stderr and exit codes.
local ffi = require("ffi")
local fs = require("relay.fs")
local tmp = require("helpers.tmp")

pcall(ffi.cdef, "long readlink(const char *path, char *buf, size_t size);")

local BASIC = "spec/fixtures/apps/basic"
local VALID = "spec/fixtures/apps/valid"
local PATTERNS = "spec/fixtures/patterns"
local EVENTS = "spec/fixtures/events"

local INVALID_APPS_STDERR = "relay: " .. BASIC .. '/Bad_Name: invalid app name "Bad_Name": app names match '
    .. "[a-z0-9][a-z0-9_-]*\n"
    .. "relay: " .. BASIC .. "/broken/template.yaml:7:19: status: a field condition must be a list; "
    .. "write [COMPLETED]\n"
    .. "relay: " .. BASIC .. "/notemplate: missing template.yaml\n"


--- The relay binary: $RELAY_BIN, else the host running these specs.
local function relay_bin()
    local env = os.getenv("RELAY_BIN")
    if env and env ~= "" then
        return env
    end
    local buf = ffi.new("char[4096]")
    local n = ffi.C.readlink("/proc/self/exe", buf, 4095)
    assert(n > 0, "cannot find the relay binary")
    return ffi.string(buf, n)
end

local BIN = relay_bin()


local function quote(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end


--- What a shell command prints.
local function shell(command)
    local p = assert(io.popen(command))
    local out = p:read("*a")
    p:close()
    return out
end


--- What a bash script prints, run under a 180 s bound beside FIFOs made for it in a fresh
-- directory: lines(path) gives the script's lines, path(name) the quoted path of a file there.
local function with_fifos(fifos, lines)
    local dir = tmp.mkdtemp("relay-match-")
    local function path(name)
        return quote(dir .. "/" .. name)
    end
    local made = {}
    for i, name in ipairs(fifos) do
        made[i] = path(name)
    end
    local script = lines(path)
    table.insert(script, 1, "mkfifo " .. table.concat(made, " "))
    local out = shell("timeout 180 bash -c " .. quote(table.concat(script, "\n")) .. " 2>&1")
    fs.rm_rf(dir)
    return out
end


local function slurp(path)
    local f = assert(io.open(path, "rb"))
    local text = f:read("*a")
    f:close()
    os.remove(path)
    return text
end


--- Run relay with `args` (a list), optional stdin text and environment overrides.
-- @return exit code, stdout, stderr
local function relay(args, opts)
    opts = opts or {}
    local out, err = os.tmpname(), os.tmpname()
    local parts = { "env", "-u", "RELAY_APPS", "-u", "RELAY_MAX_EVENT_BYTES" }
    for k, v in pairs(opts.env or {}) do
        parts[#parts + 1] = quote(k .. "=" .. v)
    end
    parts[#parts + 1] = quote(BIN)
    for _, a in ipairs(args) do
        parts[#parts + 1] = quote(a)
    end
    local cmd = table.concat(parts, " ") .. " >" .. out .. " 2>" .. err
    local input
    if opts.stdin then
        input = os.tmpname()
        local f = assert(io.open(input, "wb"))
        f:write(opts.stdin)
        f:close()
        cmd = cmd .. " <" .. input
    else
        cmd = cmd .. " </dev/null"
    end
    local p = assert(io.popen(cmd .. "; echo $?"))
    local code = tonumber(p:read("*a"))
    p:close()
    if input then
        os.remove(input)
    end
    return code, slurp(out), slurp(err)
end


local USERS_INSERT = '{"event_name":"INSERT","table_name":"users"}'


describe("relay match --event (apps)", function()
    it("prints one <app>/<handler> per matching rule in dispatch order, exit 0", function()
        local code, out, err = relay({ "match", "--apps", VALID, "--event", USERS_INSERT })
        assert.are.equal("alpha/users.created\nalpha/any.insert\nbeta/users.all\n", out)
        assert.are.equal("", err)
        assert.are.equal(0, code)
    end)

    it("exits 1 with no output when nothing matches", function()
        local code, out, err = relay({ "match", "--apps", VALID, "--event", '{"event_name":"DELETE"}' })
        assert.are.same({ 1, "", "" }, { code, out, err })
    end)

    it("reports invalid apps on stderr and matches with the valid ones", function()
        local code, out, err = relay({ "match", "--apps", BASIC, "--event", USERS_INSERT })
        assert.are.equal("alpha/users.created\nalpha/any.insert\nbeta/users.all\n", out)
        assert.are.equal(INVALID_APPS_STDERR, err)
        assert.are.equal(0, code)
    end)

    it("exits 2 on a malformed event", function()
        for _, event in ipairs({ '{"event_name":', "[1]", "", '{"a":"\255"}' }) do
            local code, out, err = relay({ "match", "--apps", VALID, "--event", event })
            assert.are.equal(2, code, event)
            assert.are.equal("", out)
            assert.matches("^relay: malformed event: [^\n]+\n$", err)
        end
    end)

    it("defaults --apps to RELAY_APPS and honours RELAY_MAX_EVENT_BYTES", function()
        local code, out = relay({ "match", "--event", USERS_INSERT }, { env = { RELAY_APPS = VALID } })
        assert.are.equal(0, code)
        assert.are.equal("alpha/users.created\nalpha/any.insert\nbeta/users.all\n", out)
        local code2, out2, err2 = relay({ "match", "--event", USERS_INSERT },
            { env = { RELAY_APPS = VALID, RELAY_MAX_EVENT_BYTES = "16" } })
        assert.are.equal(2, code2)
        assert.are.equal("", out2)
        assert.matches("^relay: malformed event: .*too large", err2)
    end)

    it("exits 2 on usage and environment errors", function()
        local code, _, err = relay({ "match", "--apps", VALID })
        assert.are.equal(2, code)
        assert.are.equal("relay: match needs --event JSON or --events FILE\n", err)
        code, _, err = relay({ "match", "--apps", VALID, "--event", "{}", "--count" })
        assert.are.equal(2, code)
        assert.are.equal("relay: --count works with --events only\n", err)
        code, _, err = relay({ "match", "--apps", "spec/fixtures/apps/nonexistent", "--event", "{}" })
        assert.are.equal(2, code)
        assert.are.equal("relay: apps directory spec/fixtures/apps/nonexistent: No such file or directory\n", err)
        code = relay({ "match", "--event", "{}", "--events", "-" })
        assert.are.equal(2, code)
    end)
end)


describe("relay match --pattern", function()
    it("prints match / no match with exit 0 / 1", function()
        local code, out, err = relay({ "match", "--pattern", PATTERNS .. "/nested.yaml", "--event",
            '{"new_image":{"status":"FAILED","id":"user_7"}}' })
        assert.are.same({ 0, "match\n", "" }, { code, out, err })
        code, out, err = relay({ "match", "--pattern", PATTERNS .. "/nested.yaml", "--event",
            '{"new_image":{"status":"FAILED","id":"org_7"}}' })
        assert.are.same({ 1, "no match\n", "" }, { code, out, err })
    end)

    it("evaluates now() at match time", function()
        local recent = os.date("!%Y-%m-%dT%H:%M:%SZ", os.time() - 60)
        local old = os.date("!%Y-%m-%dT%H:%M:%SZ", os.time() - 600)
        local code, out = relay({ "match", "--pattern", PATTERNS .. "/recent.yaml", "--event",
            '{"created_at":"' .. recent .. '"}' })
        assert.are.same({ 0, "match\n" }, { code, out })
        code, out = relay({ "match", "--pattern", PATTERNS .. "/recent.yaml", "--event",
            '{"created_at":"' .. old .. '"}' })
        assert.are.same({ 1, "no match\n" }, { code, out })
    end)

    it("exits 2 with file:line:col on an invalid pattern", function()
        local code, out, err = relay({ "match", "--pattern", PATTERNS .. "/invalid.yaml", "--event", "{}" })
        assert.are.equal(2, code)
        assert.are.equal("", out)
        assert.are.equal("relay: " .. PATTERNS .. '/invalid.yaml:4:7: id: unknown operator "prefx"; '
            .. "did you mean prefix?\n", err)
        code, out, err = relay({ "match", "--pattern", PATTERNS .. "/broken_yaml.yaml", "--event", "{}" })
        assert.are.equal(2, code)
        assert.are.equal("", out)
        assert.matches("^relay: " .. PATTERNS:gsub("%p", "%%%0") .. "/broken_yaml.yaml:%d+:%d+: ", err)
        code, out, err = relay({ "match", "--pattern", PATTERNS .. "/missing.yaml", "--event", "{}" })
        assert.are.equal("", out)
        assert.are.equal(2, code)
        assert.matches("missing.yaml: cannot read: ", err)
        code, out, err = relay({ "match", "--pattern", PATTERNS .. "/wrapped.yaml", "--event", '{"type":"order"}' })
        assert.are.same({ 2, "" }, { code, out })
        assert.matches("^relay: " .. PATTERNS:gsub("%p", "%%%0") .. "/wrapped.yaml:2:1: this file holds a "
            .. "`pattern:` key; a %-%-pattern file holds the pattern itself", err)
    end)

    it("refuses --pattern together with --apps", function()
        local code = relay({ "match", "--apps", VALID, "--pattern", PATTERNS .. "/nested.yaml", "--event", "{}" })
        assert.are.equal(2, code)
    end)
end)


describe("relay match --events (bulk)", function()
    it("prints <line> <app>/<handler> per match and reports malformed lines", function()
        local code, out, err = relay({ "match", "--apps", VALID, "--events", EVENTS .. "/users.jsonl" })
        assert.are.equal("1 alpha/users.created\n1 alpha/any.insert\n1 beta/users.all\n2 beta/users.all\n"
            .. "3 alpha/any.insert\n", out)
        assert.matches("^relay: " .. EVENTS:gsub("%p", "%%%0") .. "/users.jsonl:4: [^\n]+\n$", err)
        assert.are.equal(0, code)
    end)

    it("--count prints only matched N of M", function()
        local code, out = relay({ "match", "--apps", VALID, "--events", EVENTS .. "/users.jsonl", "--count" })
        assert.are.same({ 0, "matched 3 of 5\n" }, { code, out })
    end)

    it("prints JSON with --json: per match, per event, and for --count", function()
        local code, out = relay({ "match", "--apps", VALID, "--events", EVENTS .. "/users.jsonl", "--json" })
        assert.are.equal(0, code)
        assert.are.equal('{"line":1,"invocation":"alpha/users.created"}\n{"line":1,"invocation":"alpha/any.insert"}\n'
            .. '{"line":1,"invocation":"beta/users.all"}\n{"line":2,"invocation":"beta/users.all"}\n'
            .. '{"line":3,"invocation":"alpha/any.insert"}\n', out)
        code, out = relay({ "match", "--apps", VALID, "--events", EVENTS .. "/users.jsonl", "--count", "--json" })
        assert.are.same({ 0, '{"matched":3,"total":5}\n' }, { code, out })
        code, out = relay({ "match", "--pattern", PATTERNS .. "/nested.yaml", "--events", EVENTS .. "/images.jsonl",
            "--json" })
        assert.are.same({ 0, '{"line":1}\n{"line":4}\n' }, { code, out })
        code, out = relay({ "match", "--apps", VALID, "--event", '{"nothing":1}', "--json" })
        assert.are.same({ 1, '{"match":false,"invocations":[]}\n' }, { code, out })
        code, out = relay({ "match", "--pattern", PATTERNS .. "/nested.yaml", "--event", "{}", "--json" })
        assert.are.same({ 1, '{"match":false}\n' }, { code, out })
    end)

    it("reads stdin with -, and prints line numbers with --pattern", function()
        local f = assert(io.open(EVENTS .. "/images.jsonl", "rb"))
        local text = f:read("*a")
        f:close()
        local code, out, err = relay({ "match", "--pattern", PATTERNS .. "/nested.yaml", "--events", "-" },
            { stdin = text })
        assert.are.equal("1\n4\n", out)
        assert.matches("^relay: %-:3: [^\n]+\n$", err)
        assert.are.equal(0, code)
        code, out = relay({ "match", "--pattern", PATTERNS .. "/nested.yaml", "--events", "-", "--count" },
            { stdin = text })
        assert.are.same({ 0, "matched 2 of 4\n" }, { code, out })
    end)

    it("exits 1 when no event matched", function()
        local code, out = relay({ "match", "--apps", VALID, "--events", "-", "--count" },
            { stdin = '{"a":1}\n{"b":2}\n' })
        assert.are.same({ 1, "matched 0 of 2\n" }, { code, out })
    end)

    it("exits 2 when the file cannot be read", function()
        local code, _, err = relay({ "match", "--apps", VALID, "--events", EVENTS .. "/missing.jsonl" })
        assert.are.equal(2, code)
        assert.matches("missing.jsonl", err)
    end)

    it("reports the apps' error before opening a FIFO given as --events", function()
        -- A regular file is opened before the rules load (to map it ahead); a FIFO is not,
        -- as its open would wait for a writer.
        local out = with_fifos({ "events" }, function(path)
            return { "timeout 60 env -u RELAY_APPS " .. quote(BIN) .. " match --apps "
                .. "spec/fixtures/apps/nonexistent --events " .. path("events") .. " 2>&1 </dev/null; echo exit $?" }
        end)
        assert.are.equal("relay: apps directory spec/fixtures/apps/nonexistent: No such file or directory\n"
            .. "exit 2\n", out)
    end)

    it("prints the matches of a pipe's lines as they arrive, while the writer holds it open", function()
        -- The writer sends one event and waits (up to 60 s) for its first match line before
        -- it sends the next: output held back until the input ends would make it wait that out.
        local out = with_fifos({ "in", "out" }, function(path)
            return {
                "env -u RELAY_APPS " .. quote(BIN) .. " match --apps " .. VALID .. " --events " .. path("in")
                    .. " >" .. path("out") .. " &",
                -- Opened for reading and writing, the input does not wait for relay to open it
                -- (which it does only once its rules are loaded, or never if it fails first).
                "exec 4<" .. path("out") .. " 3<>" .. path("in"),
                "echo " .. quote(USERS_INSERT) .. " >&3",
                "if read -r -t 60 first <&4; then echo \"first: $first\"; else echo 'nothing while it was open'; fi",
                "echo " .. quote(USERS_INSERT) .. " >&3",
                "exec 3>&-",
                "cat <&4",
                "wait $!",
                "echo \"exit $?\"",
            }
        end)
        assert.are.equal("first: 1 alpha/users.created\n1 alpha/any.insert\n1 beta/users.all\n"
            .. "2 alpha/users.created\n2 alpha/any.insert\n2 beta/users.all\nexit 0\n", out)
    end)

    it("ends when the reader of its output goes away while a pipe is still open", function()
        -- `tail -f … | relay match … | head -1`: once head has its line and exits, the next
        -- flush fails and relay ends (exit 2, naming the error) instead of reading on.
        local out = with_fifos({ "in", "out", "code" }, function(path)
            return {
                "exec 3<>" .. path("in") .. " 5<>" .. path("code"),
                "{ env -u RELAY_APPS " .. quote(BIN) .. " match --apps " .. VALID .. " --events " .. path("in")
                    .. " >" .. path("out") .. " 2>" .. path("err") .. "; echo \"relay exit $?\" >&5; } 3>&- &",
                "echo " .. quote(USERS_INSERT) .. " >&3",
                "head -1 <" .. path("out"), -- prints the first match line and goes
                "for _ in 1 2 3; do echo " .. quote(USERS_INSERT) .. " >&3; done",
                -- The script holds the input's only writer: if relay still runs, it ends with it.
                "if read -r -t 60 code <&5; then echo \"$code\"; cat " .. path("err")
                    .. "; else echo 'relay still runs'; fi",
            }
        end)
        assert.are.equal("1 alpha/users.created\nrelay exit 2\nrelay: cannot write the output: Broken pipe\n",
            out)
    end)

    it("matches a file large enough to map ahead as it matches the same lines read from stdin", function()
        local dir = tmp.mkdtemp("relay-match-")
        local path = dir .. "/events.jsonl"
        local lines = string.rep(USERS_INSERT .. "\n", 150000) .. '{"a":1}\n' .. string.rep("x\n", 3)
            .. string.rep(USERS_INSERT .. "\n", 50000) -- 9 MB: past the probe's 8 MiB
        local f = assert(io.open(path, "wb"))
        f:write(lines)
        f:close()
        local code, out, err = relay({ "match", "--apps", VALID, "--events", path, "--count" })
        local code_in, out_in, err_in = relay({ "match", "--apps", VALID, "--events", "-", "--count" },
            { stdin = lines })
        fs.rm_rf(dir)
        assert.are.same({ 0, "matched 200000 of 200004\n" }, { code, out })
        assert.are.same({ code, out }, { code_in, out_in })
        assert.are.equal(err_in:gsub("relay: %-:", "relay: FILE:"), err:gsub("relay: [^:]*:", "relay: FILE:"))
    end)

    -- A file cut short while it is read must end the command with a message, not a crash
    -- (through a mapping it was a SIGBUS). One CPU (taskset) makes the scan match a chunk,
    -- then print its matches, then match the next: relay blocks printing the first chunk's
    -- matches into the pipe, the file is emptied while it waits, and the next chunk's bytes
    -- are gone.
    it("exits 2 naming the file when the file shrinks while it is read", function()
        local dir = tmp.mkdtemp("relay-match-")
        local path = dir .. "/events.jsonl"
        local f = assert(io.open(path, "wb"))
        f:write(string.rep(USERS_INSERT .. "\n", 100000)) -- 4.5 MB: five 1 MiB chunks
        f:close()
        local err_path = dir .. "/stderr"
        local p = assert(io.popen("taskset -c 0 env -u RELAY_APPS " .. quote(BIN) .. " match --apps " .. VALID
            .. " --events " .. quote(path) .. " 2>" .. quote(err_path) .. " </dev/null; echo exit $?"))
        assert.matches("^1 alpha/", p:read("*l"))
        assert(io.open(path, "wb")):close()
        local rest = p:read("*a")
        p:close()
        local err = slurp(err_path)
        fs.rm_rf(dir)
        assert.matches("\nexit 2\n$", rest)
        assert.are.equal("relay: " .. path .. ": the file changed while it was read (it shrank)\n", err)
    end)
end)


describe("m:scan (the binding under relay match --events)", function()
    local matcher = require("relay.core.matcher")

    --- A file holding `text`, open for reading, and a matcher of rules {a: [0]}, {a: [{gte: 0}]}.
    local function setup(text)
        local path = os.tmpname()
        local f = assert(io.open(path, "wb"))
        f:write(text)
        f:close()
        local m = matcher.new()
        assert(m:add('{"a":[{"eq":0}]}'))
        assert(m:add('{"a":[{"gte":0}]}'))
        f = assert(io.open(path, "rb"))
        os.remove(path)
        return m, f
    end

    it("hands matches over in batches, in input order, before each malformed line", function()
        local lines = {}
        for i = 1, 1500 do
            lines[i] = i == 700 and "{" or string.format('{"a":%d}', i % 3)
        end
        local m, f = setup(table.concat(lines, "\n"))
        local seen, batches = {}, 0
        local matched, total = m:scan(f, {
            on_match = function(ls, ids, n)
                batches = batches + 1
                for i = 1, n do
                    seen[#seen + 1] = ls[i] .. ":" .. ids[i]
                end
            end,
            on_malformed = function(line, reason)
                seen[#seen + 1] = line .. "!" .. reason
            end,
        })
        f:close()
        local want = {}
        for i = 1, 1500 do
            if i == 700 then
                want[#want + 1] = "700!invalid JSON at byte 1: expected a string key"
            else
                if i % 3 == 0 then
                    want[#want + 1] = i .. ":0"
                end
                want[#want + 1] = i .. ":1"
            end
        end
        assert.are.same(want, seen)
        assert.are.same({ 1499, 1500 }, { matched, total })
        assert.is_true(batches >= 3) -- 1999 pairs: two full batches of 1024 or fewer
    end)

    -- Read, a shrunken file is a short read; mapped, its pages are gone (SIGBUS).
    for _, access in ipairs({ "read", "map" }) do
        it("returns an error, not a crash, when the file shrinks during the scan (" .. access .. ")", function()
            local path = os.tmpname()
            local f = assert(io.open(path, "wb"))
            f:write(string.rep('{"a":0}\n', 400000)) -- 3.2 MB: four 1 MiB chunks
            f:close()
            local m = matcher.new()
            assert(m:add('{"a":[{"eq":0}]}'))
            f = assert(io.open(path, "rb"))
            -- On one thread the first chunk is replayed before the second is read.
            local matched, err = m:scan(f, {
                threads = 1,
                access = access,
                on_match = function()
                    assert(io.open(path, "wb")):close()
                end,
            })
            f:close()
            os.remove(path)
            assert.is_nil(matched)
            assert.are.equal("the file changed while it was read (it shrank)", err)
        end)
    end

    it("reads or maps a file as asked, with the same result, and refuses another access", function()
        local m, f = setup('{"a":1}\n{"a":-2}\nnot json\n{"a":0}\n')
        for _, access in ipairs({ "auto", "read", "map" }) do
            f:seek("set", 0)
            local lines = {}
            local matched, total = m:scan(f, {
                access = access,
                on_match = function(at, _, n)
                    for i = 1, n do
                        lines[#lines + 1] = at[i]
                    end
                end,
            })
            assert.are.same({ 2, 4 }, { matched, total })
            assert.are.same({ 1, 4, 4 }, lines)
        end
        assert.has_error(function()
            m:scan(f, { access = "mmap" })
        end)
        f:close()
    end)

    it("raises a callback's error once the scan is over, and refuses a closed file", function()
        local m, f = setup('{"a":1}\n{"a":2}\n')
        assert.has_error(function()
            m:scan(f, { on_match = function() error("boom", 0) end })
        end, "boom")
        f:close()
        assert.has_error(function()
            m:scan(f, {})
        end)
    end)
end)


describe("relay app validate", function()
    it("prints ok <app> per valid app, errors with file:line:col, exit 1 if any invalid", function()
        local code, out, err = relay({ "app", "validate", "--apps", BASIC })
        assert.are.equal("ok alpha\nok beta\n", out)
        assert.are.equal(INVALID_APPS_STDERR, err)
        assert.are.equal(1, code)
    end)

    it("exits 0 when every app is valid (default: RELAY_APPS)", function()
        local code, out, err = relay({ "app", "validate" }, { env = { RELAY_APPS = VALID } })
        assert.are.same({ 0, "ok alpha\nok beta\n", "" }, { code, out, err })
    end)

    it("validates the given app directories", function()
        local code, out, err = relay({ "app", "validate", BASIC .. "/alpha", BASIC .. "/broken/" })
        assert.are.equal("ok alpha\n", out)
        assert.are.equal("relay: " .. BASIC .. "/broken/template.yaml:7:19: status: a field condition must "
            .. "be a list; write [COMPLETED]\n", err)
        assert.are.equal(1, code)
        code, out = relay({ "app", "validate", BASIC .. "/beta" })
        assert.are.same({ 0, "ok beta\n" }, { code, out })
        -- An apps directory validates every app in it; a missing directory is invalid.
        code, out, err = relay({ "app", "validate", VALID })
        assert.are.same({ 0, "ok alpha\nok beta\n", "" }, { code, out, err })
        code, out, err = relay({ "app", "validate", "spec/fixtures/apps/nonexistent" })
        assert.are.same({ 1, "", "relay: spec/fixtures/apps/nonexistent: no such directory\n" }, { code, out, err })
    end)

    it("prints every error of a template, one line each, and all of them in --json", function()
        local dir = require("helpers.tmp").mkdtemp("relay-validate-")
        assert(fs.mkdir(dir .. "/two"))
        local template = dir .. "/two/template.yaml"
        assert(fs.write_file(template, "runtime:\n  command: [run]\n  pids: 0\nconcurrency: x\n"))
        local code, out, err = relay({ "app", "validate", dir .. "/two" })
        assert.are.same({ 1, "" }, { code, out })
        assert.are.equal("relay: " .. template .. ":3:9: runtime.pids must be from 4 to 4194304, not 0\n"
            .. "relay: " .. template .. ":4:14: concurrency must be a whole number from 1 to 65535, "
            .. 'not the string "x"\n',
            err)
        code, out = relay({ "app", "validate", "--json", dir .. "/two" })
        local obj = require("cjson").decode(out)
        assert.are.equal(1, code)
        assert.are.equal(2, #obj.errors)
        assert.are.equal(obj.errors[1] .. " (and 1 more)", obj.error)
        fs.rm_rf(dir)
    end)

    it("reports a program missing from the image, or not executable, at runtime.command", function()
        local dir = require("helpers.tmp").mkdtemp("relay-validate-")
        assert(fs.mkdir(dir .. "/prog"))
        local template = dir .. "/prog/template.yaml"
        assert(fs.write_file(template, "runtime:\n  command: [/app/run.sh]\n"))
        assert(fs.write_file(dir .. "/prog/run.sh", "#!/bin/sh\n"))
        local code, out, err = relay({ "app", "validate", dir .. "/prog" })
        assert.are.same({ 1, "", "relay: " .. template .. ":2:13: runtime.command[1]: /app/run.sh is not "
            .. "executable (chmod +x)\n" }, { code, out, err })
        assert(fs.chmod(dir .. "/prog/run.sh", 493))
        code, out = relay({ "app", "validate", dir .. "/prog" })
        assert.are.same({ 0, "ok prog\n" }, { code, out })
        assert(fs.write_file(template, "runtime:\n  command: [no-such-program-here, x]\n"))
        code, out, err = relay({ "app", "validate", dir .. "/prog" })
        assert.are.same({ 1, "" }, { code, out })
        assert.matches(":2:13: runtime.command%[1%]: no%-such%-program%-here is not found in the container's PATH",
            err)
        fs.rm_rf(dir)
    end)

    it("prints one JSON object per app with --json", function()
        local code, out = relay({ "app", "validate", "--json", "--apps", VALID })
        assert.are.equal(0, code)
        local cjson = require("cjson")
        local lines = {}
        for line in out:gmatch("[^\n]+") do
            lines[#lines + 1] = cjson.decode(line)
        end
        assert.are.same({ { app = "alpha", state = "ok" }, { app = "beta", state = "ok" } }, lines)
    end)

end)
