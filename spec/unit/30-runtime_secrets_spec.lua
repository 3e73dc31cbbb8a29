-- How runc and bwrap are handed an invocation's secrets and mounts (no
-- container is started: spec/integration/32-secrets_mounts_spec.lua does):
-- the secret files' modes and owner, values kept off every command line,
-- bind options, descriptors in order, the secrets gone with the invocation,
-- and a secret removed since the last check failing the start.
local apps = require("relay.apps")
local fs = require("relay.fs")
local runtime = require("relay.runtime")
local safefs = require("relay.core.safefs")
local tmp = require("helpers.tmp")
local stdlib = require("posix.stdlib")
local unistd = require("posix.unistd")

local FILE_VALUE, ENV_VALUE = "file-value-4d1c", "env-value-8e2a"

local INV = {
    handler = "h", trigger = "event", message_id = "1700000000000-0",
    attempt = 1, deadline_ms = 1700000020000, kill_at_ms = 123456789,
}

local root


local function make_app()
    local text = "runtime:\n  image: host\n  command: [/bin/true]\n" ..
        "  secrets: [key, {name: env:SPEC_RUNTIME_SECRET, as: env}]\n" ..
        "  mounts:\n    - {source: " .. root .. "/allowed/out, target: /out, writable: true}\n" ..
        "    - {source: " .. root .. "/allowed/ref, target: /ref}\n" ..
        "events:\n  - {handler: h, pattern: {t: [x]}}\n"
    local app = apps.validate(text, root .. "/apps/sec/template.yaml", "sec", root .. "/apps/sec")
    assert.are.equal("ok", app.state, app.error)
    return app
end


local function ctx(private)
    return runtime.new({ runtime = "auto", state_dir = root .. "/state", consumer = "sec-1", private = private,
        secrets_dir = root .. "/secrets", allowed_mounts = { root .. "/allowed" } })
end


local function index_of(list, value)
    for i, v in ipairs(list) do
        if v == value then
            return i
        end
    end
end


local function assert_no_value(argv)
    local line = table.concat(argv, " ")
    assert.is_nil(line:find(FILE_VALUE, 1, true))
    assert.is_nil(line:find(ENV_VALUE, 1, true))
end


