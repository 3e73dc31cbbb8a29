-- The container runtime: what each driver builds (commands, OCI bundle), the
-- container environment contract of docs/templates.md, outcome classification.
-- No container is started here (spec/integration/30-runc_spec.lua does that).
local fs = require("relay.fs")
local json = require("relay.runtime.json")
local runtime = require("relay.runtime")

local STATE = os.tmpname()
os.remove(STATE)

local function app(over)
    local a = {
        name = "users",
        dir = "/tmp",
        state = "ok",
        runtime = { image = "host", command = { "python3", "/app/main.py" }, env = { LOG_STYLE = "plain" } },
        events = { { handler = "users.created", timeout_ms = 20000 } },
        schedules = {},
    }
    for k, v in pairs(over or {}) do
        a.runtime[k] = v
    end
    return a
end

local INV = {
    handler = "users.created", trigger = "event", message_id = "1700000000000-0",
    attempt = 2, deadline_ms = 1700000020000, kill_at_ms = 123456789,
}

local function ctx(private)
    return runtime.new({ runtime = "auto", state_dir = STATE, consumer = "worker-1", private = private })
end

local function index_of(list, value, from)
    for i = from or 1, #list do
        if list[i] == value then
            return i
        end
    end
    return nil
end

-- true if `seq` appears in `list` as consecutive elements
local function has_seq(list, seq)
    for i = 1, #list - #seq + 1 do
        local ok = true
        for j = 1, #seq do
            if list[i + j - 1] ~= seq[j] then
                ok = false
                break
            end
        end
        if ok then
            return true
        end
    end
    return false
end


