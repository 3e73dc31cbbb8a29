--- The container runtime: driver selection, availability, and what every
-- driver shares (the container environment, limits, names, cgroup paths).
--
-- A runtime context `rt` belongs to one process: the daemon (runtime root
-- `$RELAY_STATE_DIR/<consumer>/`, sweeps its own orphans at start) or one
-- `relay app invoke` (a private root under it, removed at exit, never sweeps).
--
-- No container outlives its attempt: runc and bwrap start every handler
-- under relay-init (src/relay_init.c), which ends the container at the
-- attempt's deadline and at once when the daemon dies (its control socket
-- reaches end of file), whatever happens to the daemon. The deadline counts
-- from the claim, so the container is gone before the claim's lease ends
-- (lifecycle.lua: lease = timeout + kill grace + lease margin). docker and
-- podman containers are the engine's: podman's conmon enforces
-- `--timeout`, docker has no such bound (docs/operations.md).
-- Drivers (relay.runtime.runc|bwrap|docker|podman) each export
-- `new(rt) -> driver` with methods:
--   check(app)            -> true | nil, reason   (unavailable: missing binary or image)
--   note(app)             -> string | nil         (a limit it cannot enforce, for `relay app ls`)
--   prepare(app, inv)     -> spec | nil, err      (err: host failure)
--   finish(spec, report)  -> { host_failure=bool, detail=string|nil, status=N|nil, signal=N|nil }
--   sweep()               -> removed count        (this consumer's orphans only)
-- spec = { argv, env, term_argv, kill_argv, kill_delay, cgroup_procs, keep_group,
--          pass_fds (closed by the caller after the spawn), control (relay-init's
--          socket, see relay.core.proc), nofile, no_core, uid, gid, observe }.
-- inv = { handler, trigger, message_id, attempt, deadline_ms (wall clock, for
--         RELAY_DEADLINE), kill_at_ms (CLOCK_MONOTONIC: relay-init's deadline) },
--       or for a warm container (relay.runtime.warm_pool) { handler = "warm",
--         warm_idle_ms }: none of the per-invocation values, which come with
--         the start record (start_record) when it is taken.
-- A driver that can pre-create containers that way sets `warm = true`.
local duration = require("relay.duration")
local fcntl = require("posix.fcntl")
local fs = require("relay.fs")
local holders = require("relay.runtime.holders")
local rfc3339 = require("relay.rfc3339")
local safefs = require("relay.core.safefs")

local _M = {}

_M.DRIVERS = { "runc", "bwrap", "docker", "podman" }
local KNOWN = { auto = true, runc = true, bwrap = true, docker = true, podman = true }

_M.DEFAULT_MEMORY = 256 * 1024 * 1024
_M.DEFAULT_PIDS = 64
-- A handler that needs more descriptors says so (runtime.nofile); the
-- daemon's own limit (often 65536 or more) is no default for untrusted code.
_M.DEFAULT_NOFILE = 1024
-- One CPU unless the template says otherwise: a busy loop in one handler
-- must not take every core from the daemon and the other handlers.
_M.DEFAULT_CPUS = 1
_M.CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_M.CGROUP_ROOT = "/sys/fs/cgroup"
_M.SECCOMP_PROFILE = "allowlist"
-- Where relay-init is bound inside every runc container and bwrap sandbox.
_M.INIT_TARGET = "/.relay-init"
-- Where an invocation's secrets appear (runtime.secrets, as: file).
_M.SECRETS_TARGET = "/run/secrets"
-- The cgroup parent of every `relay app invoke` of a consumer, beside the
-- daemon's leaves (whose sweep never looks inside it): created once by the
-- first container, kept by the invokes, so runc makes only the leaf and
-- nothing removes a directory per invoke in each v1 hierarchy. The leaf's
-- name (the container id) carries the invoke's pid, for the sweep of killed
-- ones (runc.lua, sweep_dead_invokes).
_M.INVOKE_CGROUP = "invoke"
-- relay-init's exit status when it could not start the handler at all
-- (no status record then): the host's failure, not an attempt.
_M.INIT_FAILED = 125

-- Relay's own variables: runtime.env cannot override these.
local RESERVED = {
    RELAY_HANDLER = true, RELAY_APP = true, RELAY_TRIGGER = true,
    RELAY_MESSAGE_ID = true, RELAY_ATTEMPT = true, RELAY_DEADLINE = true,
}


--- Characters allowed in runc container ids (and fine for docker names).
function _M.sanitize(s)
    return (tostring(s):gsub("[^%w_+.-]", "_"))
end


local function size_of(v, default)
    if v == nil then
        return default
    end
    if type(v) == "number" then
        return v
    end
    return duration.parse_size(v) or default
end


--- Effective limits of an app, defaults applied.
function _M.limits(app)
    local r = app.runtime or {}
    return {
        memory = size_of(r.memory, _M.DEFAULT_MEMORY),
        pids = tonumber(r.pids) or _M.DEFAULT_PIDS,
        cpus = tonumber(r.cpus) or _M.DEFAULT_CPUS,
        nofile = tonumber(r.nofile) or _M.DEFAULT_NOFILE,
        network = r.network or "none",
    }
end


--- The app's directory as an absolute path (bind sources must be absolute).
function _M.app_dir(app)
    return fs.realpath(app.dir) or app.dir
end


local function find_image(rt, app, image)
    local roots = { _M.app_dir(app) }
    if rt.images_dir then
        roots[2] = fs.realpath(rt.images_dir) or rt.images_dir
    end
    local why
    for _, root in ipairs(roots) do
        local fd, err = safefs.open_path(root, image)
        if fd then
            safefs.close(fd)
            return { root = root, rel = image, path = root .. "/" .. image }
        end
        why = why or (not err:find("No such file", 1, true) and err or nil)
    end
    if why then
        return nil, "image " .. image .. ": " .. why
    end
    return nil, "image directory not found: " .. image .. " (looked in " .. table.concat(roots, " and ") .. ")"
end


--- Where an app's `image:` lives: { root, rel, path } with rel a relative
-- name (validated: no absolute path, no ..) inside the app's directory, or
-- else inside RELAY_IMAGES; nil for `image: host`. Nothing below root is a
-- symlink (checked without following one). Returns nil, err when the image
-- is missing or reached through a symlink. A found image is remembered by
-- the context until its next forget (a reload); a missing one is looked
-- for again each time.
function _M.image(rt, app)
    local image = (app.runtime or {}).image or "host"
    if image == "host" then
        return nil
    end
    local known = rt.cache and rt.cache.images[app]
    if known then
        return known
    end
    local found, err = find_image(rt, app, image)
    if found and rt.cache then
        rt.cache.images[app] = found
    end
    return found, err
end


--- Checks shared by the rootfs drivers: a command to run, unless `image:
-- host` an existing rootfs directory, and the secrets and mount sources the
-- template names (relay.runtime.access). true | nil, why.
function _M.check_command_and_image(rt, app)
    local r = app.runtime or {}
    if type(r.command) ~= "table" or #r.command == 0 then
        return nil, "runtime.command is not set"
    end
    local _, err = _M.image(rt, app)
    if err then
        return nil, err
    end
    return require("relay.runtime.access").check(rt, app)
end


--- Mountpoints of /run/secrets and the template's mount targets in a
-- rootfs (root/rel), made beneath it without following a symlink: the root
-- is read-only in the container and an image is the app author's.
-- extra: relay.runtime.secret_files.plan's result. true | nil, err.
function _M.make_mountpoints(root, rel, app, extra)
    local targets = {}
    if #extra.secret_files > 0 then
        targets[1] = _M.SECRETS_TARGET
    end
    for _, m in ipairs(extra.mounts) do
        targets[#targets + 1] = m.target
    end
    for _, target in ipairs(targets) do
        local ok, err = safefs.mkdir_beneath(root, rel .. target, 493) -- 0755
        if not ok then
            return nil, ((app.runtime or {}).image ~= "host" and ("image " .. rel .. ": ") or "") .. err
        end
    end
    return true
end


--- Closes descriptors a driver opened for one spawn (pass_fds).
function _M.close_fds(fds)
    for _, fd in ipairs(fds or {}) do
        safefs.close(fd)
    end
end


--- The first existing directory on the way to `path` (itself included)
-- that others cannot search (no o+x), or nil. runc resolves a container's
-- rootfs from inside its user namespace, as the app's unprivileged host
-- ids: such a directory makes every start fail with "permission denied".
function _M.unsearchable_dir(path)
    local dir = ""
    for part in path:gmatch("[^/]+") do
        dir = dir .. "/" .. part
        local st = safefs.lstat(dir)
        if not st then
            return nil
        end
        if st.type == "dir" and st.mode % 2 == 0 then
            return dir
        end
    end
    return nil
end


--- unsearchable_dir(path), where a searchable answer is remembered by the
-- context until its next forget (a reload): every start checks the same
-- few directories.
function _M.cached_unsearchable_dir(rt, path)
    if rt.cache.searchable[path] then
        return nil
    end
    local blocked = _M.unsearchable_dir(path)
    if not blocked then
        rt.cache.searchable[path] = true
    end
    return blocked
end


--- The app's host id block (relay.runtime.ids.for_app), remembered by the
-- context until its next forget (a reload): the subordinate-id range and
-- the apps directory's names are read once per reload, not per start.
function _M.id_block(rt, app)
    local cache = rt.cache
    local block = cache.id_blocks[app]
    if not block then
        local ids = require("relay.runtime.ids")
        cache.id_range = cache.id_range or ids.range()
        local parent = ids.apps_dir_of(app)
        local names = parent and cache.app_names[parent]
        if parent and not names then
            names = ids.app_names(parent)
            cache.app_names[parent] = names
        end
        block = ids.for_app(app, cache.id_range, names)
        cache.id_blocks[app] = block
    end
    return block
end


--- Drops what the context remembers about apps and host paths (image
-- resolutions, id blocks, searchable directories, checked apps): the
-- daemon calls it on every reload, so a change on disk is seen at the next
-- reload (SIGHUP, or any template change) at the latest. The warm
-- containers go too: they were made with the old images, mounts and secrets.
function _M.forget(rt)
    if rt.warm then
        rt.warm:clear()
    end
    local weak = { __mode = "k" }
    rt.cache = {
        images = setmetatable({}, weak),
        id_blocks = setmetatable({}, weak),
        checked = setmetatable({}, weak),
        app_names = {},
        searchable = {},
        id_range = nil,
    }
end


--- Whether this host lets a process create user namespaces.
function _M.userns_available()
    local max = tonumber(fs.read_file("/proc/sys/user/max_user_namespaces") or "")
    return max == nil or max > 0
end


-- The profiles are compiled into the binary: one table per process, whose
-- JSON (relay.runtime.json.constant) the C module writes in ~20 µs where
-- the Lua encoder takes ~0.5 ms in a fresh process. Never change the table.
local seccomp_profiles = {}

--- The OCI seccomp section of an app: Relay's allowlist unless the template
-- says `seccomp: {unconfined: <reason>}`.
function _M.seccomp_profile(app)
    if _M.seccomp_unconfined(app) then
        return nil
    end
    local name = _M.SECCOMP_PROFILE
    if not seccomp_profiles[name] then
        local seccomp = require("relay.core.seccomp")
        seccomp_profiles[name] = require("relay.runtime.json").constant(seccomp.profile(name),
            seccomp.profile_json(name))
    end
    return seccomp_profiles[name]
end


--- The reason an app runs without seccomp, or nil.
function _M.seccomp_unconfined(app)
    local s = (app.runtime or {}).seccomp
    return type(s) == "table" and s.unconfined or nil
end


--- relay-init: beside the running binary in a build directory, in
-- libexec/relay/ of the prefix once installed. Every runc container and
-- bwrap sandbox starts with it, whatever the template's `init` says: it is
-- what bounds the container's life. nil when missing (a broken install).
function _M.init_binary()
    if _M.init_path == nil then
        local exe = fs.readlink("/proc/self/exe") or ""
        local dir = exe:match("^(.*)/[^/]+$") or "."
        _M.init_path = false
        for _, p in ipairs({ dir .. "/relay-init", dir .. "/../libexec/relay/relay-init" }) do
            if fs.is_executable(p) then
                _M.init_path = fs.realpath(p) or p
                break
            end
        end
    end
    return _M.init_path or nil
end


--- relay-init's arguments before the command: its deadline and its
-- control descriptor (each only when known).
function _M.init_args(inv, control_fd)
    local args = { _M.INIT_TARGET }
    if inv.warm_idle_ms then
        args[#args + 1] = "-w"
        args[#args + 1] = string.format("%d", inv.warm_idle_ms)
    elseif inv.kill_at_ms then
        args[#args + 1] = "-d"
        args[#args + 1] = string.format("%d", inv.kill_at_ms)
    end
    if control_fd then
        args[#args + 1] = "-c"
        args[#args + 1] = tostring(control_fd)
    end
    args[#args + 1] = "--"
    return args
end


--- relay-init's status record (src/relay_init.c) as { kind, n, text }, or nil.
function _M.parse_init_record(line)
    local kind, rest = tostring(line or ""):match("^(%a+) ?(.*)$")
    if (kind == "exit" or kind == "signal") and rest:match("^%d+$") then
        return { kind = kind, n = tonumber(rest) }
    elseif kind == "exec" and rest:match("^%d+ ") then
        return { kind = kind, n = tonumber(rest:match("^%d+")), text = rest:match("^%d+ (.*)$") }
    elseif kind == "deadline" and rest == "" then
        return { kind = kind }
    end
    return nil
end


--- What a container that started with relay-init ended with, from the
-- runtime's exit status (the init's, passed through) and the init's record
-- (nil when it wrote none). runc and bwrap report a command killed by
-- signal N as 128+N, as they do a command that exited 128+N: the record
-- tells them apart. A record that does not match the status is ignored.
-- out = { status, signal } is updated; returns it.
function _M.init_outcome(out, status, rec, command)
    if rec and rec.kind == "exit" and rec.n == status then
        out.status, out.signal = status, nil
    elseif rec and rec.kind == "signal" and status == 128 + rec.n then
        out.status, out.signal = nil, rec.n
    elseif rec and rec.kind == "exec" and (status == 126 or status == 127) then
        out.status, out.detail = status, "exec " .. tostring(command) .. ": " .. tostring(rec.text)
    elseif rec and rec.kind == "deadline" then
        out.timed_out = true
    elseif not rec and status == _M.INIT_FAILED then
        out.host_failure, out.detail = true, "relay-init could not start the handler"
    elseif not rec and status and status > 128 and status < 160 then
        -- no record (the init itself was killed): the runtime's convention
        out.status, out.signal = nil, status - 128
    end
    return out
end


--- The container's environment as a {K=V} table (docs/templates.md).
-- inv: { handler, trigger, message_id, attempt, deadline_ms }; secrets:
-- the app's read secrets (relay.runtime.access), of which those `as: env`
-- become variables.
function _M.container_env(app, inv, secrets)
    local env = { PATH = _M.CONTAINER_PATH, PYTHONUNBUFFERED = "1" }
    for k, v in pairs((app.runtime or {}).env or {}) do
        if not RESERVED[k] then
            env[k] = tostring(v)
        end
    end
    env.RELAY_APP = app.name
    if not inv.warm_idle_ms then
        for k, v in pairs(_M.invocation_env(inv)) do
            env[k] = v
        end
    end
    for _, secret in ipairs(secrets or {}) do
        if secret.as == "env" and not RESERVED[secret.name] then
            env[secret.name] = secret.value
        end
    end
    return env
end


--- The variables that differ per invocation (a warm container gets them
-- in its start record).
function _M.invocation_env(inv)
    return {
        RELAY_HANDLER = inv.handler,
        RELAY_TRIGGER = inv.trigger,
        RELAY_MESSAGE_ID = inv.message_id,
        RELAY_ATTEMPT = tostring(inv.attempt),
        RELAY_DEADLINE = rfc3339.millis(inv.deadline_ms),
    }
end


--- relay-init's start record of a warm container (src/relay_init.c):
-- NUL-terminated fields, the deadline (kill_at_ms) then NAME=VALUE, ended
-- by an empty field. nil, err for a value no environment can hold.
function _M.start_record(inv)
    local parts = { "relay-start", string.format("%d", inv.kill_at_ms) }
    for _, kv in ipairs(_M.env_list(_M.invocation_env(inv))) do
        if kv:find("\0", 1, true) then
            return nil, "a NUL byte in " .. kv:match("^[^=]*")
        end
        parts[#parts + 1] = kv
    end
    parts[#parts + 1] = ""
    return table.concat(parts, "\0") .. "\0"
end


--- The same as a sorted list of "K=V" strings (OCI config, command lines).
function _M.env_list(env)
    local keys = {}
    for k in pairs(env) do
        keys[#keys + 1] = k
    end
    table.sort(keys)
    local out = {}
    for i, k in ipairs(keys) do
        out[i] = k .. "=" .. env[k]
    end
    return out
end


--- The reason string of a failed attempt: `exit status 3`, `timeout after 20s`,
-- `killed by signal 9`.
function _M.reason(o)
    if o.timed_out then
        return "timeout after " .. duration.format_duration(o.timeout_ms or 0)
    elseif o.signal then
        return "killed by signal " .. o.signal
    elseif o.status and o.status ~= 0 then
        return "exit status " .. o.status
    end
    return nil
end


--- Container names and cgroup leaves are unique per process and invocation.
function _M.container_id(rt, app_name, handler)
    rt.seq = rt.seq + 1
    return _M.sanitize(string.format("%s-%s-%s-%d-%d", rt.prefix, app_name, handler, rt.pid, rt.seq))
end


--- Which cgroup hierarchies exist: "v2", "v1" or nil.
function _M.cgroup_mode()
    if fs.exists(_M.CGROUP_ROOT .. "/cgroup.controllers") then
        return "v2"
    elseif fs.is_dir(_M.CGROUP_ROOT .. "/memory") then
        return "v1"
    end
    return nil
end


--- Resolves a driver name ("auto" included) for this host.
function _M.resolve(name)
    name = name or "auto"
    if not KNOWN[name] then
        return nil, string.format("unknown runtime %q (auto, runc, bwrap, docker, podman)", name)
    end
    if name ~= "auto" then
        return name
    end
    if fs.geteuid() == 0 and fs.which("runc") then
        return "runc"
    end
    return "bwrap"
end


--- The name of a daemon's runtime root, container-name prefix and cgroup
-- parent: consumer, stream and group, so that daemons of several streams
-- (or groups) on one host with one consumer name and one state directory
-- never share (or sweep) each other's. The hash keeps names unique where
-- sanitizing ("{orders}" → "_orders_") or a "." inside a part would not.
-- Without a stream (a context of no daemon's: specs, tools) it is the
-- consumer name alone.
function _M.root_name(consumer, stream, group)
    consumer = consumer or "relay"
    if not stream then
        return _M.sanitize(consumer)
    end
    group = group or "relay"
    local hash = require("relay.runtime.ids").hash(consumer .. "\0" .. stream .. "\0" .. group)
    return _M.sanitize(string.format("%s.%s.%s.%08x", consumer, stream, group, hash))
end


--- A runtime context. opts: { runtime = cfg.runtime, state_dir, consumer,
-- stream, group, private = true for `relay app invoke`, images, secrets_dir, allowed_mounts }.
function _M.new(opts)
    local consumer = _M.sanitize(opts.consumer or "relay")
    local name = _M.root_name(opts.consumer, opts.stream, opts.group)
    local pid = fs.getpid()
    local rt = {
        requested = opts.runtime or "auto",
        consumer = consumer,
        identity = { consumer = opts.consumer or "relay", stream = opts.stream, group = opts.group },
        name = name,
        prefix = "relay-" .. name,
        pid = pid,
        seq = 0,
        private = opts.private and true or false,
        images_dir = opts.images,
        secrets_dir = opts.secrets_dir,
        allowed_mounts = opts.allowed_mounts,
        drivers = {},
        made_dirs = {},
        made_set = {},
    }
    local base = (opts.state_dir or "/run/relay") .. "/" .. name
    local cg = "relay/" .. name
    -- The `image: host` rootfs (mountpoints and symlinks, never written at
    -- run time) is shared by the daemon and every invoke of the consumer:
    -- a fresh one makes the first container on it ~15 ms slower.
    rt.shared_dir = base
    if rt.private then
        base = base .. "/invoke-" .. pid
        cg = cg .. "/" .. _M.INVOKE_CGROUP
    end
    rt.base_dir = base
    rt.cgroup_parent = cg
    _M.forget(rt)
    return setmetatable(rt, { __index = _M })
end


--- The driver instance for an app (its runtime.driver, else the context's).
function _M.driver_for(rt, app)
    local name, err = _M.resolve((app.runtime or {}).driver or rt.requested)
    if not name then
        return nil, err
    end
    local d = rt.drivers[name]
    if not d then
        d = require("relay.runtime." .. name).new(rt)
        d.name = name
        rt.drivers[name] = d
    end
    return d
end


--- true, or nil and why the app cannot run on this host.
function _M.check(rt, app)
    local d, err = rt:driver_for(app)
    if not d then
        return nil, err
    end
    return d:check(app)
end


--- Runs a short helper command (`runc list`, `runc delete`) to completion
-- inside the current task. Returns the proc report and its stdout lines.
function _M.exec(argv, timeout_s)
    local proc = require("relay.core.proc")
    local lines = {}
    local h, err = proc.spawn({
        argv = argv,
        timeout = timeout_s or 10,
        grace = 1,
        on_line = function(stream, line)
            if stream == "stdout" then
                lines[#lines + 1] = line
            end
        end,
    })
    if not h then
        return nil, err
    end
    local report, werr = h:wait()
    if not report then
        return nil, werr
    end
    return report, lines
end


-- Ownership of a consumer's runtime root: every daemon holds a shared lock
-- on <root>/owner.lock for its whole life, and sweeping a root takes it
-- exclusive, so no root is swept while a process lives that uses it (a
-- root named by the consumer alone, from before roots carried the stream,
-- or a stale daemon the consumer guard has not stopped yet). The kernel
-- drops the lock when its process dies, however it dies.
-- <root>/identity names the root's consumer, stream and group (one a
-- line), for the sweep of dead consumers' roots.
local OWNER_LOCK = "owner.lock"
local IDENTITY = "identity"
local LOCK_RETRY_S = 0.05


local function set_lock(fd, kind)
    local l_type = ({ exclusive = fcntl.F_WRLCK, shared = fcntl.F_RDLCK })[kind] or fcntl.F_UNLCK
    return fcntl.fcntl(fd, fcntl.F_SETLK, { l_type = l_type, l_whence = 0, l_start = 0, l_len = 0 }) ~= nil
end


--- The lock file's descriptor (close-on-exec: no child keeps the lock), or nil.
local function open_owner_lock(dir)
    local path = dir .. "/" .. OWNER_LOCK
    local st = safefs.lstat(path)
    if (st and st.type ~= "file") or not fs.mkdir_p(dir, 457) then
        return nil
    end
    return fcntl.open(path, fcntl.O_RDWR + fcntl.O_CREAT + fcntl.O_CLOEXEC, 384)
end


local function close_fd(fd)
    require("posix.unistd").close(fd)
end


local function sweep_drivers(rt, names)
    local n = 0
    for _, name in ipairs(names) do
        local ok, mod = pcall(require, "relay.runtime." .. name)
        if ok and mod.available and mod.available() then
            local d = rt.drivers[name] or mod.new(rt)
            rt.drivers[name] = d
            n = n + (d:sweep() or 0)
        end
    end
    return n
end


--- Keeps a shared hold on the root for this process's life; waits while
-- another process sweeps it.
local function hold_root(rt, fd)
    local loop = require("relay.core.loop")
    while not set_lock(fd, "shared") do
        loop.sleep(LOCK_RETRY_S)
    end
    rt.owner_fd = fd
end


--- Records whose root this is (best effort: without it a dead consumer's
-- leftovers are left for its own next start).
local function write_identity(rt)
    local id = rt.identity
    if id.stream then
        fs.write_file(rt.shared_dir .. "/" .. IDENTITY,
            table.concat({ id.consumer, id.stream, id.group or "relay", "" }, "\n"))
    end
end


--- { consumer, stream, group } of a root: from its identity file, or for
-- a root named by the consumer alone (before roots carried the stream),
-- that name as the consumer of `default_stream`.
local function read_identity(dir, name, default_stream, default_group)
    local text = fs.read_file(dir .. "/" .. IDENTITY)
    local consumer, stream, group = (text or ""):match("^([^\n]+)\n([^\n]+)\n([^\n]+)\n$")
    if consumer then
        return { consumer = consumer, stream = stream, group = group }
    end
    return { consumer = name, stream = default_stream, group = default_group, legacy = true }
end


--- A dead consumer's emptied directories (under its exclusive lock).
local function tidy(rt)
    fs.rmdir(rt.shared_dir .. "/runc")
    fs.rm_rf(rt.shared_dir .. "/bundles")
    _M.remove_cgroup_dirs(rt.cgroup_parent)
end


--- Removes this consumer's orphans (daemon start only; never for invoke)
-- unless a live process owns the root. opts: drivers (default all), hold
-- (keep a shared hold afterwards: the daemon), tidy (remove the emptied
-- directories too: a dead consumer). Returns the count, true when the
-- root was owned by another process, and the daemons that had held it
-- (runtime.holders: dead, and the containers of these drivers gone).
function _M.sweep(rt, opts)
    assert(not rt.private, "a private runtime never sweeps")
    opts = opts or {}
    local fd = open_owner_lock(rt.shared_dir)
    if not fd then
        -- no lock file to be had (a read-only state dir): sweep as before,
        -- with no proof that anyone is dead
        return sweep_drivers(rt, opts.drivers or _M.DRIVERS), false, {}
    end
    local owned = not set_lock(fd, "exclusive")
    local ok, n, dead = true, 0, {}
    if not owned then
        ok, n = pcall(sweep_drivers, rt, opts.drivers or _M.DRIVERS)
        if ok then
            dead = holders.take(rt.shared_dir)
        end
        if ok and opts.tidy then
            tidy(rt)
        end
    end
    if opts.hold then
        hold_root(rt, fd)
        write_identity(rt)
    else
        close_fd(fd)
    end
    if not ok then
        error(n, 0)
    end
    return n, owned, dead
end


--- Records the daemon (stream, instance) that now holds the root: a later
-- sweep of the root tells other replicas it is dead.
function _M.record_holder(rt, stream, instance)
    return holders.record(rt.shared_dir, stream, instance)
end


--- Whether a consumer root holds anything a sweep would remove, or a
-- holder to be declared dead.
local function has_leftovers(rt)
    if holders.any(rt.shared_dir) then
        return true
    end
    for _, e in ipairs(fs.list(rt.shared_dir) or {}) do
        if e.dir and (e.name == "runc" or e.name == "bundles" or e.name:match("^invoke%-%d+$")) then
            return true
        end
    end
    for _, parent in ipairs(rt:cgroup_parents()) do
        if fs.is_dir(parent) then
            return true
        end
    end
    return false
end


--- The roots of other consumers in this state directory that the daemon of
-- `rt` may clean: something left in them, holder_dead(consumer, stream)
-- (the caller's look-up of that stream's consumer key: gone, or a dead pid
-- on this host) and no live owner (the lock, checked by the sweep itself).
-- Their containers (every driver's: docker and podman ones by their root's
-- label), bundles, dead invokes and empty cgroup leaves go, then the
-- emptied directories, so the next start skips them. Returns how many
-- containers were removed, and the daemons that had held the swept roots:
-- dead, and every container they ran gone.
function _M.sweep_dead_consumers(rt, holder_dead)
    local state = rt.shared_dir:match("^(.*)/[^/]+$")
    local n, dead = 0, {}
    for _, e in ipairs(fs.list(state) or {}) do
        if e.dir and not e.link and e.name ~= rt.name and e.name:match("^[%w_.+-]+$") then
            local id = read_identity(state .. "/" .. e.name, e.name, rt.identity.stream, rt.identity.group)
            local other = _M.new({ runtime = rt.requested, state_dir = state, consumer = id.consumer,
                stream = not id.legacy and id.stream or nil, group = id.group, images = rt.images_dir,
                secrets_dir = rt.secrets_dir, allowed_mounts = rt.allowed_mounts })
            -- A root of this daemon's own consumer name from before roots carried the stream:
            -- its holder is this process under a new root name; only the lock can tell.
            local own_legacy = id.legacy and id.consumer == rt.identity.consumer
            if other.name == e.name and has_leftovers(other)
                and (own_legacy or holder_dead(id.consumer, id.stream)) then
                local removed, _, holders_of = _M.sweep(other, { tidy = true })
                n = n + removed
                for _, h in ipairs(holders_of) do
                    dead[#dead + 1] = h
                end
            end
        end
    end
    return n, dead
end


--- Notes a directory a driver made inside a private context's base dir
-- (once each): close removes them, the last made first, without listing.
function _M.made_dir(rt, path)
    if not rt.made_set[path] then
        rt.made_set[path] = true
        rt.made_dirs[#rt.made_dirs + 1] = path
    end
end


--- Removes a private context's directories: what the drivers noted
-- (made_dir), then the base dir; a tree walk only when something else is
-- left in it. Its cgroup parent is the consumer's shared invoke parent,
-- which stays (INVOKE_CGROUP); runc removed the leaves.
function _M.close(rt)
    if not rt.private then
        return
    end
    for i = #rt.made_dirs, 1, -1 do
        fs.rmdir(rt.made_dirs[i])
    end
    fs.remove_known(rt.base_dir)
end


--- rmdir of `rel` (relative to each hierarchy), and first of its shared
-- invoke parent, where they exist and are empty. Straight rmdirs: one that
-- is not there fails harmlessly.
function _M.remove_cgroup_dirs(rel)
    local dirs = { rel .. "/" .. _M.INVOKE_CGROUP, rel }
    if _M.cgroup_mode() == "v2" then
        for _, d in ipairs(dirs) do
            fs.rmdir(_M.CGROUP_ROOT .. "/" .. d)
        end
        return
    end
    for _, name in ipairs(fs.names(_M.CGROUP_ROOT) or {}) do
        for _, d in ipairs(dirs) do
            fs.rmdir(_M.CGROUP_ROOT .. "/" .. name .. "/" .. d)
        end
    end
end


--- Every cgroup hierarchy path holding this context's leaves, for sweeps.
function _M.cgroup_parents(rt)
    local out = {}
    if _M.cgroup_mode() == "v2" then
        out[1] = _M.CGROUP_ROOT .. "/" .. rt.cgroup_parent
        return out
    end
    for _, e in ipairs(fs.list(_M.CGROUP_ROOT) or {}) do
        if e.dir then
            out[#out + 1] = _M.CGROUP_ROOT .. "/" .. e.name .. "/" .. rt.cgroup_parent
        end
    end
    return out
end


--- The pid of the `relay app invoke` whose container a leaf of the invoke
-- parent is: container_id ends in -<pid>-<seq>.
local function invoke_pid_of(leaf)
    return tonumber(leaf:match("%-(%d+)%-%d+$"))
end


--- rmdir of the cgroup leaves in dir whose name `pick` accepts (all when
-- nil): how many went. An rmdir of a cgroup that still has processes
-- fails, so live leaves stay.
function _M.rmdir_leaves(dir, pick)
    local n = 0
    for _, e in ipairs(fs.list(dir) or {}) do
        if e.dir and (not pick or pick(e.name)) and fs.rmdir(dir .. "/" .. e.name) then
            n = n + 1
        end
    end
    return n
end


--- Leaves a killed `relay app invoke` of this consumer left in the shared
-- invoke parent. Only a dead invoke's: a live one's leaf may be empty yet
-- (made by runc, its init not in it yet).
local function sweep_dead_invoke_leaves(parent)
    return _M.rmdir_leaves(parent .. "/" .. _M.INVOKE_CGROUP, function(name)
        local pid = invoke_pid_of(name)
        return pid ~= nil and not fs.alive(pid)
    end)
end


--- Empty cgroup leaves of this context left by a crash, and of its killed
-- invokes: rmdir (an rmdir of a cgroup that still has processes fails, so
-- live leaves stay).
function _M.sweep_cgroup_leaves(rt)
    local n = 0
    local own = rt.prefix .. "-"
    for _, parent in ipairs(_M.cgroup_parents(rt)) do
        n = n + _M.rmdir_leaves(parent, function(name) return name:sub(1, #own) == own end)
        n = n + sweep_dead_invoke_leaves(parent)
    end
    return n
end


return _M
