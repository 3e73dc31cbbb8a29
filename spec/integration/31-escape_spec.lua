-- The escape suite: a hostile handler (spec/fixtures/escape/probe.py) tries
-- every known way out of its container, on runc and on bwrap with the daemon
-- as root, and on bwrap with the daemon as an unprivileged user. Each probe
-- must be denied, and the spec asserts how (the errno), not just that the
-- handler failed. Also: distinct host uids per app, limits, no process left
-- behind, and rootfs preparation that never follows a symlink.
local cli = require("helpers.cli")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local redis_helper = require("helpers.redis")
local runtime = require("relay.runtime")

local ROOT = os.tmpname()
os.remove(ROOT)
local APPS = ROOT .. "/apps"
local STATE = ROOT .. "/state"
local HERE = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$")
local PROBE = fs.read_file(HERE .. "/../fixtures/escape/probe.py")

local MARKERS = {} -- app -> the sleep argument its hold handler runs
local is_root = fs.geteuid() == 0
local has_cgroups = runtime.cgroup_mode() ~= nil
local DRIVERS = {
    { name = "runc", usable = is_root and fs.which("runc") ~= nil and has_cgroups },
    { name = "bwrap", usable = is_root and fs.which("bwrap") ~= nil and has_cgroups },
}

-- Probes and the errnos that count as a denial for each.
local SECCOMP = { EPERM = true }
local EXPECTED = {
    shadow = { EACCES = true },
    root_home = { ENOENT = true, EACCES = true },
    core_pattern = { EROFS = true, EACCES = true, EPERM = true },
    swappiness = { EROFS = true, EACCES = true, EPERM = true },
    unshare_user = SECCOMP, unshare_mount = SECCOMP, mount = SECCOMP, setns = SECCOMP,
    io_uring_setup = SECCOMP, keyctl = SECCOMP, add_key = SECCOMP, bpf = SECCOMP,
    perf_event_open = SECCOMP, init_module = SECCOMP, finit_module = SECCOMP, kexec_load = SECCOMP,
    userfaultfd = SECCOMP, personality = SECCOMP, ptrace = SECCOMP, raw_socket = SECCOMP,
    redis_tcp = { ECONNREFUSED = true, ENETUNREACH = true },
    redis_unix = { ENOENT = true, EACCES = true, ECONNREFUSED = true },
}


local function write(path, text)
    assert(fs.write_file(path, text))
end


local function template(driver, extra)
    return table.concat({
        "runtime:",
        "  image: host",
        "  driver: " .. driver,
        "  command: [/usr/bin/python3, /app/probe.py]",
        "  memory: 64Mi",
        "  pids: 16",
        "  env: {PROBE_REDIS_PORT: \"" .. extra.port .. "\", PROBE_REDIS_SOCKET: \"" .. extra.sock .. "\",",
        "        PROBE_MARKER: \"" .. extra.marker .. "\"}",
        "events:",
        "  - handler: probe",
        "    pattern: {t: [x]}",
        "    timeout: 30s",
        "  - handler: hold",
        "    pattern: {t: [y]}",
        "    timeout: 60s",
        "  - handler: forkbomb",
        "    pattern: {t: [y]}",
        "  - handler: membomb",
        "    pattern: {t: [y]}",
        "  - handler: linger",
        "    pattern: {t: [y]}",
        "", }, "\n")
end


