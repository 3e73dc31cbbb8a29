--- What a template's `secrets:` and `mounts:` need from the daemon's host:
-- the secret values (Relay's environment, or files in RELAY_SECRETS_DIR)
-- and the mount sources (directories under RELAY_ALLOWED_MOUNTS).
--
-- The template validator (relay.apps) checks only the template's own text:
-- the same template is valid on a laptop, in CI and in production. Whether
-- a secret exists and a source is allowed depends on the host, so it is
-- checked here, by every rootfs driver's availability check (at each reload
-- and in `relay app ls`: an app that fails it is "unavailable" with the
-- reason) and again at each start (a secret removed since the last reload
-- fails the start as the host's failure: no handler ever runs without its
-- secret). Reasons quote the template's FILE:LINE:COL, never a value.
--
--   access.check(rt, app)         -> true | nil, reason
--   access.read_secrets(rt, app)  -> { {name, as, value} ... } | nil, reason
--   access.resolve_mounts(rt, app) -> { {source (real path), target, writable} ... } | nil, reason
--
-- rt.secrets_dir is RELAY_SECRETS_DIR, rt.allowed_mounts RELAY_ALLOWED_MOUNTS (a list), either nil.
local fs = require("relay.fs")
local safefs = require("relay.core.safefs")
local unistd = require("posix.unistd")

local _M = {}

-- A secret is a key or a password, not a data set: the bound keeps a
-- mistaken file (a log, an archive) out of every container's /run/secrets.
_M.MAX_SECRET_BYTES = 64 * 1024


local function secret_label(secret)
    return secret.from == "env" and ("env:" .. secret.name) or secret.name
end


--- Why RELAY_SECRETS_DIR cannot be trusted with secrets, or nil: a
-- directory others can write could have its files replaced.
local function untrusted_secrets_dir(dir)
    local st = safefs.lstat(dir)
    if not st or st.type ~= "dir" then
        return "RELAY_SECRETS_DIR " .. dir .. " is not a directory"
    end
    if st.mode % 32 >= 16 or st.mode % 4 >= 2 then
        return "RELAY_SECRETS_DIR " .. dir .. " is writable by its group or others (chmod go-w it)"
    end
    if fs.geteuid() == 0 and st.uid ~= 0 then
        return "RELAY_SECRETS_DIR " .. dir .. " is not owned by root (Relay runs as root)"
    end
    return nil
end


--- The secret's file, opened without following a symlink: fd | nil, why.
local function open_secret_file(rt, secret)
    if not rt.secrets_dir then
        return nil, "RELAY_SECRETS_DIR is not set"
    end
    local refused = untrusted_secrets_dir(rt.secrets_dir)
    if refused then
        return nil, refused
    end
    local path = rt.secrets_dir .. "/" .. secret.name
    local st = safefs.lstat(path)
    if not st then
        return nil, "no file " .. path
    elseif st.type ~= "file" then
        return nil, path .. " is not a regular file (a symlink is refused)"
    end
    local fd, err = safefs.open_read(path)
    if not fd then
        return nil, err
    end
    return fd
end


--- The whole content of fd (closed), or nil, why when over the bound.
local function read_bounded(fd, path)
    local parts, size = {}, 0
    repeat
        local chunk = unistd.read(fd, 16384)
        if chunk and #chunk > 0 then
            parts[#parts + 1] = chunk
            size = size + #chunk
        end
    until not chunk or #chunk == 0 or size > _M.MAX_SECRET_BYTES
    safefs.close(fd)
    if size > _M.MAX_SECRET_BYTES then
        return nil, path .. " is larger than " .. _M.MAX_SECRET_BYTES .. " bytes"
    end
    return table.concat(parts)
end


--- One secret's value, or nil, why (never quoting a value).
local function secret_value(rt, secret)
    if secret.from == "env" then
        local value = os.getenv(secret.name)
        if value == nil or value == "" then
            return nil, "Relay's environment has no " .. secret.name .. " (or it is empty)"
        end
        if #value > _M.MAX_SECRET_BYTES then
            return nil, secret.name .. " is larger than " .. _M.MAX_SECRET_BYTES .. " bytes"
        end
        return value
    end
    local fd, err = open_secret_file(rt, secret)
    if not fd then
        return nil, err
    end
    return read_bounded(fd, rt.secrets_dir .. "/" .. secret.name)
end


local function secret_error(secret, why)
    return string.format("%s: secret %s is missing: %s", secret.at, secret_label(secret), why)
end


--- Every secret of the app with its value: { {name, as, value} ... } | nil, why.
function _M.read_secrets(rt, app)
    local out = {}
    for _, secret in ipairs((app.runtime or {}).secrets or {}) do
        local value, why = secret_value(rt, secret)
        if value and secret.as == "env" and value:find("\0", 1, true) then
            value, why = nil, "it holds a NUL byte, which no variable can (use as: file)"
        end
        if not value then
            return nil, secret_error(secret, why)
        end
        out[#out + 1] = { name = secret.name, as = secret.as, value = value }
    end
    return out
end


--- The real paths of RELAY_ALLOWED_MOUNTS that exist.
local function allowed_dirs(rt)
    local out = {}
    for _, dir in ipairs(rt.allowed_mounts or {}) do
        out[#out + 1] = fs.realpath(dir)
    end
    return out
end


--- A mount's source as a real, allowed directory, or nil, why. The
-- template must name the real path: a symlink anywhere on it (planted by a
-- handler with a writable mount, say) could point it anywhere on the host.
local function resolve_source(source, allowed, configured)
    local real = fs.realpath(source)
    if not real then
        return nil, source .. " does not exist"
    elseif real ~= source then
        return nil, source .. " goes through a symlink (it resolves to " .. real .. "); name the real directory"
    elseif not fs.is_dir(real) then
        return nil, source .. " is not a directory"
    end
    for _, dir in ipairs(allowed) do
        if real == dir or real:sub(1, #dir + 1) == dir .. "/" then
            return real
        end
    end
    return nil, source .. " is not under RELAY_ALLOWED_MOUNTS (" .. table.concat(configured, ":") .. ")"
end


--- Every mount of the app, its source checked: { {source, target, writable} ... } | nil, why.
function _M.resolve_mounts(rt, app)
    local mounts = (app.runtime or {}).mounts or {}
    if #mounts == 0 then
        return {}
    end
    if not rt.allowed_mounts then
        return nil, mounts[1].at .. ": runtime.mounts needs RELAY_ALLOWED_MOUNTS, the host directories " ..
            "templates may mount; it is not set"
    end
    local allowed, out = allowed_dirs(rt), {}
    for _, m in ipairs(mounts) do
        local real, why = resolve_source(m.source, allowed, rt.allowed_mounts)
        if not real then
            return nil, m.at .. ": mount source refused: " .. why
        end
        out[#out + 1] = { source = real, target = m.target, writable = m.writable }
    end
    return out
end


--- true, or nil and why the app cannot run on this host (no value kept).
function _M.check(rt, app)
    local ok, why = _M.read_secrets(rt, app)
    if ok then
        ok, why = _M.resolve_mounts(rt, app)
    end
    if not ok then
        return nil, why
    end
    return true
end


--- Whether the app uses either key (drivers that cannot deliver them refuse it).
function _M.used(app)
    local r = app.runtime or {}
    return #(r.secrets or {}) > 0 or #(r.mounts or {}) > 0
end


return _M
