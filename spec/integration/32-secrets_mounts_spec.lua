-- runtime.secrets and runtime.mounts under the runc driver for real (root
-- and runc needed; skipped otherwise), issue 14 item 3: a handler reads its
-- secrets as read-only files of its own uid and as a variable; no value is
-- ever in the daemon's log, in a process's argv or in a file others can
-- read under the state directory; a writable mount brings a result out, a
-- read-only one refuses writes; a source outside RELAY_ALLOWED_MOUNTS, a
-- symlink out of it and a missing secret make the app unavailable with the
-- reason.
local cli = require("helpers.cli")
local daemon_helper = require("helpers.daemon")
local fs = require("relay.fs")
local runtime = require("relay.runtime")
local safefs = require("relay.core.safefs")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
local maybe = usable and describe or pending

-- values no part of the spec's own fixtures writes anywhere but where a
-- secret comes from
local FILE_SECRET = "file-secret-7f3a9c1e"
local ENV_FILE_SECRET = "env-file-secret-2b8d4f60"
local ENV_VAR_SECRET = "env-var-secret-91c5e2a7"
local SECRET_VALUES = { FILE_SECRET, ENV_FILE_SECRET, ENV_VAR_SECRET }

local VAULT = [[
#!/bin/sh
case "$RELAY_HANDLER" in
  read)
    cd /run/secrets || exit 9
    for f in api_key SPEC_TOKEN; do echo "file $f $(stat -c '%a %u' $f) $(sha256sum < $f | cut -d' ' -f1)"; done
    echo "env $(printf %s "$SPEC_ENV_TOKEN" | sha256sum | cut -d' ' -f1)"
    echo "uid $(id -u)"
    (echo x > /run/secrets/api_key) 2>/dev/null && echo "secret writable" || echo "secret read-only"
    (touch /run/secrets/new) 2>/dev/null && echo "dir writable" || echo "dir read-only" ;;
  hold)
    touch "/results/started-$RELAY_MESSAGE_ID"
    while [ ! -e "/results/release-$RELAY_MESSAGE_ID" ]; do sleep 0.05; done
    echo held ;;
esac
]]

local ROOT, APPS, SECRETS, ALLOWED, OUT, REF


local function write(path, text, mode)
    assert(fs.write_file(path, text))
    if mode then
        assert(fs.chmod(path, mode))
    end
end


local function app(name, runtime_lines, script)
    assert(fs.mkdir_p(APPS .. "/" .. name))
    write(APPS .. "/" .. name .. "/template.yaml", "runtime:\n  image: host\n  command: [/bin/sh, /app/h.sh]\n" ..
        runtime_lines .. "events:\n  - {handler: read, pattern: {t: [" .. name .. "]}}\n" ..
        "  - {handler: hold, pattern: {t: [" .. name .. "-hold]}}\n  - {handler: write, pattern: {t: [w]}}\n")
    write(APPS .. "/" .. name .. "/h.sh", script or VAULT)
end