describe("runtime", function()
    teardown(function()
        fs.rm_rf(STATE)
        runtime.remove_cgroup_dirs("relay/worker-1")
    end)

    it("sets exactly the documented container environment", function()
        local env = runtime.container_env(app(), INV)
        assert.are.same({
            RELAY_HANDLER = "users.created",
            RELAY_APP = "users",
            RELAY_TRIGGER = "event",
            RELAY_MESSAGE_ID = "1700000000000-0",
            RELAY_ATTEMPT = "2",
            RELAY_DEADLINE = "2023-11-14T22:13:40.000Z",
            PYTHONUNBUFFERED = "1",
            PATH = runtime.CONTAINER_PATH,
            LOG_STYLE = "plain",
        }, env)
    end)

    it("lets runtime.env override defaults but never RELAY_* variables", function()
        local env = runtime.container_env(app({ env = { PYTHONUNBUFFERED = "0", RELAY_APP = "evil" } }), INV)
        assert.are.equal("0", env.PYTHONUNBUFFERED)
        assert.are.equal("users", env.RELAY_APP)
        local list = runtime.env_list(env)
        for i = 2, #list do
            assert.is_true(list[i - 1] < list[i])
        end
    end)

    it("applies default limits", function()
        local l = runtime.limits({ runtime = {} })
        assert.are.equal(256 * 1024 * 1024, l.memory)
        assert.are.equal(64, l.pids)
        assert.are.equal(1, l.cpus)
        assert.are.equal(1024, l.nofile)
        assert.are.equal("none", l.network)
        assert.are.equal(4096, runtime.limits({ runtime = { nofile = 4096, cpus = 0.5 } }).nofile)
        assert.are.equal(512 * 1024, runtime.limits({ runtime = { memory = "512Ki" } }).memory)
    end)

    it("writes reasons as docs/templates.md says", function()
        assert.are.equal("exit status 3", runtime.reason({ status = 3 }))
        assert.are.equal("timeout after 20s", runtime.reason({ timed_out = true, timeout_ms = 20000, signal = 9 }))
        assert.are.equal("killed by signal 9", runtime.reason({ signal = 9 }))
        assert.is_nil(runtime.reason({ status = 0 }))
    end)

    it("names containers within runc's charset, unique per invocation", function()
        local rt = ctx()
        local a = runtime.container_id(rt, "users", "events.created:v2 x")
        local b = runtime.container_id(rt, "users", "events.created:v2 x")
        assert.are_not.equal(a, b)
        assert.truthy(a:match("^relay%-worker%-1%-users%-events%.created_v2_x%-%d+%-1$"))
        assert.is_nil(a:find("[^%w_+.-]"))
    end)

    it("keeps invoke's private root and cgroups apart from the daemon's", function()
        local d, p = ctx(false), ctx(true)
        assert.are.equal(STATE .. "/worker-1", d.base_dir)
        assert.are.equal("relay/worker-1", d.cgroup_parent)
        assert.are.equal(STATE .. "/worker-1/invoke-" .. fs.getpid(), p.base_dir)
        -- the consumer's invoke parent, shared by its invokes (runc makes only the leaf)
        assert.are.equal("relay/worker-1/invoke", p.cgroup_parent)
        assert.has_error(function() p:sweep() end)
    end)


    it("names a daemon's root, containers and cgroups after its consumer, stream and group", function()
        local function rt(stream, group)
            return runtime.new({ runtime = "auto", state_dir = STATE, consumer = "host-1", stream = stream,
                group = group })
        end
        local orders, payments, other_group = rt("{orders}"), rt("payments"), rt("{orders}", "audit")
        assert.matches("^" .. STATE:gsub("%p", "%%%0") .. "/host%-1%._orders_%.relay%.%x+$", orders.base_dir)
        assert.matches("^relay%-host%-1%._orders_%.relay%.%x+$", orders.prefix)
        assert.are.equal("relay/" .. orders.name, orders.cgroup_parent)
        assert.are_not.equal(orders.name, payments.name)
        assert.are_not.equal(orders.name, other_group.name)
        -- sanitizing alone would make these two one name
        assert.are_not.equal(rt("_orders_").name, orders.name)
        assert.are.equal(orders.name, rt("{orders}", "relay").name)
    end)

    it("records a root's holders, one line each, and hands them over once", function()
        local holders = require("relay.runtime.holders")
        local dir = require("helpers.tmp").mkdtemp("relay-holders-")
        assert.is_false(holders.any(dir))
        assert.is_true(holders.record(dir, "events", "a1"))
        assert.is_true(holders.record(dir, "other", "b2"))
        assert.is_true(holders.any(dir))
        assert.are.same({ { stream = "events", instance = "a1" }, { stream = "other", instance = "b2" } },
            holders.take(dir))
        assert.are.same({}, holders.take(dir))
        assert.is_true(fs.symlink("/etc/passwd", dir .. "/holders"))
        assert.is_nil(holders.record(dir, "events", "a1"))
        assert.are.same({}, holders.take(dir))
        fs.rm_rf(dir)
    end)

    it("resolves drivers", function()
        assert.are.equal("bwrap", runtime.resolve("bwrap"))
        assert.is_nil((runtime.resolve("lxc")))
        local auto = runtime.resolve("auto")
        if fs.geteuid() == 0 and fs.which("runc") then
            assert.are.equal("runc", auto)
        else
            assert.are.equal("bwrap", auto)
        end
    end)
end)


describe("json encoder", function()
    it("keeps empty arrays arrays and sorts keys", function()
        assert.are.equal('{"a":[],"b":{},"c":[1,2],"d":"x\\"\\n"}',
            json.encode({ b = {}, a = json.array(), c = { 1, 2 }, d = 'x"\n' }))
        assert.are.equal("true", json.encode(true))
        assert.are.equal("1.5", json.encode(1.5))
    end)
end)


