-- relay.fs: the filesystem and process calls of the runtime drivers, on a
-- private temp tree. Error results are nil, "<call> <path>: <strerror>".
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local safefs = require("relay.core.safefs")
local stat = require("posix.sys.stat")
local tmp = require("helpers.tmp")

local function mode(path)
    return safefs.lstat(path).mode
end


local function touch(path, data)
    assert(fs.write_file(path, data or "x"))
end


describe("relay.fs", function()
    local root

    before_each(function()
        root = tmp.mkdtemp("relay-fs-")
    end)

    after_each(function()
        fs.rm_rf(root)
    end)

    describe("mkdtemp", function()
        it("makes a fresh private directory named after the prefix", function()
            local a = assert(fs.mkdtemp(root .. "/x-"))
            local b = assert(fs.mkdtemp(root .. "/x-"))
            assert.are_not.equal(a, b)
            assert.matches("^" .. root:gsub("%p", "%%%0") .. "/x%-......$", a)
            assert.is_true(fs.is_dir(a))
            assert.are.equal(448, mode(a)) -- 0700, whatever the umask
        end)

        it("puts a bare prefix under TMPDIR, or /tmp", function()
            local dir = assert(fs.mkdtemp("relay-fs-spec-"))
            assert.matches("/relay%-fs%-spec%-......$", dir)
            local parent = os.getenv("TMPDIR")
            if not parent or parent == "" then
                parent = "/tmp"
            end
            assert.are.equal(parent .. "/", dir:sub(1, #parent + 1))
            assert(fs.rmdir(dir))
        end)

        it("reports a missing parent", function()
            assert.are.same({ nil, "mkdtemp " .. root .. "/no/x-: No such file or directory" },
                { fs.mkdtemp(root .. "/no/x-") })
        end)
    end)

    describe("list", function()
        it("lists entries sorted by name with their own type (lstat)", function()
            assert(fs.mkdir(root .. "/d"))
            touch(root .. "/f")
            assert(fs.symlink(root .. "/d", root .. "/link-to-dir"))
            assert(fs.symlink(root .. "/f", root .. "/link-to-file"))
            assert(fs.symlink(root .. "/gone", root .. "/dangling"))
            assert.are.same({
                { name = "d", dir = true, link = false },
                { name = "dangling", dir = false, link = true },
                { name = "f", dir = false, link = false },
                { name = "link-to-dir", dir = false, link = true },
                { name = "link-to-file", dir = false, link = true },
            }, fs.list(root))
        end)

        it("lists an empty directory as an empty table (no . or ..)", function()
            assert.are.same({}, fs.list(root))
        end)

        it("follows a symlink given as the directory", function()
            assert(fs.mkdir(root .. "/d"))
            touch(root .. "/d/inner")
            assert(fs.symlink(root .. "/d", root .. "/l"))
            assert.are.same({ { name = "inner", dir = false, link = false } }, fs.list(root .. "/l"))
        end)

        it("returns nil, the opendir message and the bare reason", function()
            assert.are.same({ nil, "opendir " .. root .. "/none: No such file or directory",
                "No such file or directory" }, { fs.list(root .. "/none") })
            touch(root .. "/f")
            assert.are.same({ nil, "opendir " .. root .. "/f: Not a directory", "Not a directory" },
                { fs.list(root .. "/f") })
        end)
    end)

    describe("mkdir and mkdir_p", function()
        local old_umask

        before_each(function()
            old_umask = stat.umask(18) -- 022, so the modes below are predictable
        end)

        after_each(function()
            stat.umask(old_umask)
        end)

        it("mkdir defaults to 0755 and accepts an existing path", function()
            assert.is_true(fs.mkdir(root .. "/a"))
            assert.are.equal(493, mode(root .. "/a"))
            assert.is_true(fs.mkdir(root .. "/a", 448))
            assert.are.equal(493, mode(root .. "/a")) -- an existing directory is left as it is
        end)

        it("mkdir_p makes every missing component with the mode", function()
            assert.is_true(fs.mkdir_p(root .. "/p/q/r", 448))
            assert.are.equal(448, mode(root .. "/p"))
            assert.are.equal(448, mode(root .. "/p/q/r"))
            assert.is_true(fs.mkdir_p(root .. "/p/q/r", 448)) -- again: nothing to do
            assert.is_true(fs.mkdir_p(root .. "//p/q//s/")) -- doubled and trailing slashes
            assert.are.equal(493, mode(root .. "/p/q/s"))
        end)

        it("the umask still applies", function()
            assert.is_true(fs.mkdir_p(root .. "/m", 511)) -- 0777 & ~022
            assert.are.equal(493, mode(root .. "/m"))
        end)

        it("mkdir_p reports the component that cannot be made", function()
            touch(root .. "/file")
            assert.are.same({ nil, "mkdir " .. root .. "/file/x: Not a directory" },
                { fs.mkdir_p(root .. "/file/x/y") })
        end)
    end)

    describe("links and paths", function()
        it("realpath resolves symlinks and dot-dot", function()
            assert(fs.mkdir_p(root .. "/a/b"))
            assert(fs.symlink(root .. "/a/b", root .. "/l"))
            local real_root = assert(fs.realpath(root))
            assert.are.equal(real_root .. "/a/b", fs.realpath(root .. "/l"))
            assert.are.equal(real_root .. "/a", fs.realpath(root .. "/a/b/.."))
            assert.are.same({ nil, "realpath " .. root .. "/none: No such file or directory" },
                { fs.realpath(root .. "/none") })
        end)

        it("readlink gives the target as written, nil for anything else", function()
            assert(fs.symlink("relative/target", root .. "/l"))
            assert.are.equal("relative/target", fs.readlink(root .. "/l"))
            touch(root .. "/f")
            assert.is_nil(fs.readlink(root .. "/f"))
            assert.is_nil(fs.readlink(root .. "/none"))
            assert.are.equal(1, select("#", fs.readlink(root .. "/none")))
        end)

        it("symlink accepts an existing path and reports other failures", function()
            touch(root .. "/f")
            assert.is_true(fs.symlink("x", root .. "/f"))
            assert.is_nil(fs.readlink(root .. "/f")) -- left as it was
            assert.are.same({ nil, "symlink " .. root .. "/no/l: No such file or directory" },
                { fs.symlink("x", root .. "/no/l") })
        end)

        it("exists, is_dir and is_executable", function()
            assert(fs.mkdir(root .. "/d"))
            touch(root .. "/f")
            touch(root .. "/x")
            assert(fs.chmod(root .. "/x", 493))
            assert(fs.symlink(root .. "/d", root .. "/ld"))
            assert(fs.symlink(root .. "/gone", root .. "/dangling"))
            assert.is_true(fs.exists(root .. "/f"))
            assert.is_false(fs.exists(root .. "/none"))
            assert.is_false(fs.exists(root .. "/dangling")) -- follows the link
            assert.is_true(fs.is_dir(root .. "/d"))
            assert.is_true(fs.is_dir(root .. "/ld"))
            assert.is_false(fs.is_dir(root .. "/f"))
            assert.is_false(fs.is_dir(root .. "/none"))
            assert.is_true(fs.is_executable(root .. "/x"))
            assert.is_false(fs.is_executable(root .. "/d")) -- searchable, not executable
            assert.is_false(fs.is_executable(root .. "/none"))
        end)

        it("chmod, unlink and rmdir return true or the error", function()
            touch(root .. "/f")
            assert.is_true(fs.chmod(root .. "/f", 384))
            assert.are.equal(384, mode(root .. "/f"))
            assert.are.same({ nil, "chmod " .. root .. "/none: No such file or directory" },
                { fs.chmod(root .. "/none", 384) })
            assert.is_true(fs.unlink(root .. "/f"))
            assert.are.same({ nil, "unlink " .. root .. "/f: No such file or directory" },
                { fs.unlink(root .. "/f") })
            assert(fs.mkdir_p(root .. "/d/e"))
            assert.are.same({ nil, "rmdir " .. root .. "/d: Directory not empty" }, { fs.rmdir(root .. "/d") })
            assert.is_true(fs.rmdir(root .. "/d/e"))
        end)
    end)

    describe("rm_rf", function()
        local outside

        before_each(function()
            outside = tmp.mkdtemp("relay-fs-outside-")
            assert(fs.mkdir(outside .. "/keep"))
            touch(outside .. "/keep/file", "precious")
        end)

        after_each(function()
            fs.rm_rf(outside)
        end)

        it("removes a tree and never follows a symlink out of it", function()
            local tree = root .. "/tree"
            assert(fs.mkdir_p(tree .. "/a/b/c"))
            touch(tree .. "/a/b/c/f")
            touch(tree .. "/top")
            assert(fs.symlink(outside, tree .. "/a/to-outside"))
            assert(fs.symlink(outside .. "/keep/file", tree .. "/a/b/to-file"))
            assert(fs.symlink(tree .. "/nowhere", tree .. "/dangling"))
            assert.is_true(fs.rm_rf(tree))
            assert.is_nil(safefs.lstat(tree))
            assert.are.equal("precious", fs.read_file(outside .. "/keep/file"))
            assert.are.same({ { name = "keep", dir = true, link = false } }, fs.list(outside))
        end)

        it("removes a symlink given as the tree, not what it points to", function()
            assert(fs.symlink(outside, root .. "/l"))
            assert.is_true(fs.rm_rf(root .. "/l"))
            assert.is_nil(safefs.lstat(root .. "/l"))
            assert.are.equal("precious", fs.read_file(outside .. "/keep/file"))
        end)

        it("removes a file, and a missing path is already removed", function()
            touch(root .. "/f")
            assert.is_true(fs.rm_rf(root .. "/f"))
            assert.is_false(fs.exists(root .. "/f"))
            assert.is_true(fs.rm_rf(root .. "/none"))
        end)
    end)

    describe("files", function()
        it("write_file and read_file round-trip bytes", function()
            local data = "a\0b\255\r\n" .. string.rep("z", 70000)
            assert.is_true(fs.write_file(root .. "/f", data))
            assert.are.equal(data, fs.read_file(root .. "/f"))
            assert.is_true(fs.write_file(root .. "/f", "short")) -- truncates
            assert.are.equal("short", fs.read_file(root .. "/f"))
        end)

        it("read_file gives nil and write_file nil, err for a bad path", function()
            assert.is_nil(fs.read_file(root .. "/none"))
            local ok, err = fs.write_file(root .. "/no/f", "x")
            assert.is_nil(ok)
            assert.matches("No such file or directory", err)
        end)
    end)

    describe("which", function()
        before_each(function()
            assert(fs.mkdir_p(root .. "/bin1/tool")) -- a directory: never a match
            assert(fs.mkdir(root .. "/bin2"))
            touch(root .. "/bin2/tool")           -- not executable
            assert(fs.mkdir(root .. "/bin3"))
            touch(root .. "/bin3/tool")
            assert(fs.chmod(root .. "/bin3/tool", 493))
        end)

        it("finds the first executable file in the search path", function()
            local path = root .. "/bin1:" .. root .. "/bin2:" .. root .. "/bin3"
            assert.are.equal(root .. "/bin3/tool", fs.which("tool", path))
            assert.is_nil(fs.which("tool", root .. "/bin1:" .. root .. "/bin2"))
        end)

        it("uses PATH by default and takes a name with a slash as it is", function()
            assert.matches("/sh$", fs.which("sh"))
            assert.are.equal(root .. "/bin3/tool", fs.which(root .. "/bin3/tool"))
            assert.is_nil(fs.which(root .. "/bin2/tool"))
            assert.is_nil(fs.which("relay-no-such-tool-anywhere"))
        end)
    end)

    describe("processes", function()
        it("getpid and geteuid describe this process", function()
            assert.are.equal(loop.getpid(), fs.getpid())
            local p = io.popen("id -u")
            local uid = tonumber(p:read("*l"))
            p:close()
            assert.are.equal(uid, fs.geteuid())
        end)

        it("kill and alive follow a child's life", function()
            local h = assert(proc.spawn({ argv = { "sleep", "30" } }))
            assert.is_true(fs.alive(h.pid))
            assert.is_true(fs.kill(h.pid, 0))
            assert.is_true(fs.kill(h.pid, 15))
            assert.are.equal(15, h:wait(5).signal)
            assert.is_false(fs.alive(h.pid))
            assert.is_false(fs.kill(h.pid, 0))
        end)

        it("a zombie is not alive", function()
            -- a short sleep runs in the background of a shell that then
            -- becomes `sleep 30`, which never reaps it: a zombie once it ends.
            -- (A child that ended before the exec could be reaped by the shell.)
            local lines = {}
            local h = assert(proc.spawn({
                argv = { "sh", "-c", "sleep 0.3 & echo $!; exec sleep 30" },
                on_line = function(stream, line)
                    if stream == "stdout" then
                        lines[#lines + 1] = line
                    end
                end,
            }))
            local zombie
            for _ = 1, 250 do
                zombie = tonumber(lines[1])
                local st = zombie and fs.read_file("/proc/" .. zombie .. "/stat")
                if st and st:match("^%d+ %(.*%) (%a)") == "Z" then
                    break
                end
                loop.sleep(0.02)
            end
            assert.is_true(fs.kill(zombie, 0)) -- the pid still exists
            assert.is_false(fs.alive(zombie))
            h:kill(9)
            h:wait(5)
        end)
    end)
end)