local function make_app(name, driver, extra)
    assert(fs.mkdir_p(APPS .. "/" .. name))
    extra.marker = string.format("1013.%d%d", name:byte(1), #driver)
    MARKERS[name] = extra.marker
    write(APPS .. "/" .. name .. "/template.yaml", template(driver, extra))
    write(APPS .. "/" .. name .. "/probe.py", PROBE)
end


local function invoke(app, handler, env)
    local vars = { RELAY_APPS = APPS, RELAY_STATE_DIR = STATE, RELAY_CONSUMER = "escape" }
    for k, v in pairs(env or {}) do
        vars[k] = v
    end
    return cli.run({ "app", "invoke", app, handler, "--event", '{"t":"x"}' }, vars)
end


--- Parses "<probe>: denied|ALLOWED <detail>" and "<fact>= <value>" lines.
local function parse(stdout)
    local probes, facts = {}, {}
    for line in stdout:gmatch("[^\n]+") do
        local name, verdict, detail = line:match("^([%w_]+): (%a+) ?(.*)$")
        if name then
            probes[name] = { verdict = verdict, detail = detail }
        else
            local k, v = line:match("^([%w_]+)= ?(.*)$")
            if k then
                facts[k] = v
            end
        end
    end
    return probes, facts
end


local function assert_denied(probes, stdout)
    for name, errnos in pairs(EXPECTED) do
        local p = probes[name]
        assert.is_not_nil(p, "probe " .. name .. " did not report:\n" .. stdout)
        assert.are.equal("denied", p.verdict, name .. " was allowed: " .. tostring(p.detail) .. "\n" .. stdout)
        assert.is_true(errnos[p.detail] == true, name .. " denied with " .. p.detail .. ", not as expected")
    end
    assert.are.equal("denied", probes.setuid_mount.verdict)
end


local procs_matching = require("helpers.daemon").procs_matching


--- Polls cond() every 50 ms for up to `seconds`; returns its last value.
local function wait_until(cond, seconds)
    local deadline = loop.monotonic() + seconds
    local v = cond()
    while not v and loop.monotonic() < deadline do
        loop.sleep(0.05)
        v = cond()
    end
    return v
end


--- The host uid and gid of an app's handler, read from outside while its
-- `hold` handler sleeps (inside, a user namespace hides them).
local function handler_host_ids(app, env)
    local marker = "sleep " .. MARKERS[app]
    local done = ROOT .. "/" .. app .. ".done"
    local words = {}
    for k, v in pairs(env or {}) do
        words[#words + 1] = k .. "=" .. cli.quote(v)
    end
    os.execute(string.format("(env RELAY_APPS=%s RELAY_STATE_DIR=%s RELAY_CONSUMER=escape %s %s app invoke %s " ..
        "hold --event '{}' >/dev/null 2>&1; touch %s) &", cli.quote(APPS), cli.quote(STATE),
        table.concat(words, " "), cli.quote(cli.binary()), app, cli.quote(done)))
    local pid = wait_until(function() return procs_matching(marker)[1] end, 30)
    assert.is_not_nil(pid, "the hold handler of " .. app .. " did not start")
    local status = fs.read_file("/proc/" .. pid .. "/status") or ""
    local uid = tonumber(status:match("\nUid:%s+(%d+)"))
    local gid = tonumber(status:match("\nGid:%s+(%d+)"))
    fs.kill(pid, 9)
    assert.is_true(wait_until(function() return fs.exists(done) end, 30), "invoke of " .. app .. " did not end")
    return uid, gid
end


local function assert_contained(facts, stdout)
    assert.are.equal("1", facts.NoNewPrivs, stdout)
    assert.are.equal("2", facts.Seccomp, stdout)
    assert.are.equal("0000000000000000", facts.CapEff, stdout)
    assert.are.equal("1024", facts.nofile, stdout)
    assert.are.equal("65534", facts.uid, stdout)
    assert.are.equal("ro", facts.proc_sys, "/proc/sys is mounted " .. tostring(facts.proc_sys))
    assert.are.equal("/", facts.cgroup, "cgroup namespace: " .. tostring(facts.cgroup))
    local n, names = facts.procs:match("^(%d+) (.*)$")
    assert.is_true(tonumber(n) <= 4, "host processes visible: " .. facts.procs)
    assert.is_nil(names:find("redis", 1, true))
end


local function run_suite(driver, env, run)
    it("denies every escape probe", function()
        local r = (run or invoke)("a-" .. driver, "probe", env)
        assert.are.equal(0, r.code, r.stderr)
        local probes, facts = parse(r.stdout)
        assert_denied(probes, r.stdout)
        assert_contained(facts, r.stdout)
    end)

    if run then
        return
    end
    it("stops a fork bomb and a memory bomb, and leaves no process behind", function()
        local r = invoke("a-" .. driver, "forkbomb", env)
        assert.are.equal(0, r.code, r.stderr)
        local n = tonumber(r.stdout:match("forked (%d+)"))
        assert.is_true(n ~= nil and n < 16, r.stdout)
        assert.truthy(r.stdout:find("fork failed EAGAIN", 1, true), r.stdout)
        r = invoke("a-" .. driver, "membomb", env)
        assert.are.equal(137, r.code, r.stdout .. r.stderr)
        assert.is_nil(r.stdout:find("allocated", 1, true))
        r = invoke("a-" .. driver, "linger", env)
        assert.are.equal(0, r.code, r.stderr)
        assert.truthy(r.stdout:find("left a process behind", 1, true))
        local marker = "sleep " .. MARKERS["a-" .. driver] .. "4"
        assert.is_true(wait_until(function() return #procs_matching(marker) == 0 end, 5),
            "a handler's process outlived its container")
    end)

    it("runs each app as its own unprivileged host uid", function()
        local ua, ga = handler_host_ids("a-" .. driver, env)
        local ub, gb = handler_host_ids("b-" .. driver, env)
        assert.is_true(ua ~= nil and ub ~= nil and ga ~= nil and gb ~= nil)
        assert.is_true(ua ~= 0 and ub ~= 0 and ga ~= 0 and gb ~= 0, "host root: " .. ua .. "/" .. ub)
        assert.are_not.equal(ua, ub)
        assert.are_not.equal(ga, gb)
    end)
end


--- A copy of the binary, relay-init and its Lua tree, installed as they are
-- by `cmake --install`, that an unprivileged user can run (the checkout may
-- sit below a directory only root can enter).
local function unprivileged_install()
    local prefix = ROOT .. "/nobody"
    assert(os.execute(string.format("mkdir -p %s/bin %s/share/relay %s/libexec/relay && cp %s %s/bin/relay && " ..
        "cp %s %s/libexec/relay/ && cp -r %s %s/share/relay/lua && chmod -R a+rX %s", prefix, prefix, prefix,
        cli.quote(cli.binary()), prefix, cli.quote(runtime.init_binary()), prefix, cli.quote(HERE .. "/../../lua"),
        prefix, prefix)) == 0)
    local state = ROOT .. "/nobody-state"
    assert(fs.mkdir_p(state))
    assert(os.execute("chown 65534:65534 " .. cli.quote(state)) == 0)
    return prefix .. "/bin/relay", state
end


--- `relay app invoke` as uid 65534 (setpriv drops every capability too).
local function invoke_as_nobody(bin, state)
    return function(app, handler)
        local out = ROOT .. "/nobody.out"
        local cmd = string.format("setpriv --reuid=65534 --regid=65534 --clear-groups env RELAY_APPS=%s " ..
            "RELAY_STATE_DIR=%s RELAY_CONSUMER=escape %s app invoke %s %s --event '{\"t\":\"x\"}' " ..
            ">%s 2>%s.err; echo $? >%s.rc", cli.quote(APPS), cli.quote(state), cli.quote(bin), app, handler,
            out, out, out)
        os.execute(cmd)
        return { code = tonumber(fs.read_file(out .. ".rc")), stdout = fs.read_file(out) or "",
            stderr = fs.read_file(out .. ".err") or "" }
    end
end


describe("escape suite", function()
    local server

    setup(function()
        server = redis_helper.start("--port " .. (20000 + fs.getpid() % 20000))
        local extra = { port = tostring(20000 + fs.getpid() % 20000), sock = server.sock }
        for _, d in ipairs(DRIVERS) do
            make_app("a-" .. d.name, d.name, extra)
            make_app("b-" .. d.name, d.name, extra)
        end
        -- an unprivileged daemon must be able to reach the apps
        os.execute("chmod 0755 " .. cli.quote(ROOT) .. " " .. cli.quote(APPS))
    end)

    teardown(function()
        if server then
            server:stop()
        end
        local rt = runtime.new({ runtime = "runc", state_dir = STATE, consumer = "escape", stream = "events" })
        rt:sweep()
        fs.rm_rf(ROOT)
        runtime.remove_cgroup_dirs(rt.cgroup_parent)
    end)

    for _, d in ipairs(DRIVERS) do
        local maybe = d.usable and describe or pending
        maybe(d.name .. " with the daemon as root", function()
            run_suite(d.name)
        end)
    end

    local maybe = (DRIVERS[2].usable and fs.which("setpriv")) and describe or pending
    maybe("bwrap with the daemon as an unprivileged user", function()
        local run_nobody = function(...)
            local bin, state = unprivileged_install()
            return invoke_as_nobody(bin, state)(...)
        end
        run_suite("bwrap", nil, run_nobody)
    end)

    describe("preparing a rootfs or reading a template", function()
        local safefs = require("relay.core.safefs")
        local VICTIM = ROOT .. "/victim"

        local function image_app(name, driver)
            local dir = APPS .. "/" .. name
            assert(fs.mkdir_p(dir .. "/rootfs"))
            write(dir .. "/template.yaml", "runtime:\n  image: rootfs\n  driver: " .. driver ..
                "\n  command: [/bin/true]\nevents:\n  - handler: h\n    pattern: {t: [x]}\n")
            return dir
        end

        for _, d in ipairs(DRIVERS) do
            local maybe_it = d.usable and it or pending
            maybe_it("never follows a symlink planted in an image (" .. d.name .. ")", function()
                assert(fs.mkdir_p(VICTIM))
                assert(os.execute("chmod 0755 " .. cli.quote(VICTIM)) == 0)
                local dir = image_app("sym-tmp-" .. d.name, d.name)
                assert(fs.symlink(VICTIM, dir .. "/rootfs/tmp"))
                local r = invoke("sym-tmp-" .. d.name, "h")
                assert.are.equal(125, r.code, r.stderr)
                assert.truthy(r.stderr:find("symlink", 1, true), r.stderr)
                assert.are.equal(493, safefs.lstat(VICTIM).mode) -- still 0755, not 1777

                dir = image_app("sym-init-" .. d.name, d.name)
                assert(fs.mkdir_p(dir .. "/rootfs/tmp"))
                assert(fs.symlink(VICTIM .. "/planted", dir .. "/rootfs/.relay-init"))
                invoke("sym-init-" .. d.name, "h")
                assert.is_false(fs.exists(VICTIM .. "/planted"))
            end)
        end

        local maybe_runc = DRIVERS[1].usable and it or pending
        maybe_runc("names a state directory the containers' ids cannot search, not failing each start", function()
            local closed = ROOT .. "/closed"
            assert(fs.mkdir_p(closed .. "/state"))
            assert(os.execute("chmod 0700 " .. cli.quote(closed)) == 0)
            local r = invoke("a-runc", "probe", { RELAY_STATE_DIR = closed .. "/state" })
            assert.are.equal(125, r.code, r.stderr)
            assert.truthy(r.stderr:find(closed .. " is not searchable by others", 1, true), r.stderr)
        end)

        it("accepts only image names inside the app", function()
            for _, image in ipairs({ "/", "/srv/rootfs", "../other/rootfs", "rootfs/../../x", "./.." }) do
                local dir = APPS .. "/bad-image"
                assert(fs.mkdir_p(dir))
                fs.unlink(dir .. "/template.yaml")
                write(dir .. "/template.yaml", "runtime:\n  image: \"" .. image .. "\"\n" ..
                    "  command: [/bin/true]\nevents:\n  - handler: h\n    pattern: {t: [x]}\n")
                local r = cli.run({ "app", "validate", APPS .. "/bad-image" }, { RELAY_APPS = APPS })
                assert.are.equal(1, r.code, image)
                assert.truthy(r.stdout:find("template.yaml:2:10: runtime.image must be host or a directory inside",
                    1, true) or r.stderr:find("template.yaml:2:10: runtime.image must be host", 1, true),
                    image .. ": " .. r.stdout .. r.stderr)
            end
            fs.rm_rf(APPS .. "/bad-image")
        end)

        it("refuses a template that links out of the apps directory, quoting nothing from it", function()
            write(ROOT .. "/secret.yaml", "topsecret: hunter2\n")
            assert(fs.mkdir_p(APPS .. "/linked"))
            assert(fs.symlink(ROOT .. "/secret.yaml", APPS .. "/linked/template.yaml"))
            for _, args in ipairs({ { "app", "validate", APPS .. "/linked" }, { "app", "ls" } }) do
                local r = cli.run(args, { RELAY_APPS = APPS, RELAY_STATE_DIR = STATE })
                local all = r.stdout .. r.stderr
                assert.truthy(all:find("symlink leaving the apps directory", 1, true), all)
                assert.is_nil(all:find("hunter2", 1, true))
                assert.is_nil(all:find("topsecret", 1, true))
            end
            fs.rm_rf(APPS .. "/linked")
        end)

        local maybe_root = is_root and it or pending
        maybe_root("reads templates only if root owns them, when Relay is root", function()
            assert(fs.mkdir_p(APPS .. "/foreign"))
            write(APPS .. "/foreign/template.yaml", "bogus: key\n")
            assert(os.execute("chown 1000 " .. cli.quote(APPS .. "/foreign/template.yaml")) == 0)
            local r = cli.run({ "app", "validate", APPS .. "/foreign" }, { RELAY_APPS = APPS })
            assert.are.equal(1, r.code)
            local all = r.stdout .. r.stderr
            assert.truthy(all:find("owned by uid 1000", 1, true), all)
            assert.is_nil(all:find("bogus", 1, true))
            fs.rm_rf(APPS .. "/foreign")
        end)
    end)
end)
