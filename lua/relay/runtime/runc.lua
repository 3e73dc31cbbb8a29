--- The runc driver (the reference): one OCI bundle per invocation, foreground
-- `runc run` with pipes, so stdout and stderr stay separate.
--
-- Layout under the context's base dir ($RELAY_STATE_DIR/<consumer>/ for the
-- daemon, .../invoke-<pid>/ for `relay app invoke`):
--   runc/                      runc --root (container state)
--   rootfs-host/               the shared `image: host` rootfs (mountpoints, symlinks)
--   bundles/<app>/<id>/        config.json and runc.log of one invocation (daemon)
--   <id>/                      the same in a private context: every directory
--                              made and removed is on `relay app invoke`'s path
-- The rootfs is shared read-only; the per-invocation dir holds just the
-- config with its own container id and cgroup leaf.
--
-- The container's first process is relay-init (runtime/init.lua): `runc run
-- --preserve-fds 1` hands it the control socket as fd 3. runc is not what
-- bounds the container's life: a runc that dies leaves its container
-- running, so the init ends it, at its deadline or when the daemon is gone.
--
-- Every container runs in its own user namespace with the app's host id
-- block (relay.runtime.ids), a seccomp allowlist, no capabilities and a
-- cgroup namespace. runc enters the user namespace before it mounts the
-- rootfs, so the rootfs and every directory above it must be traversable by
-- the app's host ids: the state directories are 0711 (search only), the
-- bundle directories, which hold the environment, 0700 with files 0600
-- (runc reads config.json before it enters the namespace).
--
-- Secrets (relay.runtime.access) are written per invocation into the
-- bundle's secrets/ directory (0500, files 0400, owned by the handler's
-- host uid; the bundle directory above it is root's 0700, so no one else on
-- the host reaches them), bound read-only at /run/secrets and removed with
-- the bundle; `as: env` ones go into config.json's env (0600). Template
-- mounts are plain (not recursive) binds, nosuid and nodev, read-only
-- unless `writable: true`.
local fs = require("relay.fs")
local ids = require("relay.runtime.ids")
local json = require("relay.runtime.json")
local runtime = require("relay.runtime")
local safefs = require("relay.core.safefs")
local secret_files = require("relay.runtime.secret_files")

local _M = {}
local D = {}

-- Its relay-init can wait for a start record: containers can be created
-- before their events (relay.runtime.warm_pool).
D.warm = true

local UID, GID = ids.CONTAINER_USER, ids.CONTAINER_USER
local SEARCH_ONLY, PRIVATE, STICKY_TMP = 457, 448, 1023 -- 0711, 0700, 01777
local OOM_SCORE_ADJ = 500
local CPU_PERIOD = 100000
local KILL_DELAY_S = 2
local ORPHAN_RUNC_WAIT_S = 10
local HOST_DIRS = { "/usr", "/etc" }
local HOST_TOP = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" }
local MOUNTPOINTS = { "usr", "etc", "proc", "dev", "sys", "app" }
local INIT_TARGET = runtime.INIT_TARGET
local CONTROL_FD = 3
local RO_BIND = { "rbind", "ro", "nosuid", "nodev" }
-- a template mount: not recursive, so no mount below the source comes along
local TEMPLATE_BIND = { ro = { "bind", "ro", "nosuid", "nodev" }, rw = { "bind", "rw", "nosuid", "nodev" } }
local SECRETS_TARGET = runtime.SECRETS_TARGET
-- what an invocation's bundle dir holds once runc is done
local BUNDLE_FILES = { "config.json", "runc.log" }

local MASKED = { "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware" }
local READONLY = { "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger" }


function _M.available()
    return fs.which("runc") ~= nil
end


function _M.new(rt)
    return setmetatable({
        rt = rt,
        runc = fs.which("runc"),
        root = rt.base_dir .. "/runc",
        bundles = rt.private and rt.base_dir or rt.base_dir .. "/bundles",
        host_rootfs = (rt.shared_dir or rt.base_dir) .. "/rootfs-host",
        host_binds = nil,
    }, { __index = D })
end


--- true, or nil and why the app cannot run. A passed check is remembered
-- by the context until its next forget (a reload): the daemon checks every
-- app at each reload and then once more before each start.
function D:check(app)
    local checked = self.rt.cache.checked
    if checked[app] == self then
        return true
    end
    local ok, why = self:check_host_and_app(app)
    if ok then
        checked[app] = self
    end
    return ok, why
end


function D:check_host_and_app(app)
    if not self.runc then
        return nil, "runc not found in PATH"
    end
    if fs.geteuid() ~= 0 then
        return nil, "the runc driver needs root (use bwrap)"
    end
    local ok, why = runtime.check_command_and_image(self.rt, app)
    if not ok then
        return nil, why
    end
    if not runtime.cgroup_mode() then
        return nil, "no cgroup hierarchy mounted at " .. runtime.CGROUP_ROOT
    end
    if not runtime.userns_available() then
        return nil, "user namespaces are disabled on this host (user.max_user_namespaces is 0): " ..
            "Relay never runs a handler without one"
    end
    local init = runtime.init_binary()
    if not init then
        return nil, "relay-init not found beside the relay binary or in libexec/relay/ (reinstall Relay)"
    end
    local blocked = self.rt:cached_unsearchable_dir(init:match("^(.*)/[^/]+$"))
    if blocked then
        return nil, blocked .. " is not searchable by others: runc binds relay-init from inside the " ..
            "container's user namespace (chmod o+x it)"
    end
    blocked = self.rt:cached_unsearchable_dir(self.rt.shared_dir)
    if blocked then
        return nil, blocked .. " is not searchable by others: runc resolves the rootfs inside the " ..
            "container's user namespace (chmod o+x it, or point RELAY_STATE_DIR elsewhere)"
    end
    local img = self.rt:image(app)
    blocked = img and self.rt:cached_unsearchable_dir(img.path)
    if blocked then
        return nil, "image " .. img.rel .. ": " .. blocked .. " is not searchable by others (chmod o+x it)"
    end
    return true
end


function D.note(_, _)
    return nil
end


--- The state directories above the rootfs: searchable by the containers'
-- host ids (the user namespace resolves the rootfs path), never listable.
function D:prepare_dirs()
    if self.dirs_ready then
        return true
    end
    local state = self.rt.base_dir:match("^(.*)/[^/]+$")
    if self.rt.private then
        state = state:match("^(.*)/[^/]+$")
    end
    if not fs.is_dir(state) then
        local ok, err = fs.mkdir_p(state, SEARCH_ONLY)
        if not ok then
            return nil, err
        end
    end
    for _, d in ipairs({ self.rt.shared_dir, self.rt.base_dir }) do
        local ok, err = safefs.private_dir(d, SEARCH_ONLY)
        if not ok then
            return nil, err
        end
    end
    local own_dirs = { self.root, self.bundles }
    if self.rt.private then
        -- runc makes its root (0700) itself, inside the base dir made above
        own_dirs = {}
        self.rt:made_dir(self.root)
    end
    for _, d in ipairs(own_dirs) do
        local ok, err = safefs.private_dir(d, PRIVATE)
        if not ok then
            return nil, err
        end
    end
    self.dirs_ready = true
    return true
end


--- The `image: host` rootfs: empty mountpoints plus the host's top-level
-- symlinks (/bin -> usr/bin on merged-/usr systems); real dirs are bound.
-- Created beneath the consumer's directory without following symlinks.
function D:prepare_host_rootfs()
    if self.host_binds then
        return self.host_rootfs
    end
    local base, name = self.host_rootfs:match("^(.*)/([^/]+)$")
    local ok, err = safefs.mkdir_beneath(base, name, 493) -- 0755
    if not ok then
        return nil, err
    end
    for _, d in ipairs(MOUNTPOINTS) do
        ok, err = safefs.mkdir_beneath(base, name .. "/" .. d, 493)
        if not ok then
            return nil, err
        end
    end
    -- runc chmods a tmpfs to its mountpoint's mode: 1777 here, or uid 65534 gets EACCES
    ok, err = safefs.mkdir_beneath(base, name .. "/tmp", STICKY_TMP)
    if ok then
        ok, err = safefs.touch_beneath(base, name .. INIT_TARGET, 420) -- 0644
    end
    if not ok then
        return nil, err
    end
    local binds = {}
    for _, d in ipairs(HOST_DIRS) do
        binds[#binds + 1] = d
    end
    for _, top in ipairs(HOST_TOP) do
        local target = fs.readlink("/" .. top)
        local path = self.host_rootfs .. "/" .. top
        if target then
            if fs.readlink(path) ~= target then
                fs.symlink(target, path)
            end
        elseif fs.is_dir("/" .. top) then
            safefs.mkdir_beneath(base, name .. "/" .. top, 493)
            binds[#binds + 1] = "/" .. top
        end
    end
    self.host_binds = binds
    return self.host_rootfs
end


--- An image directory: runc needs /tmp 1777, /app and the init mountpoint
-- to exist before the root goes read-only. The image is the app author's:
-- nothing in it is followed, so a planted symlink fails the preparation
-- instead of changing a host path.
local function prepare_image_rootfs(image)
    local root, rel = image.root, image.rel
    local ok, err = safefs.mkdir_beneath(root, rel .. "/tmp", STICKY_TMP)
    if ok then
        ok, err = safefs.mkdir_beneath(root, rel .. "/app", 493)
    end
    if ok then
        ok, err = safefs.touch_beneath(root, rel .. INIT_TARGET, 420)
    end
    if not ok then
        return nil, "image " .. rel .. ": " .. err
    end
    return image.path
end


local function mount(dest, typ, source, options)
    return { destination = dest, type = typ, source = source, options = json.array(options) }
end


local function mounts(self, app, init_bin, host, extra)
    local m = {
        mount("/proc", "proc", "proc", { "nosuid", "noexec", "nodev" }),
        mount("/dev", "tmpfs", "tmpfs", { "nosuid", "strictatime", "mode=755", "size=65536k" }),
        mount("/dev/shm", "tmpfs", "shm", { "nosuid", "noexec", "nodev", "mode=1777", "size=16m" }),
        mount("/tmp", "tmpfs", "tmpfs", { "nosuid", "nodev", "noexec", "mode=1777", "size=64m" }),
    }
    if host then
        for _, d in ipairs(self.host_binds) do
            m[#m + 1] = mount(d, "bind", d, RO_BIND)
        end
    end
    m[#m + 1] = mount("/app", "bind", runtime.app_dir(app), RO_BIND)
    if init_bin then
        m[#m + 1] = mount(INIT_TARGET, "bind", init_bin, { "bind", "ro", "nosuid", "nodev" })
    end
    if extra and extra.secrets_dir then
        m[#m + 1] = mount(SECRETS_TARGET, "bind", extra.secrets_dir, TEMPLATE_BIND.ro)
    end
    for _, b in ipairs(extra and extra.mounts or {}) do
        m[#m + 1] = mount(b.target, "bind", b.source, b.writable and TEMPLATE_BIND.rw or TEMPLATE_BIND.ro)
    end
    return m
end


local function resources(limits)
    local res = {
        memory = { limit = limits.memory, swap = limits.memory },
        pids = { limit = limits.pids },
        devices = { { allow = false, access = "rwm" } },
    }
    if limits.cpus then
        res.cpu = { quota = math.floor(limits.cpus * CPU_PERIOD), period = CPU_PERIOD }
    end
    return res
end


--- The locked-down OCI config of one invocation. extra (optional): {
-- secrets (read values), secrets_dir (their files' directory), mounts
-- (resolved template mounts) }.
function D:config(app, inv, id, rootfs, init_bin, extra)
    local limits = runtime.limits(app)
    local block = self.rt:id_block(app)
    local args = {}
    if init_bin then
        args = runtime.init_args(inv, CONTROL_FD)
    end
    for _, a in ipairs(app.runtime.command) do
        args[#args + 1] = a
    end
    local namespaces = { { type = "pid" }, { type = "ipc" }, { type = "uts" }, { type = "mount" },
        { type = "user" }, { type = "cgroup" } }
    if limits.network ~= "host" then
        namespaces[#namespaces + 1] = { type = "network" }
    end
    local caps = function() return json.array({}) end
    return {
        ociVersion = "1.0.2-dev",
        hostname = "relay",
        root = { path = rootfs, readonly = true },
        process = {
            terminal = false,
            user = { uid = UID, gid = GID, additionalGids = json.array({ GID }) },
            args = args,
            env = runtime.env_list(runtime.container_env(app, inv, extra and extra.secrets)),
            cwd = "/app",
            capabilities = { bounding = caps(), effective = caps(), inheritable = caps(),
                permitted = caps(), ambient = caps() },
            rlimits = { { type = "RLIMIT_CORE", hard = 0, soft = 0 },
                { type = "RLIMIT_NOFILE", hard = limits.nofile, soft = limits.nofile } },
            noNewPrivileges = true,
            oomScoreAdj = OOM_SCORE_ADJ,
        },
        mounts = mounts(self, app, init_bin, rootfs == self.host_rootfs, extra),
        linux = {
            namespaces = namespaces,
            uidMappings = { { containerID = 0, hostID = block.uid, size = block.size } },
            gidMappings = { { containerID = 0, hostID = block.gid, size = block.size } },
            seccomp = runtime.seccomp_profile(app),
            cgroupsPath = "/" .. self.rt.cgroup_parent .. "/" .. id,
            resources = resources(limits),
            maskedPaths = MASKED,
            readonlyPaths = READONLY,
            rootfsPropagation = "private",
        },
    }
end


--- The invocation's rootfs (the image's or the shared `image: host` one)
-- with the mountpoints the template needs: path | nil, err.
function D:prepare_rootfs(app, extra)
    local img, err = self.rt:image(app)
    if err then
        return nil, err
    end
    local rootfs, base, rel
    if img then
        rootfs, err = prepare_image_rootfs(img)
        base, rel = img.root, img.rel
    else
        rootfs, err = self:prepare_host_rootfs()
        base, rel = self.host_rootfs:match("^(.*)/([^/]+)$")
    end
    local ok = rootfs
    if rootfs then
        ok, err = runtime.make_mountpoints(base, rel, app, extra)
    end
    if not ok then
        return nil, err
    end
    return rootfs
end


--- Writes the secrets delivered as files into <bundle>/secrets (then the
-- source of /run/secrets), owned by the handler's host uid.
function D:write_secret_files(app, dir, extra)
    if #extra.secret_files == 0 then
        return true
    end
    local block = self.rt:id_block(app)
    extra.secrets_dir = dir .. "/secrets"
    return secret_files.write(extra.secrets_dir, extra.secret_files, block.handler_uid, block.handler_gid)
end


--- Makes an invocation's bundle directory: by app for the daemon (its
-- sweep looks there), in the base dir of a private context.
function D:bundle_dir(app, id)
    local parent = self.bundles
    if not self.rt.private then
        parent = parent .. "/" .. runtime.sanitize(app.name)
        local ok, err = safefs.private_dir(parent, PRIVATE)
        if not ok then
            return nil, err
        end
    end
    local dir = parent .. "/" .. id
    local ok, err = safefs.private_dir(dir, PRIVATE)
    if not ok then
        return nil, err
    end
    return dir
end


--- Writes the bundle; returns the spec proc.spawn needs, or nil, err (host).
-- inv: { handler, trigger, message_id, attempt, deadline_ms, kill_at_ms }
function D:prepare(app, inv)
    local init_bin = runtime.init_binary()
    if not init_bin then
        return nil, "relay-init not found"
    end
    local ok, err = self:prepare_dirs()
    if not ok then
        return nil, err
    end
    local extra
    extra, err = secret_files.plan(self.rt, app)
    if not extra then
        return nil, err
    end
    local rootfs
    rootfs, err = self:prepare_rootfs(app, extra)
    if not rootfs then
        return nil, err
    end
    local id = runtime.container_id(self.rt, app.name, inv.handler)
    local dir
    dir, err = self:bundle_dir(app, id)
    if not dir then
        return nil, err
    end
    ok, err = self:write_secret_files(app, dir, extra)
    if ok then
        ok, err = safefs.write_new(dir .. "/config.json",
            json.encode(self:config(app, inv, id, rootfs, init_bin, extra)), 384)
    end
    if not ok then
        fs.rm_rf(dir)
        return nil, err
    end
    local root = { self.runc, "--root", self.root }
    local function cmd(...)
        local t = { unpack(root) }
        for _, a in ipairs({ ... }) do
            t[#t + 1] = a
        end
        return t
    end
    local spec = {
        id = id,
        dir = dir,
        argv = cmd("--log", dir .. "/runc.log", "--log-format", "json", "run", "--preserve-fds", "1",
            "--bundle", dir, id),
        env = { PATH = os.getenv("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin" },
        -- no TERM hook: foreground runc forwards the group's SIGTERM to the
        -- container's init; a `runc kill TERM` as well would deliver it twice
        kill_argv = cmd("kill", id, "KILL"),
        kill_delay = KILL_DELAY_S,
        delete_argv = cmd("delete", "--force", id),
        control = true,
        command = app.runtime.command[1],
    }
    spec.observe = function(stream, line)
        if stream == "control" then
            spec.init_record = spec.init_record or runtime.parse_init_record(line)
        end
    end
    return spec
end


--- The cgroup.procs file of the cgroup this process is in (the unified
-- hierarchy on v2, the first mounted v1 hierarchy otherwise), or nil.
local function own_cgroup_procs()
    local v2 = runtime.cgroup_mode() == "v2"
    for line in (fs.read_file("/proc/self/cgroup") or ""):gmatch("[^\n]+") do
        local ctrl, path = line:match("^%d+:([^:]*):(.*)$")
        local dir
        if ctrl == "" and v2 then
            dir = runtime.CGROUP_ROOT .. path
        elseif ctrl and ctrl ~= "" and not v2 then
            dir = runtime.CGROUP_ROOT .. "/" .. ctrl:gsub("^name=", "") .. path
        end
        if dir and fs.exists(dir .. "/cgroup.procs") then
            return (dir:gsub("/+$", "")) .. "/cgroup.procs"
        end
    end
    return nil
end


--- Starts the kernel's cgroup-attach grace period early, off the critical
-- path. runc's first cgroup.procs write takes cgroup_threadgroup_rwsem for
-- writing; unless another writer did so within the last RCU grace period
-- that waits a full synchronize_rcu() (~8-20 ms here), which a one-shot
-- `relay app invoke` always paid. A thread that moves this process into the
-- cgroup it is already in (a no-op) pays that wait in parallel with the
-- bundle write and runc's own start. A thread, not a forked child: the fork
-- copied this process's page tables and made every page it wrote
-- afterwards a copy-on-write fault (~170 of them). true when started.
function D.prewarm(_)
    local procs = own_cgroup_procs()
    if not procs or fs.geteuid() ~= 0 then
        return nil
    end
    return require("relay.core.proc").cgroup_warm(procs)
end


local function json_unescape(s)
    return (s:gsub("\\u(%x%x%x%x)", function(h)
        local n = tonumber(h, 16)
        return n < 128 and string.char(n) or "?"
    end):gsub("\\(.)", { n = "\n", t = "\t", r = "\r", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }))
end


--- The last error runc itself logged (its --log file), or nil.
function _M.log_error(text)
    local msg
    for line in (text or ""):gmatch("[^\n]+") do
        if line:find('"level":"error"', 1, true) or line:find('"level":"fatal"', 1, true) then
            local m = line:match('"msg":"(.-)","') or line:match('"msg":"(.-)"}')
            if m then
                msg = json_unescape(m)
            end
        end
    end
    return msg
end


--- Classifies the outcome and cleans up the invocation's bundle.
function D:finish(spec, report)
    local out = { status = report.status, signal = report.signal }
    if report.start_error then
        out.host_failure = true
        out.detail = "runc: " .. report.start_error
    else
        local msg = _M.log_error(fs.read_file(spec.dir .. "/runc.log"))
        if msg and not report.timed_out then
            -- runc only ever executes relay-init: its errors are the host's
            -- (a handler's missing command is the init's record)
            out.host_failure, out.detail = true, msg
        else
            runtime.init_outcome(out, report.status, spec.init_record, spec.command)
        end
    end
    -- a runc that was itself killed leaves the container's state behind
    if report.timed_out or report.signal or fs.is_dir(self.root .. "/" .. spec.id) then
        runtime.exec(spec.delete_argv, 10)
    end
    secret_files.remove(spec.dir .. "/secrets")
    fs.remove_known(spec.dir, BUNDLE_FILES)
    return out
end


local function delete_all(runc, root)
    local n = 0
    if fs.is_dir(root) then
        local report, listed = runtime.exec({ runc, "--root", root, "list", "-q" }, 10)
        for _, id in ipairs(report and listed or {}) do
            if id ~= "" then
                runtime.exec({ runc, "--root", root, "delete", "--force", id }, 10)
                n = n + 1
            end
        end
    end
    return n
end


--- Private roots of `relay app invoke` runs of this consumer that were
-- killed (their pid is gone): their containers and dirs, and the cgroup
-- parent of their own that invokes had before the shared one (the shared
-- one's leaves: runtime.sweep_cgroup_leaves).
function D:sweep_dead_invokes()
    local n = 0
    for _, e in ipairs(fs.list(self.rt.base_dir) or {}) do
        local pid = tonumber(e.name:match("^invoke%-(%d+)$"))
        if pid and e.dir and not fs.alive(pid) then
            local base = self.rt.base_dir .. "/" .. e.name
            n = n + delete_all(self.runc, base .. "/runc")
            fs.rm_rf(base)
            local cg = self.rt.cgroup_parent .. "/" .. e.name
            for _, parent in ipairs(self.rt:cgroup_parents()) do
                runtime.rmdir_leaves(parent .. "/" .. e.name)
            end
            runtime.remove_cgroup_dirs(cg)
        end
    end
    return n
end


--- Whether a runc process still works on this root: the `runc run` of a
-- daemon killed while it created a container goes on (it is not the
-- daemon's child any more) and writes that container's state after any
-- listing made meanwhile. Swept from under it, the container's `runc init`
-- would wait forever for a start that never comes.
local function runc_busy_on(root)
    local needle = "\0--root\0" .. root .. "\0"
    for _, e in ipairs(fs.list("/proc") or {}) do
        local pid = tonumber(e.name)
        local cmdline = pid and fs.read_file("/proc/" .. pid .. "/cmdline")
        if cmdline and cmdline:find(needle, 1, true) then
            return true
        end
    end
    return false
end


--- Waits (bounded) until no orphaned runc works on the root any more: each
-- ends by itself once its container's relay-init sees its daemon gone.
local function wait_runc_idle(root)
    local loop = require("relay.core.loop")
    local deadline = loop.monotonic() + ORPHAN_RUNC_WAIT_S
    while runc_busy_on(root) and loop.monotonic() < deadline do
        loop.sleep(0.05)
    end
end


--- This consumer's orphans after a crash: containers in our runc root,
-- bundle dirs, empty cgroup leaves, dead `relay app invoke` roots. Never
-- another consumer's: each has its own root and cgroup parent.
function D:sweep()
    wait_runc_idle(self.root)
    local n = delete_all(self.runc, self.root) + self:sweep_dead_invokes()
    for _, appdir in ipairs(fs.list(self.bundles) or {}) do
        for _, e in ipairs(fs.list(self.bundles .. "/" .. appdir.name) or {}) do
            if e.name:sub(1, #self.rt.prefix + 1) == self.rt.prefix .. "-" then
                fs.rm_rf(self.bundles .. "/" .. appdir.name .. "/" .. e.name)
            end
        end
    end
    self.rt:sweep_cgroup_leaves()
    return n
end


return _M