describe("secrets and mounts handed to the drivers", function()
    before_each(function()
        root = tmp.mkdtemp("relay-rtsec-", 493)
        assert(fs.mkdir_p(root .. "/apps/sec"))
        assert(fs.mkdir_p(root .. "/secrets", 448))
        assert(fs.write_file(root .. "/secrets/key", FILE_VALUE))
        assert(fs.mkdir_p(root .. "/allowed/out"))
        assert(fs.mkdir_p(root .. "/allowed/ref"))
        -- a variable of the daemon's environment (this process's)
        stdlib.setenv("SPEC_RUNTIME_SECRET", ENV_VALUE)
    end)

    after_each(function()
        stdlib.setenv("SPEC_RUNTIME_SECRET", nil)
        fs.rm_rf(root)
        runtime.remove_cgroup_dirs("relay/sec-1")
    end)

    it("runc: a 0500 secrets dir of 0400 files in the root-only bundle, binds nosuid,nodev", function()
        if fs.geteuid() ~= 0 then
            return -- the runc driver needs root; spec/integration covers it for real
        end
        local rt = ctx()
        local d = require("relay.runtime.runc").new(rt)
        local app = make_app()
        local spec = assert(d:prepare(app, INV))
        assert_no_value(spec.argv)
        local block = rt:id_block(app)
        local file = safefs.lstat(spec.dir .. "/secrets/key")
        assert.are.same({ 256, block.handler_uid }, { file.mode, file.uid })
        local dir = safefs.lstat(spec.dir .. "/secrets")
        assert.are.same({ 320, block.handler_uid }, { dir.mode, dir.uid })
        assert.are.equal(FILE_VALUE, fs.read_file(spec.dir .. "/secrets/key"))
        local config = require("cjson").decode(fs.read_file(spec.dir .. "/config.json"))
        assert.truthy(index_of(config.process.env, "SPEC_RUNTIME_SECRET=" .. ENV_VALUE))
        local by_target = {}
        for _, m in ipairs(config.mounts) do
            by_target[m.destination] = m
        end
        assert.are.same({ "bind", "ro", "nosuid", "nodev" }, by_target["/run/secrets"].options)
        assert.are.equal(spec.dir .. "/secrets", by_target["/run/secrets"].source)
        assert.are.same({ "bind", "rw", "nosuid", "nodev" }, by_target["/out"].options)
        assert.are.same({ "bind", "ro", "nosuid", "nodev" }, by_target["/ref"].options)
        assert.are.equal(root .. "/allowed/ref", by_target["/ref"].source)
        -- the mountpoints exist in the read-only rootfs
        assert.is_true(fs.is_dir(d.host_rootfs .. "/run/secrets"))
        assert.is_true(fs.is_dir(d.host_rootfs .. "/out"))
        d:finish(spec, { status = 0 })
        assert.is_false(fs.exists(spec.dir))
    end)

    it("bwrap: descriptors for /run/secrets and the mounts, env secrets through --args", function()
        local rt = ctx(true)
        local d = require("relay.runtime.bwrap").new(rt)
        d.limit_ok = false
        local spec = assert(d:prepare(make_app(), INV))
        assert_no_value(spec.argv)
        -- seccomp, app, init, then the secrets dir, the two mounts, the --args file
        assert.are.equal(7, #spec.pass_fds)
        local argv = table.concat(spec.argv, " ")
        assert.truthy(argv:find("--ro-bind-fd 6 /run/secrets --bind-fd 7 /out --ro-bind-fd 8 /ref", 1, true), argv)
        assert.truthy(argv:find("--args 9 -- /.relay-init -d 123456789 -c 10 --", 1, true), argv)
        assert.are.equal("--setenv\0SPEC_RUNTIME_SECRET\0" .. ENV_VALUE .. "\0", unistd.read(spec.pass_fds[7], 4096))
        local file = safefs.lstat(spec.secrets_dir .. "/key")
        assert.are.equal(256, file.mode)
        assert.are.equal(320, safefs.lstat(spec.secrets_dir).mode)
        -- the --args file is gone once open: only the descriptor holds the value
        assert.are.same({ "key" }, fs.names(spec.secrets_dir))
        assert.are.same({ spec.id }, fs.names(rt.base_dir .. "/secrets"))
        runtime.close_fds(spec.pass_fds)
        d.finish(d, spec, { status = 0 })
        assert.is_false(fs.exists(spec.secrets_dir))
        rt:close()
    end)

    it("fails a start whose secret was removed since the last check, leaving nothing behind", function()
        local rt = ctx(true)
        local d = require("relay.runtime.bwrap").new(rt)
        d.limit_ok = false
        local app = make_app()
        assert.is_true(d:check(app))
        os.remove(root .. "/secrets/key")
        local spec, err = d:prepare(app, INV)
        assert.is_nil(spec)
        assert.are.equal(root .. "/apps/sec/template.yaml:4:13: secret key is missing: no file " .. root ..
            "/secrets/key", err)
        assert.are.same({}, fs.names(rt.base_dir .. "/secrets") or {})
        rt:close()
    end)

    it("docker and podman refuse them rather than run without them", function()
        for _, engine in ipairs({ "docker", "podman" }) do
            local d = require("relay.runtime." .. engine).new(ctx())
            d.bin = "/bin/true" -- present or not on this host: the refusal comes first
            local app = make_app()
            app.runtime.image = "example/app:1"
            local ok, why = d:check(app)
            assert.is_nil(ok)
            assert.are.equal("runtime.secrets and runtime.mounts are not supported by the " .. engine ..
                " driver yet (use runc or bwrap)", why)
        end
    end)
end)