describe("runc driver", function()
    local runc = require("relay.runtime.runc")

    -- A daemon killed while its `runc run` created a container leaves that
    -- runc going: it writes the container's state after the next start's
    -- listing, and a sweep that removed it meanwhile would strand the
    -- container's `runc init` for good. The sweep waits for such a runc
    -- (any process working with `--root` on its root) to end first.
    it("sweeps only once no runc works on its root any more", function()
        if not runc.available() then
            return pending("runc not installed")
        end
        local d = runc.new(ctx())
        local orphan = assert(require("relay.core.proc").spawn({
            argv = { "/bin/sh", "-c", "sleep 1; exit 0", "runc", "--root", d.root, "run", "x" } }))
        -- until its exec, the child still shows our command line
        local loop = require("relay.core.loop")
        local deadline = loop.monotonic() + 10
        while not (fs.read_file("/proc/" .. orphan.pid .. "/cmdline") or ""):find(d.root, 1, true)
            and loop.monotonic() < deadline do
            loop.sleep(0.01)
        end
        d:sweep()
        -- ended: reaped already, or a zombie the loop has not reaped yet (its
        -- cmdline is empty, which is what the sweep goes by)
        local stat = fs.read_file("/proc/" .. orphan.pid .. "/stat")
        local state = stat and stat:match("^%d+ %b() (%a)")
        assert.is_true(orphan.done or state == "Z" or state == nil,
            "the sweep did not wait for the runc working on its root (state " .. tostring(state) .. ")")
        orphan:wait()
    end)

    it("builds a locked-down OCI config", function()
        local d = runc.new(ctx())
        d.host_binds = { "/usr", "/etc" }
        local c = d:config(app({ memory = 64 * 1024 * 1024, pids = 32, cpus = 0.5 }), INV, "relay-x-1", d.host_rootfs,
            "/usr/bin/catatonit")
        local p = c.process
        assert.is_false(p.terminal)
        -- relay-init's deadline and its control socket (fd 3: runc --preserve-fds 1)
        assert.are.same({ "/.relay-init", "-d", "123456789", "-c", "3", "--", "python3", "/app/main.py" }, p.args)
        assert.are.equal("/app", p.cwd)
        assert.are.equal(65534, p.user.uid)
        assert.are.equal(65534, p.user.gid)
        assert.is_true(p.noNewPrivileges)
        assert.is_true(p.oomScoreAdj > 0)
        assert.is_true(index_of(p.env, "RELAY_HANDLER=users.created") ~= nil)
        assert.is_true(index_of(p.env, "PYTHONUNBUFFERED=1") ~= nil)
        assert.is_true(c.root.readonly)
        local text = json.encode(c)
        for _, set in ipairs({ "ambient", "bounding", "effective", "inheritable", "permitted" }) do
            assert.truthy(text:find('"' .. set .. '":[]', 1, true), set)
        end
        local ns = {}
        for _, n in ipairs(c.linux.namespaces) do
            ns[n.type] = true
        end
        assert.are.same({ pid = true, ipc = true, uts = true, mount = true, network = true, user = true,
            cgroup = true }, ns)
        -- the app's own host id block, never host root
        local block = require("relay.runtime.ids").for_app(app())
        assert.are.same({ { containerID = 0, hostID = block.uid, size = 65536 } }, c.linux.uidMappings)
        assert.are.same({ { containerID = 0, hostID = block.gid, size = 65536 } }, c.linux.gidMappings)
        assert.is_true(block.uid > 0 and block.gid > 0)
        assert.are.equal("SCMP_ACT_ERRNO", c.linux.seccomp.defaultAction)
        local rl = {}
        for _, l in ipairs(p.rlimits) do
            rl[l.type] = l
        end
        assert.are.same({ type = "RLIMIT_NOFILE", soft = 1024, hard = 1024 }, rl.RLIMIT_NOFILE)
        assert.are.equal(0, rl.RLIMIT_CORE.hard)
        assert.are.equal("/relay/worker-1/relay-x-1", c.linux.cgroupsPath)
        local r = c.linux.resources
        assert.are.equal(64 * 1024 * 1024, r.memory.limit)
        assert.are.equal(r.memory.limit, r.memory.swap)
        assert.are.equal(32, r.pids.limit)
        assert.are.same({ quota = 50000, period = 100000 }, r.cpu)
        assert.truthy(index_of(c.linux.maskedPaths, "/proc/keys"))
        assert.truthy(index_of(c.linux.readonlyPaths, "/proc/sysrq-trigger"))
        local mounts = {}
        for _, m in ipairs(c.mounts) do
            mounts[m.destination] = m
        end
        assert.are.equal("tmpfs", mounts["/tmp"].type)
        assert.are.equal("bind", mounts["/app"].type)
        assert.truthy(index_of(mounts["/app"].options, "ro"))
        assert.truthy(index_of(mounts["/usr"].options, "ro"))
        assert.truthy(index_of(mounts["/etc"].options, "ro"))
        assert.are.equal("/usr/bin/catatonit", mounts["/.relay-init"].source)
    end)

    it("shares the host network only when asked, and runs without init when told", function()
        local d = runc.new(ctx())
        d.host_binds = {}
        local c = d:config(app({ network = "host" }), INV, "id", d.host_rootfs, nil)
        for _, n in ipairs(c.linux.namespaces) do
            assert.are_not.equal("network", n.type)
        end
        assert.are.same({ "python3", "/app/main.py" }, c.process.args)
        assert.is_nil(c.memory)
        -- one CPU unless the template says otherwise
        assert.are.same({ quota = 100000, period = 100000 }, c.linux.resources.cpu)
    end)

    it("runs without seccomp only when the template gives a reason", function()
        local d = runc.new(ctx())
        d.host_binds = {}
        local c = d:config(app({ seccomp = { unconfined = "needs io_uring" }, nofile = 4096 }), INV, "id",
            d.host_rootfs, nil)
        assert.is_nil(c.linux.seccomp)
        assert.are.equal(4096, c.process.rlimits[2].hard)
    end)

    it("writes a bundle per invocation and the runc command lines", function()
        local rt = ctx()
        local d = runc.new(rt)
        local spec = assert(d:prepare(app(), INV))
        assert.truthy(fs.exists(spec.dir .. "/config.json"))
        -- the config holds the environment: private to root
        local safefs = require("relay.core.safefs")
        assert.are.equal(384, safefs.lstat(spec.dir .. "/config.json").mode) -- 0600
        assert.are.equal(448, safefs.lstat(spec.dir).mode) -- 0700
        assert.are.equal(448, safefs.lstat(STATE .. "/worker-1/bundles").mode)
        -- the rootfs's parents are searchable by the containers' host ids, not listable
        assert.are.equal(457, safefs.lstat(STATE .. "/worker-1").mode) -- 0711
        assert.truthy(spec.dir:find(STATE .. "/worker-1/bundles/users/relay-worker-1-users-", 1, true))
        assert.is_true(has_seq(spec.argv, { "--root", STATE .. "/worker-1/runc" }))
        assert.is_true(has_seq(spec.argv, { "--log", spec.dir .. "/runc.log", "--log-format", "json",
            "run", "--preserve-fds", "1", "--bundle", spec.dir, spec.id }))
        assert.is_true(spec.control)
        local config = require("cjson").decode(fs.read_file(spec.dir .. "/config.json"))
        assert.are.equal("/.relay-init", config.process.args[1])
        for _, m in ipairs(config.mounts) do
            if m.destination == "/.relay-init" then
                assert.are.equal(runtime.init_binary(), m.source)
            end
        end
        assert.are.same({ "kill", spec.id, "KILL" }, { unpack(spec.kill_argv, #spec.kill_argv - 2) })
        assert.is_nil(spec.term_argv)
        assert.is_true(has_seq(spec.delete_argv, { "delete", "--force", spec.id }))
        -- the shared host rootfs: tmp must be 1777 for uid 65534 (runc copies the mountpoint's mode)
        assert.truthy(fs.is_dir(d.host_rootfs .. "/tmp"))
        assert.truthy(fs.is_dir(d.host_rootfs .. "/app"))
        fs.rm_rf(spec.dir)
    end)

    it("reads runc's own last error: the host's failure, never the handler's", function()
        local log = '{"level":"warning","msg":"w","time":"t"}\n' ..
            '{"level":"error","msg":"runc run failed: unable to start container process: exec: \\"x\\": ' ..
            'executable file not found in $PATH","time":"t"}\n'
        local msg = runc.log_error(log)
        assert.truthy(msg:find('exec: "x"', 1, true))
        assert.is_nil(runc.log_error('{"level":"info","msg":"x"}'))
    end)

    it("tells a handler's exit 128+N from a signal N by relay-init's record", function()
        local parse = runtime.parse_init_record
        assert.are.same({ kind = "exit", n = 137 }, parse("exit 137"))
        assert.are.same({ kind = "signal", n = 9 }, parse("signal 9"))
        assert.are.same({ kind = "exec", n = 2, text = "No such file or directory" },
            parse("exec 2 No such file or directory"))
        assert.are.same({ kind = "deadline" }, parse("deadline"))
        assert.is_nil(parse("exit"))
        assert.is_nil(parse("signal x"))
        assert.is_nil(parse("hello 1"))
        local function outcome(status, line)
            return runtime.init_outcome({ status = status }, status, line and parse(line), "/app/h")
        end
        assert.are.same({ status = 137 }, outcome(137, "exit 137"))
        assert.are.same({ signal = 9 }, outcome(137, "signal 9"))
        assert.are.same({ signal = 15 }, outcome(143, "signal 15"))
        -- no record (relay-init itself was killed): the runtime's convention
        assert.are.same({ signal = 9 }, outcome(137))
        -- a record that does not match the status changes nothing
        assert.are.same({ status = 3 }, outcome(3, "signal 9"))
        assert.are.same({ status = 127, detail = "exec /app/h: No such file or directory" },
            outcome(127, "exec 2 No such file or directory"))
        assert.are.same({ status = 137, timed_out = true }, outcome(137, "deadline"))
        -- relay-init could not even start the handler: the host's failure
        assert.is_true(outcome(125).host_failure)
        assert.are.same({ status = 125 }, outcome(125, "exit 125"))
    end)
end)


describe("bwrap driver", function()
    local bwrap = require("relay.runtime.bwrap")

    it("builds the sandbox command", function()
        local d = bwrap.new(ctx())
        local argv = d:command(app(), INV)
        for _, flag in ipairs({ "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--clearenv" }) do
            assert.truthy(index_of(argv, flag), flag)
        end
        assert.is_nil(index_of(argv, "--share-net"))
        assert.is_true(has_seq(argv, { "--cap-drop", "ALL" }))
        assert.is_true(has_seq(argv, { "--uid", "65534", "--gid", "65534" }))
        assert.is_true(has_seq(argv, { "--ro-bind", "/usr", "/usr" }))
        -- the app dir is a descriptor the daemon opened: bwrap may run unprivileged
        assert.is_true(has_seq(argv, { "--ro-bind-fd", "4", "/app" }))
        assert.is_true(has_seq(argv, { "--seccomp", "3" }))
        assert.is_true(has_seq(argv, { "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys" }))
        assert.is_true(has_seq(argv, { "--tmpfs", "/tmp" }))
        assert.is_true(has_seq(argv, { "--remount-ro", "/", "--chdir", "/app" }))
        assert.is_true(has_seq(argv, { "--setenv", "RELAY_HANDLER", "users.created" }))
        assert.is_true(has_seq(argv, { "--setenv", "RELAY_ATTEMPT", "2" }))
        -- relay-init runs the command: its binary is fd 5, its control socket
        -- the descriptor after the last one passed (no image: 6)
        assert.is_true(has_seq(argv, { "--ro-bind-fd", "5", "/.relay-init" }))
        assert.is_true(has_seq(argv, { "--", "/.relay-init", "-d", "123456789", "-c", "6", "--", "python3",
            "/app/main.py" }))
        assert.are.equal("/app/main.py", argv[#argv])
        assert.truthy(index_of(d:command(app({ network = "host" }), INV), "--share-net"))
        assert.is_nil(index_of(d:command(app({ seccomp = { unconfined = "why" } }), INV), "--seccomp"))
    end)

    it("drops a root daemon's child to the app's host ids and passes descriptors", function()
        local rt = ctx(true)
        local d = bwrap.new(rt)
        d.limit_ok = false
        local spec = assert(d:prepare(app(), INV))
        runtime.close_fds(spec.pass_fds)
        assert.are.equal(3, #spec.pass_fds)
        assert.is_true(spec.control)
        assert.are.equal(1024, spec.nofile)
        assert.is_true(spec.no_core)
        if fs.geteuid() == 0 then
            local block = require("relay.runtime.ids").for_app(app())
            assert.are.equal(block.uid + 65534, spec.uid)
            assert.are.equal(block.gid + 65534, spec.gid)
        else
            assert.is_nil(spec.uid)
        end
        rt:close()
    end)

    it("classifies bwrap's own errors", function()
        local d = bwrap.new(ctx())
        local out = d.finish(d, { bwrap_error = "bwrap: Can't mount proc on /newroot/proc: EPERM" }, { status = 1 })
        assert.is_true(out.host_failure)
        -- bwrap only executes relay-init: an exec error of bwrap's is the host's
        out = d.finish(d, { bwrap_error = "bwrap: execvp /.relay-init: No such file or directory" }, { status = 1 })
        assert.is_true(out.host_failure)
        -- the handler's own missing command is relay-init's record
        out = d.finish(d, { command = "nosuch", init_record = runtime.parse_init_record("exec 2 No such file") },
            { status = 127 })
        assert.is_nil(out.host_failure)
        assert.are.equal(127, out.status)
        -- a handler printing bwrap's prefix and exiting 1 is the handler
        out = d.finish(d, { bwrap_error = "bwrap: mine", init_record = { kind = "exit", n = 1 } }, { status = 1 })
        assert.are.same({ status = 1 }, out)
        out = d.finish(d, {}, { status = 137 })
        assert.are.equal(9, out.signal)
        assert.is_nil(out.status)
        out = d.finish(d, { init_record = { kind = "exit", n = 137 } }, { status = 137 })
        assert.are.same({ status = 137 }, out)
        out = d.finish(d, {}, { status = 1 })
        assert.are.equal(1, out.status)
    end)
end)


describe("docker and podman drivers", function()
    local docker = require("relay.runtime.docker")
    local podman = require("relay.runtime.podman")

    local function check_run(argv, id)
        assert.is_true(has_seq(argv, { "run", "--rm", "-i", "--name", id }))
        assert.is_true(has_seq(argv, { "--network", "none" }))
        assert.truthy(index_of(argv, "--read-only"))
        assert.is_true(has_seq(argv, { "--cap-drop", "ALL" }))
        assert.is_true(has_seq(argv, { "--security-opt", "no-new-privileges" }))
        assert.is_true(has_seq(argv, { "--memory", "67108864b", "--memory-swap", "67108864b" }))
        assert.is_true(has_seq(argv, { "--pids-limit", "32" }))
        assert.is_true(has_seq(argv, { "--user", "65534:65534" }))
        assert.is_true(has_seq(argv, { "-w", "/app" }))
        assert.truthy(index_of(argv, "--pull=never"))
        assert.is_true(has_seq(argv, { "--cgroupns", "private" }))
        assert.is_true(has_seq(argv, { "--ulimit", "nofile=1024:1024" }))
        assert.is_true(has_seq(argv, { "--cpus", "1" }))
        assert.is_true(has_seq(argv, { "--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=64m,mode=1777" }))
        local sec = argv[index_of(argv, "--security-opt", index_of(argv, "no-new-privileges")) + 1]
        assert.truthy(sec:find("^seccomp=/.*/seccomp%.json$"), sec)
        local profile = require("cjson").decode(fs.read_file(sec:sub(#"seccomp=" + 1)))
        assert.are.equal("SCMP_ACT_ERRNO", profile.defaultAction)
        assert.truthy(index_of(argv, "--init"))
        assert.is_true(has_seq(argv, { "-e", "RELAY_MESSAGE_ID=1700000000000-0" }))
        assert.is_true(has_seq(argv, { "example/users:1", "python3", "/app/main.py" }))
    end

    it("builds docker run", function()
        local rt = ctx()
        local d = docker.new(rt)
        local spec = d:prepare(app({ image = "example/users:1", memory = 64 * 1024 * 1024, pids = 32 }), INV)
        assert.truthy(spec.id:find("^relay%-worker%-1%-users%-"))
        check_run(spec.argv, spec.id)
        assert.is_true(has_seq(spec.argv, { "--label", "relay.owner=worker-1" }))
        assert.is_true(has_seq(spec.kill_argv, { "kill", "--signal", "KILL", spec.id }))
        assert.is_true(has_seq(spec.rm_argv, { "rm", "-f", spec.id }))
        assert.is_nil(index_of(spec.argv, "--runtime"))
        assert.is_nil(index_of(spec.argv, "--timeout"))
    end)

    it("builds podman run with runc and its containers.conf", function()
        local rt = ctx(true)
        local d = podman.new(rt)
        local spec = d:prepare(app({ image = "example/users:1", memory = 64 * 1024 * 1024, pids = 32 }), INV)
        check_run(spec.argv, spec.id)
        assert.is_true(has_seq(spec.argv, { "--runtime", "runc", "run" }))
        assert.is_true(has_seq(spec.argv, { "--label", "relay.owner=worker-1.invoke-" .. fs.getpid() }))
        assert.are.equal(rt.base_dir .. "/containers.conf", spec.env.CONTAINERS_CONF)
        -- conmon ends the container at relay-init's deadline, daemon or not
        local timeout = tonumber(spec.argv[index_of(spec.argv, "--timeout") + 1])
        assert.is_true(timeout >= 1, tostring(timeout))
        local soon = podman.new(rt):prepare(app({ image = "example/users:1" }), { handler = "h", trigger = "event",
            message_id = "1-0", attempt = 1, deadline_ms = 0,
            kill_at_ms = require("relay.core.loop").monotonic() * 1000 + 2500 })
        assert.is_true(has_seq(soon.argv, { "--timeout", "3" }))
        assert.truthy(fs.read_file(spec.env.CONTAINERS_CONF):find("default_ulimits = []", 1, true))
        rt:close()
    end)

    it("treats 125 as the engine's failure, 126/127 as the handler's", function()
        local d = docker.new(ctx())
        assert.is_true(d:finish({}, { status = 125 }).host_failure)
        local out125 = d:finish({ engine_error = "Error: localhost/x:1: image not known" }, { status = 125 })
        assert.truthy(out125.detail:find("image not known", 1, true), out125.detail)
        local out = d:finish({}, { status = 127 })
        assert.is_nil(out.host_failure)
        assert.are.equal(127, out.status)
        assert.are.equal(9, d:finish({}, { status = 137 }).signal)
        assert.is_true(d:finish({}, { start_error = "exec docker: No such file or directory" }).host_failure)
    end)

    it("asks docker for leftovers only where a docker engine can be", function()
        local stdlib = require("posix.stdlib")
        local rt = ctx()
        local asked = rt.base_dir .. "/docker-was-asked"
        local fake = rt.base_dir .. "/fake-docker"
        fs.mkdir_p(rt.base_dir, 448)
        assert(fs.write_file(fake, "#!/bin/sh\necho \"$*\" >>" .. asked .. "\n"))
        assert(fs.chmod(fake, 448))
        local d = docker.new(rt)
        d.bin = fake
        local saved = os.getenv("DOCKER_HOST")
        stdlib.setenv("DOCKER_HOST", nil)
        local engine_here = fs.exists("/var/run/docker.sock")
        assert.are.equal(0, d:sweep())
        assert.are.equal(engine_here, fs.exists(asked))
        stdlib.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
        d:sweep()
        stdlib.setenv("DOCKER_HOST", saved)
        assert.truthy((fs.read_file(asked) or ""):find("ps -a -q --filter label=relay.owner=", 1, true))
        rt:close()
    end)

    it("needs an image reference", function()
        local d = docker.new(ctx())
        d.bin = "/bin/true"
        local ok, why = d:check(app())
        assert.is_nil(ok)
        assert.truthy(why:find("image", 1, true))
    end)
end)


describe("app invoke and app ls", function()
    local app_invoke = require("relay.cmd.app_invoke")
    local app_ls = require("relay.cmd.app_ls")

    it("maps outcomes to exit codes", function()
        assert.are.equal(0, app_invoke.exit_code({ status = 0 }))
        assert.are.equal(3, app_invoke.exit_code({ status = 3 }))
        assert.are.equal(124, app_invoke.exit_code({ timed_out = true, signal = 9 }))
        assert.are.equal(137, app_invoke.exit_code({ signal = 9 }))
        assert.are.equal(125, app_invoke.exit_code({ host_failure = true }))
        assert.are.equal(130, app_invoke.exit_code({ timed_out = true }, 2))
    end)

    it("finds event and schedule handlers", function()
        local a = { events = { { handler = "a", timeout_ms = 1 } }, schedules = { { name = "s", handler = "b" } } }
        assert.are.equal(1, app_invoke.find_entry(a, "a").timeout_ms)
        assert.are.equal("s", app_invoke.find_entry(a, "b").name)
        assert.is_nil(app_invoke.find_entry(a, "c"))
    end)

    it("prints one tab-separated line per app", function()
        local rt = runtime.new({ runtime = "bwrap", state_dir = STATE, consumer = "ls" })
        local a = app()
        a.concurrency = 9
        a.events = { { handler = "h1" }, { handler = "h2" } }
        a.schedules = { { name = "nightly", handler = "h1" } }
        local row = app_ls.row(rt, { max_concurrency = 4 }, a, {})
        local line = app_ls.format(row)
        local cols = {}
        for c in (line .. "\t"):gmatch("([^\t]*)\t") do
            cols[#cols + 1] = c
        end
        assert.are.equal(7, #cols)
        assert.are.same({ "users", fs.which("bwrap") and "ok" or "unavailable", "bwrap", "h1,h2", "nightly", "4" },
            { unpack(cols, 1, 6) })
        local bad = app_ls.format(app_ls.row(rt, {}, { name = "x", state = "invalid", error = "t.yaml:1:1: bad" }, {}))
        assert.are.equal("x\tinvalid\t-\t-\t-\t-\tt.yaml:1:1: bad", bad)
        local loose = app({ seccomp = { unconfined = "needs io_uring" } })
        local loose_row = app_ls.row(rt, { max_concurrency = 4 }, loose, {})
        if loose_row.state == "ok" then
            assert.truthy(loose_row.note:find("seccomp unconfined: needs io_uring", 1, true), loose_row.note)
        end
        row = app_ls.row(rt, { max_concurrency = 4 }, a, { users = true })
        if fs.which("bwrap") then
            assert.are.equal("paused", row.state)
        end
        runtime.remove_cgroup_dirs("relay/ls") -- bwrap's probe made the parent
    end)
end)


describe("relay.core.proc", function()
    local proc = require("relay.core.proc")
    local loop = require("relay.core.loop")

    it("writes stdin, splits lines, reports the exit", function()
        local lines = {}
        local h = assert(proc.spawn({
            argv = { "sh", "-c", "cat; echo; echo err >&2; printf tail; exit 3" },
            stdin = "in",
            on_line = function(stream, line, partial)
                lines[#lines + 1] = { stream, line, partial }
            end,
        }))
        assert.is_number(h.pid)
        local r = h:wait()
        assert.are.equal(3, r.status)
        assert.is_nil(r.signal)
        assert.is_false(r.timed_out)
        assert.is_number(r.duration_ms)
        local out = {}
        for _, l in ipairs(lines) do
            if l[1] == "stdout" then
                out[#out + 1] = l
            end
        end
        assert.are.same({ { "stdout", "in", false }, { "stdout", "tail", true } }, out)
        assert.are.same(h:wait(), r) -- a finished handle answers at once
    end)

    it("reports a command that cannot start, and timeouts", function()
        local r = assert(proc.spawn({ argv = { "relay-no-such-command" } })):wait()
        assert.truthy(r.start_error:find("No such file", 1, true))
        assert.is_nil(r.status)
        r = assert(proc.spawn({ argv = { "sleep", "10" }, timeout = 0.1, grace = 0.1 })):wait()
        assert.is_true(r.timed_out)
        assert.are.equal(15, r.signal)
    end)

    it("warms a cgroup from a thread: this process's pid written, no child", function()
        -- a plain file stands in for cgroup.procs
        local procs = os.tmpname()
        local before = proc.live_count()
        assert.is_true(proc.cgroup_warm(procs))
        assert.are.equal(before, proc.live_count())
        for _ = 1, 100 do
            if fs.read_file(procs) ~= "" then
                break
            end
            loop.sleep(0.05)
        end
        assert.are.equal(tostring(fs.getpid()), fs.read_file(procs))
        os.remove(procs)
        -- a write that fails is nobody's error: the thread only loses its head start
        assert.is_true(proc.cgroup_warm(procs .. "/none/cgroup.procs"))
    end)

    it("survives an on_line error and a dropped handle", function()
        local r = assert(proc.spawn({ argv = { "echo", "x" }, on_line = function() error("boom") end })):wait()
        assert.are.equal(0, r.status)
        local before = proc.live_count()
        proc.spawn({ argv = { "sleep", "0.2" } }) -- nobody keeps it
        collectgarbage()
        collectgarbage()
        loop.sleep(0.4)
        collectgarbage()
        assert.are.equal(before, proc.live_count())
    end)

    it("rejects programmer errors", function()
        assert.has_error(function() proc.spawn({}) end)
        assert.has_error(function() proc.spawn({ argv = {} }) end)
        assert.has_error(function() proc.spawn({ argv = { "true" }, stdin = 5 }) end)
    end)
end)
