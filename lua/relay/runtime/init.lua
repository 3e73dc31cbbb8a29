--- The container runtime: driver selection, availability, and what every
-- driver shares (the container environment, limits, names, cgroup paths).
--
-- A runtime context `rt` belongs to one process: the daemon (runtime root
-- `$RELAY_STATE_DIR/<consumer>/`, sweeps its own orphans at start) or one
-- `relay app invoke` (a private root under it, removed at exit, never sweeps).
-- Drivers (relay.runtime.runc|bwrap|docker|podman) each export
-- `new(rt) -> driver` with methods:
--   check(app)            -> true | nil, reason   (unavailable: missing binary or image)
--   note(app)             -> string | nil         (a limit it cannot enforce, for `relay app ls`)
--   prepare(app, inv)     -> spec | nil, err      (err: host failure)
--   finish(spec, report)  -> { host_failure=bool, detail=string|nil, status=N|nil, signal=N|nil }
--   sweep()               -> removed count        (this consumer's orphans only)
-- spec = { argv, env, term_argv, kill_argv, kill_delay, cgroup_procs, keep_group,
--          pass_fds (closed by the caller after the spawn), nofile, no_core, uid, gid }.
local duration = require("relay.duration")
local fs = require("relay.fs")
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
_M.INIT_PATHS = { "/usr/bin/catatonit", "/usr/libexec/podman/catatonit", "/usr/local/bin/catatonit" }

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


--- Where an app's `image:` lives: { root, rel, path } with rel a relative
-- name (validated: no absolute path, no ..) inside the app's directory, or
-- else inside RELAY_IMAGES; nil for `image: host`. Nothing below root is a
-- symlink (checked without following one). Returns nil, err when the image
-- is missing or reached through a symlink.
function _M.image(rt, app)
    local image = (app.runtime or {}).image or "host"
    if image == "host" then
        return nil
    end
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


--- Checks shared by the rootfs drivers: a command to run and, unless
-- `image: host`, an existing rootfs directory. true | nil, why.
function _M.check_command_and_image(rt, app)
    local r = app.runtime or {}
    if type(r.command) ~= "table" or #r.command == 0 then
        return nil, "runtime.command is not set"
    end
    local _, err = _M.image(rt, app)
    if err then
        return nil, err
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


--- Whether this host lets a process create user namespaces.
function _M.userns_available()
    local max = tonumber(fs.read_file("/proc/sys/user/max_user_namespaces") or "")
    return max == nil or max > 0
end


--- The OCI seccomp section of an app: Relay's allowlist unless the template
-- says `seccomp: {unconfined: <reason>}`.
function _M.seccomp_profile(app)
    if _M.seccomp_unconfined(app) then
        return nil
    end
    return require("relay.core.seccomp").profile(_M.SECCOMP_PROFILE)
end


--- The reason an app runs without seccomp, or nil.
function _M.seccomp_unconfined(app)
    local s = (app.runtime or {}).seccomp
    return type(s) == "table" and s.unconfined or nil
end


--- The catatonit binary when the app wants an init and one is installed.
function _M.init_binary(app)
    local r = app.runtime or {}
    if r.init == false then
        return nil
    end
    for _, p in ipairs(_M.INIT_PATHS) do
        if fs.is_executable(p) then
            return p
        end
    end
    return nil
end


--- The container's environment as a {K=V} table (docs/templates.md).
-- inv: { handler, trigger, message_id, attempt, deadline_ms }
function _M.container_env(app, inv)
    local env = { PATH = _M.CONTAINER_PATH, PYTHONUNBUFFERED = "1" }
    for k, v in pairs((app.runtime or {}).env or {}) do
        if not RESERVED[k] then
            env[k] = tostring(v)
        end
    end
    env.RELAY_HANDLER = inv.handler
    env.RELAY_APP = app.name
    env.RELAY_TRIGGER = inv.trigger
    env.RELAY_MESSAGE_ID = inv.message_id
    env.RELAY_ATTEMPT = tostring(inv.attempt)
    env.RELAY_DEADLINE = rfc3339.millis(inv.deadline_ms)
    return env
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


--- A runtime context. opts: { runtime = cfg.runtime, state_dir, consumer,
-- private = true for `relay app invoke` }.
function _M.new(opts)
    local consumer = _M.sanitize(opts.consumer or "relay")
    local pid = fs.getpid()
    local rt = {
        requested = opts.runtime or "auto",
        consumer = consumer,
        prefix = "relay-" .. consumer,
        pid = pid,
        seq = 0,
        private = opts.private and true or false,
        images_dir = opts.images,
        drivers = {},
    }
    local base = (opts.state_dir or "/run/relay") .. "/" .. consumer
    local cg = "relay/" .. consumer
    -- The `image: host` rootfs (mountpoints and symlinks, never written at
    -- run time) is shared by the daemon and every invoke of the consumer:
    -- a fresh one makes the first container on it ~15 ms slower.
    rt.shared_dir = base
    if rt.private then
        base = base .. "/invoke-" .. pid
        cg = cg .. "/invoke-" .. pid
    end
    rt.base_dir = base
    rt.cgroup_parent = cg
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


--- Removes this consumer's orphans (daemon start only; never for invoke).
function _M.sweep(rt)
    assert(not rt.private, "a private runtime never sweeps")
    local n = 0
    for _, name in ipairs(_M.DRIVERS) do
        local ok, mod = pcall(require, "relay.runtime." .. name)
        if ok and mod.available and mod.available() then
            local d = rt.drivers[name] or mod.new(rt)
            rt.drivers[name] = d
            n = n + (d:sweep() or 0)
        end
    end
    return n
end


--- Removes a private context's directories and cgroup parents.
function _M.close(rt)
    if not rt.private then
        return
    end
    fs.rm_rf(rt.base_dir)
    _M.remove_cgroup_dirs(rt.cgroup_parent)
end


--- rmdir of `rel` (relative to each hierarchy) where it exists and is empty.
function _M.remove_cgroup_dirs(rel)
    local roots = fs.list(_M.CGROUP_ROOT) or {}
    if _M.cgroup_mode() == "v2" then
        roots = { { name = "", dir = true } }
    end
    for _, e in ipairs(roots) do
        if e.dir then
            local path = _M.CGROUP_ROOT .. (e.name ~= "" and ("/" .. e.name) or "") .. "/" .. rel
            if fs.is_dir(path) then
                fs.rmdir(path)
            end
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


--- Empty cgroup leaves of this context left by a crash: rmdir (an rmdir of
-- a cgroup that still has processes fails, so live leaves stay).
function _M.sweep_cgroup_leaves(rt)
    local n = 0
    for _, parent in ipairs(_M.cgroup_parents(rt)) do
        for _, e in ipairs(fs.list(parent) or {}) do
            if e.dir and e.name:sub(1, #rt.prefix + 1) == rt.prefix .. "-" then
                if fs.rmdir(parent .. "/" .. e.name) then
                    n = n + 1
                end
            end
        end
    end
    return n
end


return _M
