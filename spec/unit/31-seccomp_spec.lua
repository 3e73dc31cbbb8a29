-- The default seccomp policy (relay.core.seccomp): the OCI linux.seccomp
-- object runc loads, and the BPF file bwrap --seccomp reads. What a process
-- under either filter can do is tested in tests/unit/test_seccomp_policy.c.
local cjson = require("cjson")
local fs = require("relay.fs")
local json = require("relay.runtime.json")
local seccomp = require("relay.core.seccomp")

-- The calls no handler may make, whichever profile is loaded.
local REFUSED = {
    "unshare", "setns", "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "keyctl", "add_key", "request_key",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open", "ptrace",
    "process_vm_readv", "process_vm_writev", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff", "userfaultfd",
    "open_by_handle_at", "name_to_handle_at", "acct", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "syslog", "quotactl", "lookup_dcookie", "nfsservctl", "iopl",
    "ioperm", "create_module", "get_kernel_syms", "query_module", "uselib", "ustat", "sysfs",
    "_sysctl", "setdomainname", "sethostname", "chroot", "fanotify_init", "kcmp", "mbind",
    "set_mempolicy", "move_pages", "vm86", "vm86old",
}

local PERSONALITY_VALUES = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffff }


-- name -> list of the syscalls entries that mention it
local function entries_by_name(profile)
    local by = {}
    for _, entry in ipairs(profile.syscalls) do
        for _, name in ipairs(entry.names) do
            by[name] = by[name] or {}
            table.insert(by[name], entry)
        end
    end
    return by
end


local function read_all(path)
    local f = assert(io.open(path, "rb"))
    local data = f:read("*a")
    f:close()
    return data
end


local function temp_path()
    local path = os.tmpname()
    os.remove(path)
    return path
end


