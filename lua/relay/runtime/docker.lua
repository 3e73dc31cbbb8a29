--- The docker driver: `docker run --rm -i` with the same limits as runc.
-- podman.lua reuses this module with its own binary and flags.
--
-- Exit status 125 is the engine's own error (a host failure, not an
-- attempt); 126/127 (command not executable / not found in the image) are
-- the handler's failure (docs/templates.md). The CLI proxies our
-- SIGTERM to the container; the KILL step is `<engine> kill`, then `rm -f`.
--
-- Hardening matches runc's: Relay's own seccomp profile (written once per
-- context as JSON, which both engines accept), NOFILE, a CPU quota, a
-- private cgroup namespace, and `--pull=never`: a missing image is the
-- host's failure at once, never a registry round trip on every start.
--
-- What bounds a container's life when the daemon dies: the container is the
-- engine's, not a child of the CLI Relay runs, so it keeps running. podman's
-- conmon enforces `--timeout` (relay-init's deadline, rounded up to a whole
-- second) on its own. docker has no such bound: a docker container of a
-- killed daemon runs until it ends by itself, and the next start of the
-- same consumer name removes it (its label). Both report a handler killed
-- by signal N as exit status 128+N, which Relay cannot tell from the
-- handler's own exit 128+N (docs/operations.md).
local fs = require("relay.fs")
local json = require("relay.runtime.json")
local runtime = require("relay.runtime")

local _M = {}
local D = {}

local UID, GID = 65534, 65534
local ENGINE_ERROR = 125
local KILL_DELAY_S = 3
local DOCKER_SOCKET = "/var/run/docker.sock"


--- Builds a driver module for an engine binary (docker or podman).
function _M.make(engine, tweaks)
    local mod = {}
    tweaks = tweaks or {}

    function mod.available()
        return fs.which(engine) ~= nil
    end

    function mod.new(rt)
        local d = setmetatable({
            rt = rt,
            engine = engine,
            bin = fs.which(engine),
            tweaks = tweaks,
            images = {},
        }, { __index = D })
        -- who owns a container: the daemon sweeps exactly its own label
        d.owner = rt.private and (rt.name .. ".invoke-" .. rt.pid) or rt.name
        return d
    end

    return mod
end