local function make_world()
    ROOT = daemon_helper.tmpdir("secrets")
    APPS, SECRETS, ALLOWED = ROOT .. "/apps", ROOT .. "/secrets", ROOT .. "/allowed"
    OUT, REF = ALLOWED .. "/out", ALLOWED .. "/ref"
    assert(fs.mkdir_p(SECRETS, 448))
    write(SECRETS .. "/api_key", FILE_SECRET, 384)
    assert(fs.mkdir_p(OUT, 493))
    assert(fs.chmod(OUT, 1023)) -- 1777: the handler's host uid writes results here
    assert(fs.mkdir_p(REF, 493))
    write(REF .. "/input.txt", "reference data\n", 420)
    assert(fs.mkdir_p(ROOT .. "/elsewhere", 493))
    assert(fs.symlink("/etc", ALLOWED .. "/etc-link"))
    app("vault", "  secrets: [api_key, env:SPEC_TOKEN, {name: env:SPEC_ENV_TOKEN, as: env}]\n" ..
        "  mounts:\n    - {source: " .. OUT .. ", target: /results, writable: true}\n")
    local writer = [[
#!/bin/sh
echo "result of $RELAY_MESSAGE_ID" > /results/result.txt && echo wrote
(echo x > /reference/input.txt) 2>/dev/null && echo "ref writable" || echo "ref read-only"
cat /reference/input.txt
]]
    app("results", "  mounts:\n    - {source: " .. OUT .. ", target: /results, writable: true}\n" ..
        "    - {source: " .. REF .. ", target: /reference}\n", writer)
    app("outside", "  mounts: [{source: " .. ROOT .. "/elsewhere, target: /data}]\n", writer)
    app("escape", "  mounts: [{source: " .. ALLOWED .. "/etc-link, target: /data}]\n", writer)
    app("nosecret", "  secrets: [missing_key, env:SPEC_UNSET_VARIABLE]\n", writer)
    -- an image whose mountpoints are symlinks out of it (the app author's
    -- directory): Relay must not create them on the host
    app("planted", "  mounts: [{source: " .. OUT .. ", target: /results/deep, writable: true}]\n" ..
        "  secrets: [api_key]\n", writer)
    local tpl = APPS .. "/planted/template.yaml"
    write(tpl, (fs.read_file(tpl):gsub("image: host", "image: rootfs")))
    assert(fs.mkdir_p(APPS .. "/planted/rootfs", 493))
    assert(fs.mkdir_p(ROOT .. "/victim", 493))
    assert(fs.symlink(ROOT .. "/victim", APPS .. "/planted/rootfs/results"))
    assert(fs.symlink(ROOT .. "/victim", APPS .. "/planted/rootfs/run"))
end


local function env()
    return {
        RELAY_APPS = APPS, RELAY_STATE_DIR = ROOT .. "/state", RELAY_RUNTIME = "runc", RELAY_CONSUMER = "sectest",
        RELAY_SECRETS_DIR = SECRETS, RELAY_ALLOWED_MOUNTS = ALLOWED, SPEC_TOKEN = ENV_FILE_SECRET,
        SPEC_ENV_TOKEN = ENV_VAR_SECRET, REDIS_URL = "redis://127.0.0.1:1/0",
    }
end


local function invoke(name, handler, driver)
    local vars = env()
    vars.RELAY_RUNTIME = driver or "runc"
    return cli.run({ "app", "invoke", name, handler, "--event", '{"t":"x"}' }, vars)
end


local function sha256(text)
    local p = io.popen("printf %s " .. cli.quote(text) .. " | sha256sum")
    local out = p:read("*l")
    p:close()
    return out:match("^(%x+)")
end


--- The `relay app ls --json` row of an app.
local function app_row(name)
    local r = cli.run({ "app", "ls", "--json" }, env())
    assert.are.equal(0, r.code, r.stderr)
    for line in r.stdout:gmatch("[^\n]+") do
        local row = require("cjson").decode(line)
        if row.name == name then
            return row
        end
    end
    error("no app " .. name .. " in " .. r.stdout)
end


local function assert_no_secret(text, where)
    for _, value in ipairs(SECRET_VALUES) do
        assert.is_nil(text:find(value, 1, true), "a secret value in " .. where)
    end
end