describe("seccomp profile", function()
    it("is an OCI linux.seccomp object, allowlist by default", function()
        local p = seccomp.profile()
        assert.are.same(p, seccomp.profile("allowlist"))
        assert.are.equal("SCMP_ACT_ERRNO", p.defaultAction)
        assert.are.equal(1, p.defaultErrnoRet)
        for _, arch in ipairs(p.architectures or {}) do
            assert.matches("^SCMP_ARCH_", arch)
        end
        if jit.arch == "x64" then
            -- the native ABI only: a filter per 32-bit ABI made runc starts ~11 ms slower
            assert.are.same({ "SCMP_ARCH_X86_64" }, p.architectures)
        end
        local first = p.syscalls[1]
        assert.are.equal("SCMP_ACT_ALLOW", first.action)
        assert.is_true(#first.names > 250)
        for _, entry in ipairs(p.syscalls) do
            assert.is_string(entry.action)
            assert.is_true(#entry.names >= 1)
        end
    end)

    it("encodes to JSON with every list as an array", function()
        for _, kind in ipairs({ "allowlist", "denylist" }) do
            local p = seccomp.profile(kind)
            local text = json.encode(p)
            assert.are.same(p, cjson.decode(text))
            assert.matches('"architectures":%["SCMP_ARCH_', text)
            assert.matches('"names":%["clone3"%]', text)
            assert.matches('"args":%[{"index":0,"op":"SCMP_CMP_MASKED_EQ","value":%d+,"valueTwo":%d+}%]', text)
            -- the C module's text (what every runc config carries) is the same, byte for byte
            assert.are.equal(text, seccomp.profile_json(kind))
        end
    end)

    it("allows personality only with the harmless values, clone without namespaces, clone3 never", function()
        local by = entries_by_name(seccomp.profile())
        local values = {}
        for _, entry in ipairs(by.personality) do
            assert.are.equal("SCMP_ACT_ALLOW", entry.action)
            assert.are.same({ "personality" }, entry.names)
            assert.are.equal(1, #entry.args)
            assert.are.equal(0, entry.args[1].index)
            assert.are.equal("SCMP_CMP_EQ", entry.args[1].op)
            table.insert(values, entry.args[1].value)
        end
        assert.are.same(PERSONALITY_VALUES, values)
        assert.are.same({ { names = { "clone" }, action = "SCMP_ACT_ALLOW",
            args = { { index = 0, value = 2114060288, valueTwo = 0, op = "SCMP_CMP_MASKED_EQ" } } } }, by.clone)
        assert.are.same({ { names = { "clone3" }, action = "SCMP_ACT_ERRNO", errnoRet = 38 } }, by.clone3)
        assert.matches('"value":4294967295', json.encode(by.personality[5]))
    end)

    it("leaves every refused call to the default EPERM", function()
        local by = entries_by_name(seccomp.profile())
        for _, name in ipairs(REFUSED) do
            assert.is_nil(by[name], name)
        end
        for _, name in ipairs({ "read", "write", "execve", "exit_group", "futex", "epoll_wait", "socket" }) do
            assert.are.equal(1, #by[name], name)
            assert.are.equal("SCMP_ACT_ALLOW", by[name][1].action)
        end
    end)

    it("denylist: default allow, EPERM for the refused calls, the same argument rules", function()
        local p = seccomp.profile("denylist")
        assert.are.equal("SCMP_ACT_ALLOW", p.defaultAction)
        assert.is_nil(p.defaultErrnoRet)
        local by = entries_by_name(p)
        for _, name in ipairs(REFUSED) do
            assert.is_table(by[name], name)
            assert.are.same({ { names = p.syscalls[1].names, action = "SCMP_ACT_ERRNO", errnoRet = 1 } }, by[name])
        end
        assert.is_nil(by.read)
        for _, name in ipairs({ "personality", "clone" }) do
            for _, entry in ipairs(by[name]) do
                assert.are.equal("SCMP_ACT_ERRNO", entry.action)
                assert.are.equal(1, entry.errnoRet)
                assert.are.equal(1, #entry.args)
            end
        end
        assert.are.equal(7, #by.clone)
        assert.are.same({ { names = { "clone3" }, action = "SCMP_ACT_ERRNO", errnoRet = 38 } }, by.clone3)
        -- no rule refuses a value the allowlist allows
        for _, entry in ipairs(by.personality) do
            local a = entry.args[1]
            for _, v in ipairs(PERSONALITY_VALUES) do
                if a.op == "SCMP_CMP_EQ" then
                    assert.are_not.equal(v, a.value)
                elseif a.op == "SCMP_CMP_GT" then
                    assert.is_true(v <= a.value)
                else
                    assert.are.equal("SCMP_CMP_MASKED_EQ", a.op)
                    assert.are_not.equal(a.valueTwo, bit.band(v, a.value) % 2 ^ 32)
                end
            end
        end
    end)

    it("rejects an unknown kind", function()
        assert.has_error(function() seccomp.profile("strict") end)
        assert.has_error(function() seccomp.write_bpf(temp_path(), "strict") end)
    end)
end)


describe("seccomp write_bpf", function()
    it("writes a BPF program to a new 0600 file", function()
        for _, kind in ipairs({ "allowlist", "denylist" }) do
            local path = temp_path()
            assert.is_true(seccomp.write_bpf(path, kind ~= "allowlist" and kind or nil))
            local data = read_all(path)
            assert.is_true(#data > 0)
            assert.are.equal(0, #data % 8)
            local stat = assert(io.popen("stat -c %a " .. path))
            assert.are.equal("600", stat:read("*l"))
            stat:close()
            os.remove(path)
        end
    end)

    it("refuses an existing path and a symlink, and leaves them alone", function()
        local path = os.tmpname()
        local ok, err = seccomp.write_bpf(path)
        assert.is_nil(ok)
        assert.are.equal("cannot create " .. path .. ": File exists", err)
        assert.are.equal("", read_all(path))

        local link = temp_path()
        assert(fs.symlink(path, link))
        ok, err = seccomp.write_bpf(link, "denylist")
        assert.is_nil(ok)
        assert.matches("^cannot create ", err)
        assert.are.equal("", read_all(path))
        os.remove(link)
        os.remove(path)
    end)

    it("reports a missing directory", function()
        local ok, err = seccomp.write_bpf("/nonexistent-relay-dir/filter.bpf")
        assert.is_nil(ok)
        assert.are.equal("cannot create /nonexistent-relay-dir/filter.bpf: No such file or directory", err)
    end)
end)
