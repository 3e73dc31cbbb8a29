--- The bubblewrap driver: unprivileged hosts. Same contract as runc; limits
-- come from cgroup dirs Relay creates (the child joins them before exec)
-- when it can write them, and `relay app ls` says when it cannot.
--
-- Known difference: bwrap does not forward SIGTERM into the sandbox; at the
-- deadline the outer bwrap dies and --die-with-parent SIGKILLs the sandbox,
-- so a handler gets no graceful TERM under this driver.
--
-- The sandboxed command is relay-init (runtime/init.lua), which runs the
-- handler: --die-with-parent already ends the sandbox with the daemon; the
-- init also ends it at its deadline when the daemon is frozen, and reports
-- whether the handler exited 128+N or died of signal N.
--
-- Identity: bwrap maps the sandbox's uid onto the uid that runs bwrap. Run by
-- a root daemon that would be host root, so the child first joins its
-- cgroups as root, then drops to the app's own unprivileged host uid
-- (relay.runtime.ids) and only then execs bwrap, which builds its user
-- namespace as that uid. An unprivileged daemon has no ids to give: its
-- handlers run as its own uid, and `relay app ls` says so.
--
-- bwrap is then an unprivileged process that may not be able to reach the
-- app directory (a parent may be 0700): the daemon opens the app and image
-- directories itself and hands them over as descriptors (--ro-bind-fd),
-- with the seccomp program (--seccomp).
--
-- Secrets (relay.runtime.secret_files) are written per invocation into
-- <base>/secrets/<id>/ (0500, files 0400, the handler's host uid: no one
-- else enters it; secrets/ itself is searchable only), handed over as a
-- descriptor and bound read-only at /run/secrets; `as: env` ones reach
-- bwrap through `--args FD` (a file unlinked once opened), never on its
-- command line. Template mounts are descriptors too
-- (--bind-fd / --ro-bind-fd: bwrap's binds are always nosuid and nodev).
local fs = require("relay.fs")
local ids = require("relay.runtime.ids")
local log = require("relay.log")
local runtime = require("relay.runtime")
local safefs = require("relay.core.safefs")
local secret_files = require("relay.runtime.secret_files")

local _M = {}
local D = {}

-- Its relay-init can wait for a start record: containers can be created
-- before their events (relay.runtime.warm_pool).
D.warm = true

local UID, GID = ids.CONTAINER_USER, ids.CONTAINER_USER
-- descriptors the child receives, in this order, from fd 3 on; the control
-- socket of relay-init (relay.core.proc) comes right after the last one
local SECCOMP_FD, APP_FD, INIT_FD, IMAGE_FD = 3, 4, 5, 6
local CPU_PERIOD = 100000
local HOST_TOP = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" }
local RM_TRIES = 20


function _M.available()
    return fs.which("bwrap") ~= nil
end


function _M.new(rt)
    return setmetatable({ rt = rt, bwrap = fs.which("bwrap") }, { __index = D })
end


function D:check(app)
    if not self.bwrap then
        return nil, "bwrap not found in PATH"
    end
    local ok, why = runtime.check_command_and_image(self.rt, app)
    if not ok then
        return nil, why
    end
    if not runtime.init_binary() then
        return nil, "relay-init not found beside the relay binary or in libexec/relay/ (reinstall Relay)"
    end
    if not runtime.userns_available() then
        return nil, "user namespaces are disabled on this host (user.max_user_namespaces is 0)"
    end
    local clone = fs.read_file("/proc/sys/kernel/unprivileged_userns_clone")
    if clone and clone:match("^0") then
        return nil, "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0): " ..
            "bwrap cannot sandbox as an unprivileged uid; use runc, or set it to 1"
    end
    return true
end


local function write(path, value)
    local f, err = io.open(path, "w")
    if not f then
        return nil, err
    end
    f:setvbuf("no") -- a cgroup refuses a value at write(), not at close
    local ok, werr = f:write(tostring(value))
    f:close()
    if not ok then
        return nil, path .. ": " .. tostring(werr)
    end
    return true
end


--- Leaves to create for one invocation: { {dir=, files={{name, value}...}} }.
local function cgroup_plan(rt, id, limits)
    local mode = runtime.cgroup_mode()
    local root = runtime.CGROUP_ROOT
    if mode == "v1" then
        local plan = {
            { dir = root .. "/memory/" .. rt.cgroup_parent .. "/" .. id,
              files = { { "memory.limit_in_bytes", limits.memory },
                        { "memory.memsw.limit_in_bytes", limits.memory } } },
            { dir = root .. "/pids/" .. rt.cgroup_parent .. "/" .. id, files = { { "pids.max", limits.pids } } },
        }
        if limits.cpus then
            plan[3] = { dir = root .. "/cpu/" .. rt.cgroup_parent .. "/" .. id,
                files = { { "cpu.cfs_period_us", CPU_PERIOD },
                          { "cpu.cfs_quota_us", math.floor(limits.cpus * CPU_PERIOD) } } }
        end
        return plan
    elseif mode == "v2" then
        local files = { { "memory.max", limits.memory }, { "memory.swap.max", 0 }, { "pids.max", limits.pids } }
        if limits.cpus then
            files[#files + 1] = { "cpu.max", math.floor(limits.cpus * CPU_PERIOD) .. " " .. CPU_PERIOD }
        end
        return { { dir = root .. "/" .. rt.cgroup_parent .. "/" .. id, files = files, v2 = true } }
    end
    return nil
end


--- cgroup v2 needs the controllers enabled in every ancestor.
local function enable_v2_controllers(rel)
    local path = runtime.CGROUP_ROOT
    for part in rel:gmatch("[^/]+") do
        write(path .. "/cgroup.subtree_control", "+memory +pids +cpu")
        path = path .. "/" .. part
    end
end


--- Creates the invocation's cgroup leaves; returns their cgroup.procs files
-- and dirs, or nil, err (then nothing is left behind).
function D:cgroup_setup(id, limits)
    local plan = cgroup_plan(self.rt, id, limits)
    if not plan then
        return nil, "no cgroup hierarchy"
    end
    local procs, dirs = {}, {}
    for _, leaf in ipairs(plan) do
        local ok, err = fs.mkdir_p(leaf.dir)
        if ok and leaf.v2 then
            enable_v2_controllers(self.rt.cgroup_parent .. "/" .. id)
        end
        for _, f in ipairs(ok and leaf.files or {}) do
            -- memsw may be absent (no swap accounting): not fatal
            local wok, werr = write(leaf.dir .. "/" .. f[1], f[2])
            if not wok and f[1] ~= "memory.memsw.limit_in_bytes" and f[1] ~= "memory.swap.max" then
                ok, err = nil, werr
                break
            end
        end
        if ok then
            dirs[#dirs + 1] = leaf.dir
            procs[#procs + 1] = leaf.dir .. "/cgroup.procs"
        else
            fs.rmdir(leaf.dir)
            for _, d in ipairs(dirs) do
                fs.rmdir(d)
            end
            return nil, err
        end
    end
    return procs, dirs
end


--- Whether limits can be enforced here (probed once per context).
function D:can_limit()
    if self.limit_ok == nil then
        local procs, dirs = self:cgroup_setup(self.rt.prefix .. "-probe-" .. self.rt.pid, runtime.limits({}))
        self.limit_ok = procs ~= nil
        self.limit_err = dirs
        if procs then
            for _, d in ipairs(dirs) do
                fs.rmdir(d)
            end
        end
    end
    return self.limit_ok, self.limit_err
end


function D:note(_)
    local notes = {}
    local ok, err = self:can_limit()
    if not ok then
        notes[#notes + 1] = "memory and pids limits not enforced: cannot write cgroups (" .. tostring(err) .. ")"
    end
    if fs.geteuid() ~= 0 then
        notes[#notes + 1] = "handlers run as the daemon's uid " .. fs.geteuid() ..
            " (not root: no per-app uids)"
    end
    return #notes > 0 and table.concat(notes, "; ") or nil
end


local function push(argv, ...)
    for _, a in ipairs({ ... }) do
        argv[#argv + 1] = a
    end
end


local function host_rootfs_args(argv)
    for _, d in ipairs({ "/usr", "/etc" }) do
        push(argv, "--ro-bind", d, d)
    end
    for _, name in ipairs(HOST_TOP) do
        local target = fs.readlink("/" .. name)
        if target then
            push(argv, "--symlink", target, "/" .. name)
        elseif fs.is_dir("/" .. name) then
            push(argv, "--ro-bind", "/" .. name, "/" .. name)
        end
    end
end


--- The bwrap command line of one invocation (no side effects). With an
-- image the rootfs is descriptor IMAGE_FD; /app is always APP_FD,
-- relay-init always INIT_FD. extra (optional, from D:open_extra_fds):
-- { binds = { {flag, fd, target} ... }, args_fd, control_fd }.
function D:command(app, inv, image, extra)
    local limits = runtime.limits(app)
    local argv = { self.bwrap or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns" }
    if limits.network == "host" then
        push(argv, "--share-net")
    end
    push(argv, "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL",
        "--uid", tostring(UID), "--gid", tostring(GID), "--hostname", "relay")
    if not runtime.seccomp_unconfined(app) then
        push(argv, "--seccomp", tostring(SECCOMP_FD))
    end
    if image then
        push(argv, "--ro-bind-fd", tostring(IMAGE_FD), "/")
    else
        host_rootfs_args(argv)
    end
    -- bwrap's own root is a writable tmpfs: --remount-ro makes it read-only
    -- (not recursive: /tmp stays writable)
    -- bwrap covers /proc/sys only when it could write it; make it read-only
    -- always (net.* still shows the sandbox's own namespace: it is resolved
    -- per reader)
    push(argv, "--ro-bind-fd", tostring(APP_FD), "/app", "--ro-bind-fd", tostring(INIT_FD), runtime.INIT_TARGET)
    for _, b in ipairs(extra and extra.binds or {}) do
        push(argv, b[1], tostring(b[2]), b[3])
    end
    push(argv, "--tmpfs", "/tmp", "--proc", "/proc",
        "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev", "--remount-ro", "/", "--chdir", "/app")
    for _, kv in ipairs(runtime.env_list(runtime.container_env(app, inv))) do
        local k, v = kv:match("^([^=]*)=(.*)$")
        push(argv, "--setenv", k, v)
    end
    if extra and extra.args_fd then
        push(argv, "--args", tostring(extra.args_fd))
    end
    push(argv, "--")
    local control_fd = extra and extra.control_fd or (image and IMAGE_FD + 1 or IMAGE_FD)
    push(argv, unpack(runtime.init_args(inv, control_fd)))
    for _, a in ipairs(app.runtime.command) do
        argv[#argv + 1] = a
    end
    return argv
end


--- The seccomp program, written once per context (0600, beneath the
-- context's private directory); each spawn opens its own descriptor.
function D:seccomp_file()
    if not self.bpf_path then
        local base = self.rt.base_dir
        local ok, err = fs.mkdir_p(base, 457)
        if not ok then
            return nil, err
        end
        local path = base .. "/seccomp.bpf"
        fs.unlink(path)
        ok, err = require("relay.core.seccomp").write_bpf(path, runtime.SECCOMP_PROFILE)
        if not ok then
            return nil, err
        end
        self.bpf_path = path
    end
    return self.bpf_path
end


--- Descriptors for one spawn: { seccomp program, app dir, relay-init[, image rootfs] }.
function D:open_fds(app, image)
    local fds = {}
    local function fail(err)
        runtime.close_fds(fds)
        return nil, err
    end
    local bpf, err = self:seccomp_file()
    if not bpf then
        return fail(err)
    end
    fds[1], err = safefs.open_read(bpf)
    if not fds[1] then
        return fail(err)
    end
    fds[2], err = safefs.open_path(runtime.app_dir(app))
    if not fds[2] then
        return fail(err)
    end
    local init = runtime.init_binary()
    if not init then
        return fail("relay-init not found beside the relay binary or in libexec/relay/")
    end
    fds[3], err = safefs.open_read(init)
    if not fds[3] then
        return fail(err)
    end
    if image then
        fds[4], err = safefs.open_path(image.root, image.rel)
        if not fds[4] then
            return fail(err)
        end
    end
    return fds
end


--- `--setenv NAME VALUE` of each secret delivered as a variable, NUL
-- separated for `--args`, written to a root-only file that is unlinked as
-- soon as it is open: the descriptor is all that is left. fd | nil, err.
local function env_args_fd(dir, secrets)
    local parts = {}
    for _, s in ipairs(secrets) do
        if s.as == "env" then
            parts[#parts + 1] = "--setenv\0" .. s.name .. "\0" .. s.value .. "\0"
        end
    end
    if #parts == 0 then
        return nil
    end
    local path = dir .. ".args"
    fs.unlink(path)
    local ok, err = safefs.write_new(path, table.concat(parts), 256) -- 0400
    local fd
    if ok then
        fd, err = safefs.open_read(path)
    end
    fs.unlink(path)
    return fd, err
end


--- The secrets delivered as files, written into dir for the handler's
-- host uid (a root daemon's) and opened: fd | nil, err.
function D:secret_dir_fd(app, dir, files)
    local block = fs.geteuid() == 0 and self.rt:id_block(app) or {}
    local ok, err = secret_files.write(dir, files, block.handler_uid, block.handler_gid)
    if not ok then
        return nil, err
    end
    return safefs.open_path(dir)
end


--- Where the invocation's secrets go, when it has any: <base>/secrets/<id>
-- (made later), its parent made now. dir, true | nil, true (no secrets) |
-- nil, nil, err.
function D:secrets_dir(id, plan)
    if #plan.secrets == 0 then
        return nil, true
    end
    local parent = self.rt.base_dir .. "/secrets"
    -- 0711: bwrap resolves a bind descriptor's path as the handler's uid;
    -- the invocation's own directory (0500, the handler's) keeps others out
    local ok, err = safefs.private_dir(parent, 457)
    if not ok then
        return nil, nil, err
    end
    if self.rt.private then
        self.rt:made_dir(parent)
    end
    return parent .. "/" .. id, true
end


--- Descriptors of the invocation's secrets and mounts, appended to fds
-- (after the ones open_fds opened): { binds, args_fd, control_fd,
-- secrets_dir } for D:command, or nil, err (its secrets removed again).
function D:open_extra_fds(app, id, plan, fds)
    local extra = { binds = {} }
    local function add(fd, flag, target)
        fds[#fds + 1] = fd
        local n = SECCOMP_FD + #fds - 1
        if flag then
            extra.binds[#extra.binds + 1] = { flag, n, target }
        end
        return n
    end
    local dir, ok, err = self:secrets_dir(id, plan)
    if dir and #plan.secret_files > 0 then
        extra.secrets_dir = dir
        ok, err = self:secret_dir_fd(app, dir, plan.secret_files)
        if ok then
            add(ok, "--ro-bind-fd", runtime.SECRETS_TARGET)
        end
    end
    for _, m in ipairs(ok and plan.mounts or {}) do
        ok, err = safefs.open_path(m.source)
        if not ok then
            break
        end
        add(ok, m.writable and "--bind-fd" or "--ro-bind-fd", m.target)
    end
    if ok and dir then
        local fd, aerr = env_args_fd(dir, plan.secrets)
        ok, err = not aerr, aerr
        extra.args_fd = fd and add(fd)
    end
    if not ok then
        if dir then
            secret_files.remove(dir)
        end
        return nil, err
    end
    extra.control_fd = SECCOMP_FD + #fds
    return extra
end


--- An image rootfs needs its mountpoints to exist (the root is read-only);
-- created without following a symlink the image may carry.
local function prepare_image(image)
    local ok, err = safefs.mkdir_beneath(image.root, image.rel .. "/tmp", 1023)
    if ok then
        ok, err = safefs.mkdir_beneath(image.root, image.rel .. "/app", 493)
    end
    if ok then
        ok, err = safefs.touch_beneath(image.root, image.rel .. runtime.INIT_TARGET, 420)
    end
    return ok, err and ("image " .. image.rel .. ": " .. err)
end


function D:prepare(app, inv)
    local plan, err = secret_files.plan(self.rt, app)
    if not plan then
        return nil, err
    end
    local image
    image, err = self.rt:image(app)
    if err then
        return nil, err
    end
    if image then
        local ok, perr = prepare_image(image)
        if ok then
            ok, perr = runtime.make_mountpoints(image.root, image.rel, app, plan)
        end
        if not ok then
            return nil, perr
        end
    end
    local fds, ferr = self:open_fds(app, image)
    if not fds then
        return nil, ferr
    end
    local limits = runtime.limits(app)
    local id = runtime.container_id(self.rt, app.name, inv.handler)
    local extra, xerr = self:open_extra_fds(app, id, plan, fds)
    if not extra then
        runtime.close_fds(fds)
        return nil, xerr
    end
    local spec = {
        id = id,
        secrets_dir = extra.secrets_dir,
        argv = self:command(app, inv, image, extra),
        env = { PATH = os.getenv("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin" },
        cgroup_dirs = {},
        pass_fds = fds,
        control = true,
        command = app.runtime.command[1],
        nofile = limits.nofile,
        no_core = true,
    }
    if fs.geteuid() == 0 then
        local block = self.rt:id_block(app)
        spec.uid, spec.gid = block.handler_uid, block.handler_gid
    end
    if self:can_limit() then
        local procs, dirs = self:cgroup_setup(id, runtime.limits(app))
        if procs then
            spec.cgroup_procs, spec.cgroup_dirs = procs, dirs
        else
            log.warn("bwrap: running without limits", { app = app.name, error = dirs })
        end
    end
    -- bwrap's own setup errors look like a handler's exit 1 except for this
    -- prefix, and come without relay-init's record
    spec.observe = function(stream, line)
        if stream == "stderr" and line:sub(1, 7) == "bwrap: " then
            spec.bwrap_error = line
        elseif stream == "control" then
            spec.init_record = spec.init_record or runtime.parse_init_record(line)
        end
    end
    return spec
end


local function kill_cgroup(dir)
    local procs = fs.read_file(dir .. "/cgroup.procs") or ""
    for pid in procs:gmatch("%d+") do
        fs.kill(tonumber(pid), 9)
    end
end


--- Removes the leaves; a leftover process (there should be none: the pid
-- namespace died with bwrap) is killed first.
local function remove_leaves(dirs)
    local ok, loop = pcall(require, "relay.core.loop")
    for _, dir in ipairs(dirs) do
        for _ = 1, RM_TRIES do
            if fs.rmdir(dir) or not fs.is_dir(dir) then
                break
            end
            kill_cgroup(dir)
            if ok then
                loop.sleep(0.05)
            end
        end
    end
end


function D.finish(_, spec, report)
    local out = { status = report.status, signal = report.signal }
    remove_leaves(spec.cgroup_dirs or {})
    if spec.secrets_dir then
        secret_files.remove(spec.secrets_dir)
    end
    if report.start_error then
        out.host_failure, out.detail = true, "bwrap: " .. report.start_error
    elseif spec.bwrap_error and report.status == 1 and not spec.init_record then
        -- bwrap only ever executes relay-init: its errors are the host's
        out.host_failure, out.detail = true, spec.bwrap_error
    else
        runtime.init_outcome(out, report.status, spec.init_record, spec.command)
    end
    return out
end


--- Orphans: bwrap dies with its parent, so only empty cgroup leaves and
-- the secrets of invocations this consumer was running remain.
function D:sweep()
    self.rt:sweep_cgroup_leaves()
    local dir = self.rt.base_dir .. "/secrets"
    for _, e in ipairs(fs.list(dir) or {}) do
        if e.name:sub(1, #self.rt.prefix + 1) == self.rt.prefix .. "-" then
            secret_files.remove(dir .. "/" .. e.name)
        end
    end
    return 0
end


return _M