--- Every file under dir (no symlink followed) that others may read.
local function world_readable_files(dir, out)
    out = out or {}
    for _, e in ipairs(fs.list(dir) or {}) do
        local path = dir .. "/" .. e.name
        local st = safefs.lstat(path)
        if st and st.type == "dir" then
            world_readable_files(path, out)
        elseif st and st.type == "file" and st.mode % 8 >= 4 then
            out[#out + 1] = path
        end
    end
    return out
end


--- The secret files of running invocations under dir: { path = lstat }.
local function secret_files_under(dir, out)
    out = out or {}
    for _, e in ipairs(fs.list(dir) or {}) do
        local path = dir .. "/" .. e.name
        local st = safefs.lstat(path)
        if st and st.type == "dir" then
            secret_files_under(path, out)
        elseif st and st.type == "file" and path:find("/secrets/api_key$") then
            out[path] = st
        end
    end
    return out
end


maybe("secrets and mounts under runc", function()
    setup(make_world)

    teardown(function()
        runtime.new({ runtime = "runc", state_dir = ROOT .. "/state", consumer = "sectest" }):sweep()
        runtime.remove_cgroup_dirs("relay/sectest")
        fs.rm_rf(ROOT)
    end)

    it("gives the handler its secrets as read-only files of its own uid, and as: env as a variable", function()
        local r = invoke("vault", "read")
        assert.are.equal(0, r.code, r.stderr)
        assert.truthy(r.stdout:find("file api_key 400 65534 " .. sha256(FILE_SECRET) .. "\n", 1, true), r.stdout)
        assert.truthy(r.stdout:find("file SPEC_TOKEN 400 65534 " .. sha256(ENV_FILE_SECRET) .. "\n", 1, true),
            r.stdout)
        assert.truthy(r.stdout:find("env " .. sha256(ENV_VAR_SECRET) .. "\n", 1, true), r.stdout)
        assert.truthy(r.stdout:find("uid 65534\n", 1, true), r.stdout)
        assert.truthy(r.stdout:find("secret read-only\ndir read-only\n", 1, true), r.stdout)
        assert_no_secret(r.stdout .. r.stderr, "relay app invoke's output")
        -- removed with the invocation's bundle
        assert.are.same({}, secret_files_under(ROOT .. "/state"))
    end)

    it("delivers them the same way under bwrap", function()
        if not fs.which("bwrap") then
            return -- the runc cases above are the reference
        end
        local r = invoke("vault", "read", "bwrap")
        assert.are.equal(0, r.code, r.stderr)
        assert.truthy(r.stdout:find("file api_key 400 65534 " .. sha256(FILE_SECRET) .. "\n", 1, true), r.stdout)
        assert.truthy(r.stdout:find("env " .. sha256(ENV_VAR_SECRET) .. "\n", 1, true), r.stdout)
        assert.truthy(r.stdout:find("secret read-only\ndir read-only\n", 1, true), r.stdout)
        os.remove(OUT .. "/result.txt")
        r = invoke("results", "write", "bwrap")
        assert.are.equal(0, r.code, r.stderr)
        assert.truthy(r.stdout:find("wrote\nref read-only\n", 1, true), r.stdout)
        assert.truthy(fs.exists(OUT .. "/result.txt"))
        assert.are.same({}, secret_files_under(ROOT .. "/state"))
    end)

    it("lets a writable mount bring a result out, and a read-only mount refuse writes", function()
        os.remove(OUT .. "/result.txt")
        local r = invoke("results", "write")
        assert.are.equal(0, r.code, r.stderr)
        assert.truthy(r.stdout:find("wrote\nref read-only\nreference data\n", 1, true), r.stdout)
        local result = fs.read_file(OUT .. "/result.txt")
        assert.truthy(result and result:find("^result of invoke%-%d+\n$"), result)
        assert.are.equal("reference data\n", fs.read_file(REF .. "/input.txt"))
    end)

    it("refuses a source outside RELAY_ALLOWED_MOUNTS and a symlink out of it, with the reason", function()
        local outside = app_row("outside")
        assert.are.equal("unavailable", outside.state)
        assert.truthy(outside.note:find(APPS .. "/outside/template.yaml:4:21: mount source refused: " .. ROOT ..
            "/elsewhere is not under RELAY_ALLOWED_MOUNTS (" .. ALLOWED .. ")", 1, true), outside.note)
        local escape = app_row("escape")
        assert.are.equal("unavailable", escape.state)
        assert.truthy(escape.note:find(ALLOWED .. "/etc-link goes through a symlink (it resolves to /etc)", 1, true),
            escape.note)
        for _, name in ipairs({ "outside", "escape" }) do
            local r = invoke(name, "write")
            assert.are.equal(125, r.code, r.stderr)
            assert.truthy(r.stderr:find("mount source refused", 1, true), r.stderr)
        end
    end)

    it("never follows an image's symlink when it makes the mountpoints", function()
        local r = invoke("planted", "write")
        assert.are.equal(125, r.code, r.stderr)
        assert.truthy(r.stderr:find("image rootfs: ", 1, true), r.stderr)
        assert.are.same({}, fs.names(ROOT .. "/victim"))
    end)

    it("makes an app whose secret is missing unavailable, naming the secret", function()
        local row = app_row("nosecret")
        assert.are.equal("unavailable", row.state)
        assert.truthy(row.note:find(APPS .. "/nosecret/template.yaml:4:13: secret missing_key is missing: no file " ..
            SECRETS .. "/missing_key", 1, true), row.note)
        write(SECRETS .. "/missing_key", "now here", 384)
        row = app_row("nosecret")
        assert.truthy(row.note:find("secret env:SPEC_UNSET_VARIABLE is missing: Relay's environment has no " ..
            "SPEC_UNSET_VARIABLE", 1, true), row.note)
        local r = invoke("nosecret", "write")
        assert.are.equal(125, r.code, r.stderr)
        os.remove(SECRETS .. "/missing_key")
        assert.are.equal("ok", app_row("vault").state)
    end)

    it("never puts a value in the log, a process's argv or a file others can read", function()
        local w = world.new({ apps = APPS })
        finally(function() w:close() end)
        local daemon_env = env()
        daemon_env.RELAY_APPS, daemon_env.RELAY_STATE_DIR, daemon_env.RELAY_CONSUMER = nil, nil, nil
        daemon_env.REDIS_URL = nil
        daemon_env.RELAY_LOG_LEVEL = "debug" -- every record Relay can write
        local d = w:daemon("sec", daemon_env)
        w:ready(d)
        local id = w:publish('{"t":"vault-hold"}')
        daemon_helper.wait_until(function() return fs.exists(OUT .. "/started-" .. id) end, 30, "the hold handler")
        -- while the handler runs: its secret file is the handler's, 0400, in a 0500 directory of its
        -- uid inside the root-only bundle
        local files = secret_files_under(w.state_dir)
        local path, st = next(files)
        assert.is_not_nil(path, "no secret file under the state dir")
        assert.are.equal(256, st.mode)
        assert.is_true(st.uid >= 65534 and st.uid ~= 65534, "host uid " .. st.uid)
        local dir = safefs.lstat(path:match("^(.*)/[^/]+$"))
        assert.are.same({ 320, st.uid }, { dir.mode, dir.uid })
        local bundle = safefs.lstat(path:match("^(.*)/secrets/[^/]+$"))
        assert.are.same({ 448, 0 }, { bundle.mode, bundle.uid })
        for _, file in ipairs(world_readable_files(w.state_dir)) do
            assert_no_secret(fs.read_file(file) or "", file)
        end
        for _, e in ipairs(fs.list("/proc") or {}) do
            if e.name:match("^%d+$") then
                assert_no_secret((fs.read_file("/proc/" .. e.name .. "/cmdline") or ""):gsub("%z", " "),
                    "the argv of pid " .. e.name)
            end
        end
        write(OUT .. "/release-" .. id, "")
        d:wait_until(function() return d:count("held") > 0 and d:count("attempt succeeded") > 0 end, 30,
            "the hold handler's end")
        local read_id = w:publish('{"t":"vault"}')
        d:wait_until(function() return d:count("uid 65534") > 0 end, 30, "the read handler")
        d:wait_until(function() return w:pending() == 0 end, 30, "both acknowledged")
        assert.is_truthy(read_id)
        assert_no_secret(table.concat(d.lines, "\n"), "the daemon's log")
        -- the app's waiting warm containers hold copies of their own (with the
        -- same protections, checked above if one came first), until retired
        assert.are.equal(0, d:stop("TERM", 15).code)
        assert.are.same({}, secret_files_under(w.state_dir))
    end)
end)