--- The engine's environment (podman also needs its containers.conf).
function D:engine_env()
    local env = { PATH = os.getenv("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin" }
    for _, k in ipairs({ "HOME", "XDG_RUNTIME_DIR", "DOCKER_HOST", "DOCKER_CONFIG", "CONTAINER_HOST" }) do
        env[k] = os.getenv(k)
    end
    if self.tweaks.engine_env then
        self.tweaks.engine_env(self, env)
    end
    return env
end


local function image_of(app)
    return (app.runtime or {}).image
end


--- Availability: the binary, a reachable engine, the image present locally.
-- Probes run the engine once (cached per context); must run in a task.
function D:check(app)
    if not self.bin then
        return nil, self.engine .. " not found in PATH"
    end
    local r = app.runtime or {}
    if type(r.command) ~= "table" or #r.command == 0 then
        return nil, "runtime.command is not set"
    end
    if require("relay.runtime.access").used(app) then
        -- not delivered yet: refused rather than run without them
        return nil, "runtime.secrets and runtime.mounts are not supported by the " .. self.engine ..
            " driver yet (use runc or bwrap)"
    end
    local image = image_of(app)
    if not image or image == "host" then
        return nil, "the " .. self.engine .. " driver needs an image reference (image: host is runc/bwrap only)"
    end
    if self.engine_ok == nil then
        local report = runtime.exec({ self.bin, "info" }, 20)
        self.engine_ok = report ~= nil and report.status == 0
    end
    if not self.engine_ok then
        return nil, "`" .. self.engine .. " info` failed: engine not reachable"
    end
    if self.images[image] == nil then
        local report = runtime.exec({ self.bin, "image", "inspect", image }, 20)
        self.images[image] = report ~= nil and report.status == 0
    end
    if not self.images[image] then
        return nil, "image not found: " .. image
    end
    return true
end


function D.note(_, _)
    return nil
end


--- `--security-opt seccomp=<file>`: Relay's profile, or unconfined when
-- the template gives a reason. nil, err when it cannot be written.
function D:seccomp_opt(app)
    if runtime.seccomp_unconfined(app) then
        return "seccomp=unconfined"
    end
    if not self.seccomp_path then
        local path = self.rt.base_dir .. "/seccomp.json"
        local ok, err = fs.mkdir_p(self.rt.base_dir, 457)
        if ok then
            fs.unlink(path)
            ok, err = require("relay.core.safefs").write_new(path, json.encode(runtime.seccomp_profile(app)), 420)
        end
        if not ok then
            return nil, err
        end
        self.seccomp_path = path
    end
    return "seccomp=" .. self.seccomp_path
end


--- The `run` command line of one invocation (no side effects).
function D:command(app, inv, id, seccomp)
    local limits = runtime.limits(app)
    local argv = { self.bin or self.engine }
    for _, a in ipairs(self.tweaks.global_args or {}) do
        argv[#argv + 1] = a
    end
    local function add(...)
        for _, a in ipairs({ ... }) do
            argv[#argv + 1] = a
        end
    end
    add("run", "--rm", "-i", "--name", id, "--label", "relay.owner=" .. self.owner,
        "--network", limits.network == "host" and "host" or "none",
        "--pull=never", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--security-opt", seccomp or "seccomp=unconfined", "--cgroupns", "private",
        "--memory", string.format("%db", limits.memory), "--memory-swap", string.format("%db", limits.memory),
        "--pids-limit", tostring(limits.pids), "--cpus", tostring(limits.cpus),
        "--ulimit", string.format("nofile=%d:%d", limits.nofile, limits.nofile), "--ulimit", "core=0:0",
        "--user", UID .. ":" .. GID,
        -- mode=1777: an image's own /tmp may be 0755, unwritable by uid 65534
        "--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=64m,mode=1777",
        "-v", runtime.app_dir(app) .. ":/app:ro", "-w", "/app")
    if (app.runtime or {}).init ~= false then
        add("--init")
    end
    if self.tweaks.run_args then
        self.tweaks.run_args(inv, add)
    end
    for _, kv in ipairs(runtime.env_list(runtime.container_env(app, inv))) do
        add("-e", kv)
    end
    add(image_of(app))
    for _, a in ipairs(app.runtime.command) do
        add(a)
    end
    return argv
end


function D:prepare(app, inv)
    local seccomp, err = self:seccomp_opt(app)
    if not seccomp then
        return nil, err
    end
    local id = runtime.container_id(self.rt, app.name, inv.handler)
    local base = { self.bin or self.engine }
    for _, a in ipairs(self.tweaks.global_args or {}) do
        base[#base + 1] = a
    end
    local function cmd(...)
        local t = { unpack(base) }
        for _, a in ipairs({ ... }) do
            t[#t + 1] = a
        end
        return t
    end
    local spec = {
        id = id,
        argv = self:command(app, inv, id, seccomp),
        env = self:engine_env(),
        kill_argv = cmd("kill", "--signal", "KILL", id),
        kill_delay = KILL_DELAY_S,
        rm_argv = cmd("rm", "-f", id),
    }
    -- the engine's own reason for a status 125 is its last "Error:" line
    spec.observe = function(stream, line)
        if stream == "stderr" and line:find("^Error") then
            spec.engine_error = line
        end
    end
    return spec
end


function D:finish(spec, report)
    local out = { status = report.status, signal = report.signal }
    if report.start_error then
        out.host_failure, out.detail = true, self.engine .. ": " .. report.start_error
    elseif report.status == ENGINE_ERROR and not report.timed_out then
        out.host_failure = true
        out.detail = self.engine .. " run failed (status 125)" ..
            (spec.engine_error and (": " .. spec.engine_error) or "")
    elseif report.status and report.status > 128 and report.status < 160 then
        out.status, out.signal = nil, report.status - 128
    end
    if report.timed_out or report.signal then
        runtime.exec(spec.rm_argv, 20)
    end
    return out
end


--- Whether the engine could hold containers at all. docker's containers
-- live in its daemon: with no DOCKER_HOST and no socket at the default
-- path there is none to ask, and `docker ps` would only fail after
-- starting its CLI (40-70 ms of every daemon start on a host that has the
-- CLI and no engine). podman keeps its state on disk: always asked.
function D:may_hold_containers()
    if self.engine ~= "docker" or os.getenv("DOCKER_HOST") then
        return true
    end
    return fs.exists(DOCKER_SOCKET)
end


--- This owner's leftover containers (by label, never by name prefix: a
-- `relay app invoke` of the same consumer has another owner label).
function D:sweep()
    if not self:may_hold_containers() then
        return 0
    end
    local args = { self.bin }
    for _, a in ipairs(self.tweaks.global_args or {}) do
        args[#args + 1] = a
    end
    local list = { unpack(args) }
    for _, a in ipairs({ "ps", "-a", "-q", "--filter", "label=relay.owner=" .. self.owner }) do
        list[#list + 1] = a
    end
    local report, ids = runtime.exec(list, 20)
    local n = 0
    for _, id in ipairs(report and report.status == 0 and ids or {}) do
        local rm = { unpack(args) }
        for _, a in ipairs({ "rm", "-f", id }) do
            rm[#rm + 1] = a
        end
        runtime.exec(rm, 20)
        n = n + 1
    end
    return n
end


local docker = _M.make("docker")
docker.make = _M.make
return docker
