--- Apps: discovery of $RELAY_APPS/<name>/template.yaml, strict template validation,
-- reload merging and the one matcher built from every loaded app.
--
-- This is the one app-loading module (CLI commands, the worker and the runtime all use it).
--
--   apps.load_all(dir[, opts])  -> list of apps sorted by name, or nil, err (dir unreadable)
--   apps.load_app(dir, name)    -> app, or nil, err when there is no such app directory
--   apps.validate(text, path, name, app_dir[, opts]) -> app (pure: no I/O)
--   apps.merge(previous, fresh) -> merged list, changes   (the reload seam)
--   apps.build_matcher(list[, matcher_module]) -> matcher, labels | nil, err
--     (labels[id + 1] only: with rule blocks some are made when first read, so #labels,
--     ipairs and pairs do not see them all)
--   apps.find(list, name)       -> app or nil
--
-- An app is
--   { name, dir, path, state = "ok"|"invalid", error = "FILE:LINE:COL: message" (invalid; the
--     first, with " (and N more)" when the template has more: errors lists them all),
--     source = <template text>,
--     runtime = { driver (nil = RELAY_RUNTIME), image ("host"), command (nil or argv list),
--                 memory (bytes, 256Mi), pids (64), cpus (nil = no quota), network ("none"),
--                 env (map, PYTHONUNBUFFERED=1 unless set), init (nil = auto, or bool),
--                 secrets = { {name, from = "file"|"env", as = "file"|"env", at = "FILE:LINE:COL"} ... },
--                 mounts = { {source, target, writable, at} ... } },
--     (whether a secret exists and a mount source is allowed depends on the
--     daemon's environment: relay.runtime.access checks that at availability)
--     concurrency (nil = MAX_CONCURRENCY),
--     warm (nil = default pool size, 0 = cold starts only, N = at most N pre-created containers),
--     events = { {handler, pattern_json, timeout_ms, retries, line, col} ... },
--     rules (only with opts.bulk, for commands that just match: instead of events when
--            every entry is a plain handler and pattern, the list as one rule block
--            (yaml.load_app's bulk form: #rules, rules:handler(i), rules:pattern(i), rules:mark(i)), whose
--            load builds no Lua value per rule; apps.build_matcher takes either),
--     schedules = { {name, handler, cron, every_ms, timezone (IANA name or nil),
--                    zone (relay.tzif, with timezone), payload, payload_json, timeout_ms,
--                    retries, line, col} ... },
--     program_at = "FILE:LINE:COL" of runtime.command[1] (when given),
--     reload_error (set by merge when a newer template was invalid and this is the last
--                   good version) }
-- Failure shapes: a directory that is not a valid app (bad name, no template.yaml) is an
-- app with state "invalid"; plain files and hidden entries (".git") in the apps directory
-- are ignored.
local yaml = require("relay.yaml")
local pattern = require("relay.pattern")
local duration = require("relay.duration")
local cron = require("relay.cron")
local fs = require("relay.fs")
local safefs = require("relay.core.safefs")
local textutil = require("relay.text")
local tzif = require("relay.tzif")
local constants = require("relay.constants")

local _M = {}

-- App names become directory, container and Redis key names, so they are
-- kept to lower-case letters, digits, _ and -. The rule as shown to users;
-- as a Lua pattern, the same text anchored.
_M.APP_NAME_RULE = "[a-z0-9][a-z0-9_-]*"
local APP_NAME = "^" .. _M.APP_NAME_RULE .. "$"


--- True when `name` is a valid app name.
function _M.valid_name(name)
    return type(name) == "string" and name:find(APP_NAME) ~= nil
end


local HANDLER_NAME = "^[A-Za-z0-9_.-]+$"
local SCHEDULE_NAME = "^[a-z0-9_.-]+$"
local ENV_NAME = "^[A-Za-z_][A-Za-z0-9_]*$"

-- Template defaults and bounds (docs/templates.md); the retries default is a lifecycle
-- constant, owned by relay.constants.
_M.DEFAULT_TIMEOUT_MS = 60 * 1000
_M.MAX_TIMEOUT_MS = 15 * 60 * 1000
_M.DEFAULT_RETRIES = constants.default_retries
_M.MAX_RETRIES = 20
_M.DEFAULT_MEMORY = 256 * 1024 * 1024
-- Floors below which no start can succeed, so a template asking for less is
-- refused instead of failing every start as an uncharged host failure:
-- runc's own set-up is ~2 MiB of the container's memory when runc writes the
-- limit (1Mi and 2Mi fail there), and under bwrap the limit covers bwrap's two
-- processes, relay-init and the handler (3 fails).
_M.MIN_MEMORY = 4 * 1024 * 1024
_M.MIN_PIDS = 4
_M.MIN_CPUS = 0.01
_M.DEFAULT_PIDS = 64
_M.MAX_PIDS = 4194304
_M.MAX_CONCURRENCY = 65535
-- A warm pool holds idle containers (a runtime process each): a handful
-- covers any start rate a pool can refill for.
_M.MAX_WARM = 16
_M.MAX_NOFILE = 1048576
-- A secret file's name in RELAY_SECRETS_DIR and under /run/secrets: one
-- plain component (no path, no leading dot). As shown to users; as a Lua pattern.
_M.SECRET_FILE_RULE = "[A-Za-z0-9_][A-Za-z0-9_.-]*"
_M.SECRET_FILE_RULE_PATTERN = "^" .. _M.SECRET_FILE_RULE .. "$"
local IMAGE_NAME = "^[A-Za-z0-9_.-][A-Za-z0-9_./-]*$"
_M.DRIVERS = { "auto", "runc", "bwrap", "docker", "podman" }

local TOP_KEYS = { "runtime", "concurrency", "warm", "events", "schedules" }
local RUNTIME_KEYS = { "driver", "image", "command", "memory", "pids", "cpus", "network", "env", "init",
    "nofile", "seccomp", "secrets", "mounts" }
local SECRET_KEYS = { "name", "as" }
local MOUNT_KEYS = { "source", "target", "writable" }
local EVENT_KEYS = { "handler", "pattern", "timeout", "retries" }
local SCHEDULE_KEYS = { "name", "handler", "cron", "every", "timezone", "payload", "timeout", "retries" }

local TEMPLATE_ERROR = {} -- tag of the errors raised inside validation


local function fail(ctx, node, fmt, ...)
    error({ [TEMPLATE_ERROR] = yaml.where(ctx.file, node) .. ": " .. string.format(fmt, ...) }, 0)
end


--- fn(ctx, ...), or nil after noting its template error in ctx.errors, so
-- that one run reports every independent mistake of a file (each part of
-- the root and each entry; within one part the first error stops it).
local function collecting(ctx, fn, ...)
    local ok, res = pcall(fn, ctx, ...)
    if ok then
        return res
    end
    if type(res) == "table" and res[TEMPLATE_ERROR] then
        ctx.errors[#ctx.errors + 1] = res[TEMPLATE_ERROR]
        return nil
    end
    error(res, 0)
end


local function member(list, value)
    for _, v in ipairs(list) do
        if v == value then
            return true
        end
    end
    return false
end


local function closest(word, list)
    local best, best_d
    for _, cand in ipairs(list) do
        local d = textutil.edit_distance(word, cand)
        if not best_d or d < best_d then
            best, best_d = cand, d
        end
    end
    if best_d and best_d <= 2 and best_d < #word then
        return best
    end
end


--- Refuse unknown keys of a map, suggesting the closest allowed one.
local function check_keys(ctx, map, allowed, what)
    for _, key in ipairs(map.keys) do
        if not member(allowed, key.text) then
            local guess = closest(key.text, allowed)
            fail(ctx, key, "unknown key %s in %s%s (allowed: %s)", yaml.json_string(key.text), what,
                guess and ("; did you mean " .. guess .. "?") or "", table.concat(allowed, ", "))
        end
    end
end


local function field(map, name)
    for i, key in ipairs(map.keys) do
        if key.text == name then
            return map.values[i], key
        end
    end
end


local function expect_map(ctx, node, what, example)
    if node.kind ~= "map" then
        fail(ctx, node, "%s must be a map%s, not %s", what, example and (" (" .. example .. ")") or "",
            yaml.describe(node))
    end
    return node
end


local function expect_list(ctx, node, what)
    if node.kind ~= "seq" then
        fail(ctx, node, "%s must be a list, not %s", what, yaml.describe(node))
    end
    return node
end


local function expect_string(ctx, node, what, shape, shape_text)
    if node.kind ~= "scalar" or type(node.value) ~= "string" then
        fail(ctx, node, "%s must be a string, not %s", what, yaml.describe(node))
    end
    if node.value == "" then
        fail(ctx, node, "%s must not be empty", what)
    end
    if shape and not node.value:find(shape) then
        fail(ctx, node, "%s %s is invalid: it must match %s", what, yaml.json_string(node.value), shape_text)
    end
    return node.value
end


local function expect_int(ctx, node, what, min, max)
    local v = node.value
    if node.kind ~= "scalar" or type(v) ~= "number" or v % 1 ~= 0 then
        fail(ctx, node, "%s must be a whole number from %d to %d, not %s", what, min, max, yaml.describe(node))
    end
    if v < min or v > max then
        fail(ctx, node, "%s must be from %d to %d, not %s", what, min, max, node.text)
    end
    return v
end


local function expect_bool(ctx, node, what)
    if node.kind ~= "scalar" or type(node.value) ~= "boolean" then
        fail(ctx, node, "%s must be true or false, not %s", what, yaml.describe(node))
    end
    return node.value
end


local function expect_duration(ctx, node, what, min_ms, max_ms)
    if node.kind ~= "scalar" or type(node.value) ~= "string" then
        local hint = ""
        if node.kind == "scalar" and type(node.value) == "number" then
            hint = "; write " .. node.text .. "s for seconds"
        end
        fail(ctx, node, "%s must be a duration like 20s, 5m or 1h30m, not %s%s", what, yaml.describe(node), hint)
    end
    local ms, err = duration.parse_duration(node.value)
    if not ms then
        fail(ctx, node, "%s: %s", what, err)
    end
    if ms < min_ms or ms > max_ms then
        fail(ctx, node, "%s must be from %s to %s, not %s", what, duration.format_duration(min_ms),
            duration.format_duration(max_ms), node.value)
    end
    return ms
end


local function validate_command(ctx, node)
    if node.kind ~= "seq" then
        fail(ctx, node, "runtime.command must be a list of arguments, e.g. [python3, /app/main.py], not %s",
            yaml.describe(node))
    end
    if #node.items == 0 then
        fail(ctx, node, "runtime.command must not be empty; e.g. [python3, /app/main.py]")
    end
    local argv = {}
    for i, item in ipairs(node.items) do
        if item.kind ~= "scalar" or item.value == yaml.null then
            fail(ctx, item, "runtime.command[%d] must be a string, not %s", i, yaml.describe(item))
        end
        argv[i] = item.text -- the argument exactly as written (numbers too: [sleep, 5])
    end
    if argv[1] == "" then
        fail(ctx, node.items[1], "runtime.command[1] (the program) must not be empty")
    end
    return argv
end


local function validate_env(ctx, node)
    expect_map(ctx, node, "runtime.env", "e.g. {LOG_STYLE: plain}")
    local env = { PYTHONUNBUFFERED = "1" }
    for i, key in ipairs(node.keys) do
        local value = node.values[i]
        if not key.text:find(ENV_NAME) then
            fail(ctx, key, "runtime.env: %s is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
                yaml.json_string(key.text))
        end
        if key.text:find("^RELAY_") then
            fail(ctx, key, "runtime.env: %s is reserved (Relay sets RELAY_* variables itself)", key.text)
        end
        if value.kind ~= "scalar" or value.value == yaml.null then
            fail(ctx, value, "runtime.env.%s must be a string, not %s", key.text, yaml.describe(value))
        end
        env[key.text] = value.text
    end
    return env
end


--- An image is a directory inside the app (or RELAY_IMAGES), named
-- relatively: an absolute path or a `..` would let a template make Relay
-- (root) prepare any host directory as a rootfs.
local function validate_image(ctx, node, image)
    if image == "host" then
        return
    end
    local bad = not image:find(IMAGE_NAME) or image:find("//", 1, true)
    for part in image:gmatch("[^/]+") do
        bad = bad or part == ".."
    end
    if bad then
        fail(ctx, node, "runtime.image must be host or a directory inside the app (or in RELAY_IMAGES) " ..
            "named relatively, like rootfs or images/alpine; not %s (no absolute path, no ..)",
            yaml.json_string(image))
    end
end


--- `seccomp: default`, or `seccomp: {unconfined: "<why>"}`: turning the
-- filter off needs a reason, which `relay app ls` shows.
local function validate_seccomp(ctx, node)
    if node.kind == "scalar" and node.value == "default" then
        return "default"
    end
    if node.kind == "map" and #node.keys == 1 and node.keys[1].text == "unconfined" then
        local reason = node.values[1]
        if reason.kind == "scalar" and type(reason.value) == "string" and reason.value:find("%S") then
            return { unconfined = reason.value }
        end
        fail(ctx, reason, "runtime.seccomp.unconfined must be the reason the app needs it, e.g. " ..
            "\"uses io_uring\", not %s", yaml.describe(reason))
    end
    fail(ctx, node, "runtime.seccomp must be default or {unconfined: \"<reason>\"}, not %s", yaml.describe(node))
end


local function required(ctx, entry, name, what)
    local node = field(entry, name)
    if not node then
        fail(ctx, entry, "%s: missing %s", what, name)
    end
    return node
end


--- An absolute path written plainly: no ., .. or empty component, no
-- trailing slash. A `..` could climb out of an allowed directory; the
-- others would make the same place look like a different path.
local function plain_absolute(path)
    if path:sub(1, 1) ~= "/" or path == "/" or path:sub(-1) == "/" then
        return false
    end
    for part in (path:sub(2) .. "/"):gmatch("([^/]*)/") do
        if part == "" or part == "." or part == ".." then
            return false
        end
    end
    return true
end


--- Where a secret's value comes from: "env", NAME for env:NAME (Relay's
-- variable), else "file", the name of a file in RELAY_SECRETS_DIR.
local function secret_source(ctx, name_node, what)
    local name = expect_string(ctx, name_node, what .. ".name")
    local env_name = name:match("^env:(.*)$")
    if env_name then
        if not env_name:find(ENV_NAME) then
            fail(ctx, name_node, "%s: %s is not a variable name: write env:NAME with NAME matching " ..
                "[A-Za-z_][A-Za-z0-9_]*", what, yaml.json_string(name))
        end
        return "env", env_name
    elseif name:find(_M.SECRET_FILE_RULE_PATTERN) and #name <= 255 then
        return "file", name
    end
    fail(ctx, name_node, "%s: %s is neither env:NAME (a variable of Relay's environment) nor a file name " ..
        "in RELAY_SECRETS_DIR (%s)", what, yaml.json_string(name), _M.SECRET_FILE_RULE)
end


--- How the secret is delivered: "file" (the default) or "env", whose
-- name must then be a variable the handler may be given.
local function secret_delivery(ctx, as_node, name_node, name, what)
    local as = as_node and expect_string(ctx, as_node, what .. ".as") or "file"
    if as ~= "file" and as ~= "env" then
        fail(ctx, as_node, "%s.as must be file (the default: /run/secrets/<name>) or env, not %s", what,
            yaml.json_string(as))
    elseif as == "env" and not name:find(ENV_NAME) then
        fail(ctx, name_node, "%s: %s cannot be a variable name ([A-Za-z_][A-Za-z0-9_]*); use as: file",
            what, yaml.json_string(name))
    elseif as == "env" and name:find("^RELAY_") then
        fail(ctx, name_node, "%s: %s is reserved (Relay sets RELAY_* variables itself)", what, name)
    end
    return as
end


--- An entry of runtime.secrets: a name, or {name, as}.
local function validate_secret(ctx, node, what, rt)
    local name_node, as_node = node, nil
    if node.kind == "map" then
        check_keys(ctx, node, SECRET_KEYS, what)
        name_node = required(ctx, node, "name", what)
        as_node = field(node, "as")
    end
    local secret = { at = yaml.where(ctx.file, node) }
    secret.from, secret.name = secret_source(ctx, name_node, what)
    secret.as = secret_delivery(ctx, as_node, name_node, secret.name, what)
    for _, other in ipairs(rt.secrets) do
        if other.as == secret.as and other.name == secret.name then
            fail(ctx, name_node, "%s: %s is delivered twice (first at %s)", what,
                secret.as == "env" and ("variable " .. secret.name) or ("/run/secrets/" .. secret.name), other.at)
        end
    end
    return secret
end


local function validate_secrets(ctx, node, rt)
    expect_list(ctx, node, "runtime.secrets")
    rt.secrets = {}
    for i, item in ipairs(node.items) do
        rt.secrets[#rt.secrets + 1] = collecting(ctx, validate_secret, item, string.format("runtime.secrets[%d]",
            i), rt)
    end
end


-- Where Relay mounts its own things (or the host's system directories, for
-- `image: host`): a template mount at, inside or above one of them would
-- hide or replace what every container relies on.
_M.RESERVED_TARGETS = { "/app", "/proc", "/dev", "/sys", "/run/secrets", "/.relay-init", "/tmp", "/usr", "/etc",
    "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32" }


--- Whether one of two absolute paths is the other or inside it.
local function nested(a, b)
    return a == b or a:sub(1, #b + 1) == b .. "/" or b:sub(1, #a + 1) == a .. "/"
end


local function validate_target(ctx, node, what, rt)
    local target = expect_string(ctx, node, what .. ".target")
    if not plain_absolute(target) then
        fail(ctx, node, "%s.target must be an absolute path like /results (no ., .. or //), not %s", what,
            yaml.json_string(target))
    end
    for _, reserved in ipairs(_M.RESERVED_TARGETS) do
        if nested(target, reserved) then
            fail(ctx, node, "%s.target %s would shadow %s (reserved: %s); choose a path such as /results", what,
                target, reserved, table.concat(_M.RESERVED_TARGETS, ", "))
        end
    end
    for _, other in ipairs(rt.mounts) do
        if nested(target, other.target) then
            fail(ctx, node, "%s.target %s overlaps the mount at %s (%s)", what, target, other.target, other.at)
        end
    end
    return target
end


local function validate_mount(ctx, node, what, rt)
    expect_map(ctx, node, what, "e.g. {source: /srv/relay/results, target: /results, writable: true}")
    check_keys(ctx, node, MOUNT_KEYS, what)
    local source_node = required(ctx, node, "source", what)
    local source = expect_string(ctx, source_node, what .. ".source")
    if not plain_absolute(source) then
        fail(ctx, source_node, "%s.source must be an absolute host path under RELAY_ALLOWED_MOUNTS " ..
            "(no ., .. or //), not %s", what, yaml.json_string(source))
    end
    local target = validate_target(ctx, required(ctx, node, "target", what), what, rt)
    local writable = field(node, "writable")
    return { source = source, target = target, writable = writable and expect_bool(ctx, writable,
        what .. ".writable") or false, at = yaml.where(ctx.file, source_node) }
end


local function validate_mounts(ctx, node, rt)
    expect_list(ctx, node, "runtime.mounts")
    rt.mounts = {}
    for i, item in ipairs(node.items) do
        rt.mounts[#rt.mounts + 1] = collecting(ctx, validate_mount, item, string.format("runtime.mounts[%d]", i), rt)
    end
end


--- A secret delivered as a variable must not silently replace one that
-- runtime.env sets (checked once the whole runtime map is read).
local function check_secret_env(_, rt)
    for _, secret in ipairs(rt.secrets) do
        if secret.as == "env" and rt.env[secret.name] and secret.name ~= "PYTHONUNBUFFERED" then
            error({ [TEMPLATE_ERROR] = string.format("%s: runtime.secrets: %s is also set by runtime.env; " ..
                "remove one of them", secret.at, secret.name) }, 0)
        end
    end
end


local RUNTIME_CHECKS = {
    driver = function(ctx, node, rt)
        local v = expect_string(ctx, node, "runtime.driver")
        if not member(_M.DRIVERS, v) then
            fail(ctx, node, "runtime.driver must be one of %s, not %s", table.concat(_M.DRIVERS, ", "),
                yaml.json_string(v))
        end
        rt.driver = v
    end,
    image = function(ctx, node, rt)
        rt.image = expect_string(ctx, node, "runtime.image")
        validate_image(ctx, node, rt.image)
    end,
    nofile = function(ctx, node, rt)
        rt.nofile = expect_int(ctx, node, "runtime.nofile", 16, _M.MAX_NOFILE)
    end,
    seccomp = function(ctx, node, rt)
        rt.seccomp = validate_seccomp(ctx, node)
    end,
    command = function(ctx, node, rt)
        rt.command = validate_command(ctx, node)
        ctx.program_node = node.items[1]
    end,
    memory = function(ctx, node, rt)
        if node.kind ~= "scalar" then
            fail(ctx, node, "runtime.memory must be a size like 256Mi, not %s", yaml.describe(node))
        end
        local bytes, err = duration.parse_size(node.value)
        if not bytes then
            fail(ctx, node, "runtime.memory: %s", err)
        end
        if bytes < _M.MIN_MEMORY then
            fail(ctx, node, "runtime.memory must be at least 4Mi (the container runtime's own set-up "
                .. "already takes about 2 MiB of it), not %s", node.text)
        end
        rt.memory = bytes
    end,
    pids = function(ctx, node, rt)
        rt.pids = expect_int(ctx, node, "runtime.pids", _M.MIN_PIDS, _M.MAX_PIDS)
    end,
    cpus = function(ctx, node, rt)
        local v = node.value
        if node.kind ~= "scalar" or type(v) ~= "number" or v ~= v or v <= 0 or v > 4096 then
            fail(ctx, node, "runtime.cpus must be a number of CPUs greater than 0 (e.g. 1 or 0.5), not %s",
                yaml.describe(node))
        end
        -- Below this the CFS quota would be under the kernel's 1 ms floor: every start would fail.
        if v < _M.MIN_CPUS then
            fail(ctx, node, "runtime.cpus must be at least %g (the kernel's smallest quota is 1 ms per 100 ms "
                .. "period), not %s", _M.MIN_CPUS, node.text)
        end
        rt.cpus = v
    end,
    network = function(ctx, node, rt)
        local v = expect_string(ctx, node, "runtime.network")
        if v ~= "none" and v ~= "host" then
            fail(ctx, node, "runtime.network must be none or host, not %s", yaml.json_string(v))
        end
        rt.network = v
    end,
    env = function(ctx, node, rt)
        rt.env = validate_env(ctx, node)
    end,
    init = function(ctx, node, rt)
        rt.init = expect_bool(ctx, node, "runtime.init")
    end,
    secrets = function(ctx, node, rt)
        validate_secrets(ctx, node, rt)
    end,
    mounts = function(ctx, node, rt)
        validate_mounts(ctx, node, rt)
    end,
}


local function validate_runtime(ctx, node)
    local rt = {
        image = "host", memory = _M.DEFAULT_MEMORY, pids = _M.DEFAULT_PIDS, network = "none",
        env = { PYTHONUNBUFFERED = "1" }, secrets = {}, mounts = {},
    }
    if node == nil then
        return rt
    end
    expect_map(ctx, node, "runtime", "e.g. {command: [python3, /app/main.py]}")
    for i, key in ipairs(node.keys) do
        local check = RUNTIME_CHECKS[key.text]
        if check then
            collecting(ctx, check, node.values[i], rt)
        else
            collecting(ctx, check_keys, { keys = { key } }, RUNTIME_KEYS, "runtime")
        end
    end
    collecting(ctx, check_secret_env, rt)
    return rt
end


--- out.timeout_ms and out.retries from their nodes (nil: the defaults).
local function set_limits(ctx, timeout, retries, what, out)
    out.timeout_ms = timeout and expect_duration(ctx, timeout, what .. ".timeout", 1, _M.MAX_TIMEOUT_MS)
        or _M.DEFAULT_TIMEOUT_MS
    out.retries = retries and expect_int(ctx, retries, what .. ".retries", 0, _M.MAX_RETRIES)
        or _M.DEFAULT_RETRIES
end


--- timeout and retries, shared by events and schedules entries.
local function validate_limits(ctx, entry, what, out)
    set_limits(ctx, field(entry, "timeout"), field(entry, "retries"), what, out)
end


--- Where the handler name of an entry in `seen` was written: a precompiled entry
-- (yaml.load_app) or a handler node.
local function handler_mark(seen_value)
    if seen_value.kind == "event" then
        return seen_value.handler_line, seen_value.handler_col
    end
    return seen_value.line, seen_value.col
end


local function duplicate_handler(ctx, node, handler, first)
    local line, col = handler_mark(first)
    fail(ctx, node, "duplicate event handler %s (first at %d:%d); handler names are unique "
        .. "within an app", yaml.json_string(handler), line, col)
end


--- An entry precompiled by yaml.load_app: only the checks that need the whole app are left.
local function validate_compiled_event(ctx, entry, index, seen)
    local handler = entry.handler
    if seen[handler] then
        duplicate_handler(ctx, { line = entry.handler_line, col = entry.handler_col }, handler, seen[handler])
    end
    seen[handler] = entry
    local ev = { handler = handler, pattern_json = entry.pattern_json, line = entry.line, col = entry.col,
        timeout_ms = _M.DEFAULT_TIMEOUT_MS, retries = _M.DEFAULT_RETRIES }
    if entry.timeout or entry.retries then -- rare: the name for messages is only made then
        set_limits(ctx, entry.timeout, entry.retries, string.format("events[%d]", index), ev)
    end
    return ev
end


local function validate_event(ctx, entry, index, seen)
    if entry.kind == "event" then
        return validate_compiled_event(ctx, entry, index, seen)
    end
    local what = string.format("events[%d]", index)
    expect_map(ctx, entry, what, "with handler and pattern")
    check_keys(ctx, entry, EVENT_KEYS, what)
    local handler_node = required(ctx, entry, "handler", what)
    local handler = expect_string(ctx, handler_node, what .. ".handler", HANDLER_NAME, "[A-Za-z0-9_.-]+")
    if seen[handler] then
        duplicate_handler(ctx, handler_node, handler, seen[handler])
    end
    seen[handler] = handler_node
    local json, err = pattern.compile(required(ctx, entry, "pattern", what), ctx.file)
    if not json then
        error({ [TEMPLATE_ERROR] = err }, 0)
    end
    local ev = { handler = handler, pattern_json = json, line = entry.line, col = entry.col }
    validate_limits(ctx, entry, what, ev)
    return ev
end


--- Parses and checks a cron expression (relay.cron); one that can never
-- fire (like Feb 30) is an error too.
function _M.cron_check(expr)
    local parsed, err = cron.parse(expr)
    if not parsed then
        return nil, err
    end
    if not cron.next(parsed, 0) then
        return nil, string.format("%s never fires", yaml.json_string(expr))
    end
    return parsed
end


local function validate_trigger(ctx, entry, what, sched)
    local cron_node, cron_key = field(entry, "cron")
    local every, every_key = field(entry, "every")
    if cron_node and every then
        local later = cron_key.line > every_key.line and cron_key or every_key
        fail(ctx, later, "%s: give exactly one of cron or every, not both", what)
    elseif not cron_node and not every then
        fail(ctx, entry, "%s: missing cron or every (exactly one is required)", what)
    end
    if cron_node then
        local expr = expect_string(ctx, cron_node, what .. ".cron")
        local parsed, err = _M.cron_check(expr)
        if not parsed then
            fail(ctx, cron_node, "%s.cron: %s", what, err)
        end
        sched.cron = expr
        sched.cron_spec = parsed ~= true and parsed or nil
    else
        local ms = expect_duration(ctx, every, what .. ".every", 0, math.huge)
        if ms < 1000 then
            fail(ctx, every, "%s.every must be at least 1s, not %s", what, every.value)
        elseif ms % 1000 ~= 0 then
            fail(ctx, every, "%s.every must be whole seconds, not %s", what, every.value)
        end
        sched.every_ms = ms
    end
end


--- `timezone:` (cron only: an interval is aligned to the epoch, not to a
-- wall clock). The zone is loaded once, here.
local function validate_timezone(ctx, entry, what, sched)
    local node, key = field(entry, "timezone")
    if not node then
        return
    end
    local name = expect_string(ctx, node, what .. ".timezone")
    if not sched.cron then
        fail(ctx, key, "%s.timezone applies to cron schedules only (every is counted from the Unix epoch)", what)
    end
    local zone, err = tzif.load(name)
    if not zone then
        local guess = tzif.similar(name)
        fail(ctx, node, "%s.timezone: %s; %s", what, err, guess and ("did you mean " .. guess .. "?")
            or "use an IANA name such as Europe/Berlin or America/New_York")
    end
    sched.timezone, sched.zone = name, zone
end


local function validate_schedule(ctx, entry, index, seen)
    local what = string.format("schedules[%d]", index)
    expect_map(ctx, entry, what, "with name, handler and cron or every")
    check_keys(ctx, entry, SCHEDULE_KEYS, what)
    local name_node = required(ctx, entry, "name", what)
    local name = expect_string(ctx, name_node, what .. ".name", SCHEDULE_NAME, "[a-z0-9_.-]+")
    if seen[name] then
        fail(ctx, name_node, "duplicate schedule name %s (first at %d:%d)", yaml.json_string(name),
            seen[name].line, seen[name].col)
    end
    seen[name] = name_node
    local handler = expect_string(ctx, required(ctx, entry, "handler", what), what .. ".handler",
        HANDLER_NAME, "[A-Za-z0-9_.-]+")
    local sched = { name = name, handler = handler, line = entry.line, col = entry.col,
        payload = yaml.null, payload_json = "null" }
    validate_trigger(ctx, entry, what, sched)
    validate_timezone(ctx, entry, what, sched)
    local payload = field(entry, "payload")
    if payload then
        local json, err, bad = yaml.to_json(payload)
        if not json then
            fail(ctx, bad, "%s.payload: %s", what, err)
        end
        sched.payload, sched.payload_json = yaml.to_plain(payload), json
    end
    validate_limits(ctx, entry, what, sched)
    return sched
end


local function validate_entries(ctx, root, key, validate_one)
    local node = field(root, key)
    local out, seen = {}, {}
    if node == nil or not collecting(ctx, expect_list, node, key) then
        return out
    end
    for i, entry in ipairs(node.items) do
        out[#out + 1] = collecting(ctx, validate_one, entry, i, seen)
    end
    return out
end


local function expect_root_map(ctx, root)
    if root.kind ~= "map" then
        if yaml.is_null(root) then
            fail(ctx, root, "the template is empty; expected a map with %s", table.concat(TOP_KEYS, ", "))
        end
        fail(ctx, root, "a template must be a map with %s, not %s", table.concat(TOP_KEYS, ", "),
            yaml.describe(root))
    end
    return root
end


local function validate_concurrency(ctx, node)
    return expect_int(ctx, node, "concurrency", 1, _M.MAX_CONCURRENCY)
end


local function validate_warm(ctx, node)
    return expect_int(ctx, node, "warm", 0, _M.MAX_WARM)
end


local function validate_root(ctx, root, app)
    if not collecting(ctx, expect_root_map, root) then
        return
    end
    collecting(ctx, check_keys, root, TOP_KEYS, "template")
    app.runtime = collecting(ctx, validate_runtime, (field(root, "runtime")))
    local conc = field(root, "concurrency")
    app.concurrency = conc and collecting(ctx, validate_concurrency, conc) or nil
    local warm = field(root, "warm")
    app.warm = warm and collecting(ctx, validate_warm, warm) or nil
    local events = field(root, "events")
    if events and events.kind == "rules" then
        app.rules = events.rules -- every entry already checked (src/lua_yaml.c)
    else
        app.events = validate_entries(ctx, root, "events", validate_event)
    end
    app.schedules = validate_entries(ctx, root, "schedules", validate_schedule)
end


local function join(dir, name)
    if dir:sub(-1) == "/" then
        return dir .. name
    end
    return dir .. "/" .. name
end


local function invalid(app, err)
    app.state, app.error = "invalid", err
    app.runtime, app.concurrency, app.warm, app.events, app.schedules = nil, nil, nil, {}, {}
    app.rules = nil
    return app
end


--- Validate template text (pure). `path` is used in errors as given; opts.bulk: see
-- app.rules above.
function _M.validate(text, path, name, app_dir, opts)
    local app = { name = name, dir = app_dir, path = path, source = text }
    local root, err = yaml.load_app(text, path, opts and opts.bulk)
    if not root then
        return invalid(app, err)
    end
    local ctx = { file = path, errors = {} }
    validate_root(ctx, root, app)
    if #ctx.errors > 0 then
        local more = #ctx.errors - 1
        invalid(app, ctx.errors[1] .. (more > 0 and string.format(" (and %d more)", more) or ""))
        app.errors = ctx.errors
        return app
    end
    app.state = "ok"
    app.program_at = ctx.program_node and yaml.where(path, ctx.program_node)
    return app
end


-- Names in a directory, or nil, reason.
local function list_dir(dir)
    local entries, _, reason = fs.list(dir)
    if not entries then
        return nil, reason
    end
    local names = {}
    for i, entry in ipairs(entries) do
        names[i] = entry.name
    end
    return names
end


local is_dir = fs.is_dir


local function read_file(path)
    local f, err = io.open(path, "rb")
    if not f then
        return nil, err
    end
    local text, rerr = f:read("*a")
    f:close()
    return text, rerr
end


--- Why a template must not be read, or nil. Relay (often root) reads it
-- and quotes bad lines in errors, so a template.yaml that is a symlink out
-- of the apps directory (to /etc/shadow, say) or, under a root daemon, a
-- file root does not own would leak a file's content. The reason quotes
-- nothing from the file.
local function untrusted_template(apps_dir, path)
    local st = safefs.lstat(path)
    if not st then
        return nil -- missing: reported by the read
    end
    if st.type == "link" then
        local real, base = fs.realpath(path), fs.realpath(apps_dir)
        if not real or not base or real:sub(1, #base + 1) ~= base .. "/" then
            return "template.yaml is a symlink leaving the apps directory " .. apps_dir
        end
        st = safefs.lstat(real)
    end
    if not st or st.type ~= "file" then
        return "template.yaml is not a regular file"
    end
    local euid = fs.geteuid()
    if euid == 0 and st.uid ~= 0 then
        return string.format("template.yaml is owned by uid %d; Relay runs as root and only reads templates " ..
            "owned by root (chown root it, or run Relay as the apps' owner)", st.uid)
    end
    return nil
end


--- Load one app directory `<apps_dir>/<name>`; never raises on a bad template.
local function load_dir_entry(apps_dir, name, opts)
    local app_dir = join(apps_dir, name)
    local path = join(app_dir, "template.yaml")
    local app = { name = name, dir = app_dir, path = path }
    if not _M.valid_name(name) then
        return invalid(app, string.format("%s: invalid app name %s: app names match %s",
            app_dir, yaml.json_string(name), _M.APP_NAME_RULE))
    end
    local refused = untrusted_template(apps_dir, path)
    if refused then
        return invalid(app, string.format("%s: refused: %s", path, refused))
    end
    local text, err = read_file(path)
    if not text then
        if err:find("No such file", 1, true) then
            return invalid(app, string.format("%s: missing template.yaml", app_dir))
        end
        return invalid(app, string.format("%s: cannot read: %s", path, err))
    end
    return _M.validate(text, path, name, app_dir, opts)
end


--- Load every app under `apps_dir`, sorted by name; opts.bulk: see app.rules above.
-- @return list, or nil, err when the directory itself cannot be read
function _M.load_all(apps_dir, opts)
    local names, err = list_dir(apps_dir)
    if not names then
        return nil, string.format("apps directory %s: %s", apps_dir, err)
    end
    local list = {}
    for _, name in ipairs(names) do
        if name:sub(1, 1) ~= "." and is_dir(join(apps_dir, name)) then
            list[#list + 1] = load_dir_entry(apps_dir, name, opts)
        end
    end
    return list
end


--- Load the single app `name` under `apps_dir`.
-- @return app (possibly invalid), or nil, err when it does not exist
function _M.load_app(apps_dir, name)
    if not is_dir(join(apps_dir, name)) then
        return nil, string.format("no app %s in %s", yaml.json_string(name), apps_dir)
    end
    return load_dir_entry(apps_dir, name)
end


function _M.find(list, name)
    for _, app in ipairs(list) do
        if app.name == name then
            return app
        end
    end
end


--- Reload seam: combine the previous load result with a fresh one.
-- An app whose fresh template is invalid keeps its previous good version (marked with
-- reload_error); an app never loaded successfully stays invalid; apps gone from the
-- directory are dropped. Neither input is modified.
-- @return merged list sorted by name, and a list of {name, change, error} where change is
--   "added", "updated", "unchanged", "kept_last_good", "invalid" or "removed"
function _M.merge(previous, fresh)
    local before = {}
    for _, app in ipairs(previous or {}) do
        before[app.name] = app
    end
    local merged, changes = {}, {}
    for _, app in ipairs(fresh) do
        local old = before[app.name]
        before[app.name] = nil
        local change
        if app.state == "ok" then
            change = not old and "added"
                or (old.state == "ok" and not old.reload_error and old.source == app.source) and "unchanged"
                or "updated"
            merged[#merged + 1] = app
        elseif old and old.state == "ok" then
            local kept = {}
            for k, v in pairs(old) do
                kept[k] = v
            end
            kept.reload_error = app.error
            change = "kept_last_good"
            merged[#merged + 1] = kept
        else
            change = "invalid"
            merged[#merged + 1] = app
        end
        changes[#changes + 1] = { name = app.name, change = change, error = app.error }
    end
    for name in pairs(before) do
        changes[#changes + 1] = { name = name, change = "removed" }
    end
    table.sort(merged, function(a, b) return a.name < b.name end)
    table.sort(changes, function(a, b) return a.name < b.name end)
    return merged, changes
end


--- Every loaded ("ok") app in dispatch order (by name).
local function dispatch_order(list)
    local ordered = {}
    for _, app in ipairs(list) do
        if app.state == "ok" then
            ordered[#ordered + 1] = app
        end
    end
    table.sort(ordered, function(a, b) return a.name < b.name end)
    return ordered
end


--- Adds an app's rules to m and their labels ("<app>/<handler>") to labels from
-- labels[base + 1]. A rule block's labels are made when first read (lazy_labels): only
-- the rules that match need one.
-- @return the number of rules, or nil, err, index (1-based, in the app) of a refused rule
local function add_app(m, app, labels, base, lazy)
    if app.rules then
        local added, err, index = m:add_rules(app.rules)
        if added then
            lazy[#lazy + 1] = { base = base, count = added, prefix = app.name .. "/", rules = app.rules }
        end
        return added, err, index
    end
    local jsons, prefix = {}, app.name .. "/"
    for i, ev in ipairs(app.events) do
        jsons[i] = ev.pattern_json
        labels[base + i] = prefix .. ev.handler
    end
    -- One C call for the app's rules, so this loop calls no C and LuaJIT compiles it.
    return m:add_many(jsons)
end


--- labels[id] for the ids of rule blocks, made on first read and kept.
local function lazy_labels(labels, blocks)
    if #blocks == 0 then
        return labels
    end
    return setmetatable(labels, { __index = function(t, id)
        if type(id) ~= "number" then
            return nil
        end
        for _, b in ipairs(blocks) do
            local i = id - b.base
            if i >= 1 and i <= b.count and i % 1 == 0 then
                local label = b.prefix .. b.rules:handler(i)
                rawset(t, id, label)
                return label
            end
        end
    end })
end


--- Where rule `index` of an app was written: line, col.
local function rule_mark(app, index)
    if app.rules then
        return app.rules:mark(index)
    end
    local ev = app.events[index]
    return ev.line, ev.col
end


--- One matcher over every loaded app, rule ids in dispatch order (apps by name, rules
-- in declaration order): labels[id + 1] = "<app>/<handler>" (read by index only: see
-- the module header). Nothing else is kept per rule: a table each was a sixth of loading
-- 10,000 rules, and nothing read it.
-- @return matcher, labels, or nil, err
function _M.build_matcher(list, matcher_module)
    local m = (matcher_module or require("relay.core.matcher")).new()
    local labels, blocks, base = {}, {}, 0
    for _, app in ipairs(dispatch_order(list)) do
        local added, add_err, index = add_app(m, app, labels, base, blocks)
        if not added then
            local line, col = rule_mark(app, index)
            return nil, string.format("%s:%d:%d: the matcher refused this pattern: %s", app.path, line, col,
                add_err)
        end
        base = base + added
    end
    local ok, err = m:compile()
    if ok == nil and err then
        return nil, err
    end
    return m, lazy_labels(labels, blocks)
end

return _M
