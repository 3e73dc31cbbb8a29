-- relay.runtime.command_path: a container's program resolved from the host
-- as the container would see it, for `relay app validate`.
local command_path = require("relay.runtime.command_path")
local fs = require("relay.fs")
local tmp = require("helpers.tmp")

local function write(path, text, mode)
    assert(fs.write_file(path, text))
    assert(fs.chmod(path, mode or 493))
end


describe("command_path", function()
    local dir, rootfs, app

    before_each(function()
        dir = tmp.mkdtemp("relay-cmdpath-")
        assert(fs.mkdir_p(dir .. "/app/rootfs/usr/bin"))
        assert(fs.mkdir_p(dir .. "/app/rootfs/etc"))
        rootfs = dir .. "/app/rootfs"
        assert(fs.symlink("usr/bin", rootfs .. "/bin"))
        write(rootfs .. "/usr/bin/busybox", "#!/bin/true\n")
        assert(fs.symlink("busybox", rootfs .. "/usr/bin/sh"))
        assert(fs.symlink("/etc/secret", rootfs .. "/usr/bin/escape"))  -- absolute: inside the rootfs
        assert(fs.symlink("../../../../../../etc/passwd", rootfs .. "/usr/bin/up"))
        write(dir .. "/app/run.sh", "#!/bin/sh\n")
        write(dir .. "/app/notes.txt", "text", 420)
        app = { dir = dir .. "/app", runtime = { image = "rootfs", command = { "/bin/sh" } } }
    end)

    after_each(function()
        fs.rm_rf(dir)
    end)

    it("follows symlinks inside the rootfs, never out of it", function()
        assert.are.equal("/usr/bin/busybox", command_path.resolve(rootfs, "/bin/sh"))
        assert.are.same({ nil, "/etc/secret does not exist" }, { command_path.resolve(rootfs, "/bin/escape") })
        -- .. stops at the rootfs's root: /etc/passwd of the rootfs, which it lacks
        assert.are.same({ nil, "/etc/passwd does not exist" }, { command_path.resolve(rootfs, "/usr/bin/up") })
    end)

    it("accepts a program the image has, found by path or in PATH", function()
        assert.is_true(command_path.check(app))
        app.runtime.command = { "busybox" }
        assert.is_true(command_path.check(app))
        app.runtime.command = { "/app/run.sh" }
        assert.is_true(command_path.check(app))
    end)

    it("refuses a missing program, a directory and a file without x bits", function()
        app.runtime.command = { "/usr/bin/python3" }
        assert.are.same({ nil, "/usr/bin/python3 does not exist" }, { command_path.check(app) })
        app.runtime.command = { "python3" }
        local ok, why = command_path.check(app)
        assert.is_nil(ok)
        assert.matches("^python3 is not found in the container's PATH", why)
        app.runtime.command = { "/usr" }
        assert.are.same({ nil, "/usr is not a regular file" }, { command_path.check(app) })
        app.runtime.command = { "/app/notes.txt" }
        assert.are.same({ nil, "/app/notes.txt is not executable (chmod +x)" }, { command_path.check(app) })
    end)

    it("sees only /usr and /etc of the host under image: host", function()
        app.runtime.image = "host"
        app.runtime.command = { "/bin/sh" }
        assert.is_true(command_path.check(app))
        app.runtime.command = { dir .. "/app/run.sh" }
        local ok, why = command_path.check(app)
        assert.is_nil(ok)
        assert.matches("is not visible under image: host %(only /usr and /etc are%)$", why)
    end)
end)
