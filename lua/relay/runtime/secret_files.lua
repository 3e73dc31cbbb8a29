--- Delivery of an invocation's secrets as files, shared by the runc and
-- bwrap drivers: a directory that becomes the container's /run/secrets,
-- holding one file per secret.
--
-- The directory is made by the daemon (0700 while it is filled), filled
-- with files 0400, then given to the handler's host uid with mode 0500:
-- the handler reads its secrets through the read-only bind, no other uid
-- on the host can enter it, and nothing is ever readable by others. The
-- caller removes it with the invocation.
--
--   secret_files.plan(rt, app)      -> { secrets, secret_files, mounts } | nil, why
--   secret_files.write(dir, files, uid, gid) -> true | nil, err
--   secret_files.remove(dir)
local access = require("relay.runtime.access")
local fs = require("relay.fs")
local safefs = require("relay.core.safefs")
local stat = require("posix.sys.stat")
local unistd = require("posix.unistd")

local _M = {}

local BUILD_MODE, DIR_MODE, FILE_MODE = 448, 320, 256 -- 0700, 0500, 0400


--- What an invocation needs of the host, read at its start (a secret
-- removed since the last availability check fails this start, so no
-- handler runs without its secret): every secret with its value, those
-- delivered as files, and the template's mounts with their real sources.
function _M.plan(rt, app)
    local secrets, why = access.read_secrets(rt, app)
    if not secrets then
        return nil, why
    end
    local mounts
    mounts, why = access.resolve_mounts(rt, app)
    if not mounts then
        return nil, why
    end
    local files = {}
    for _, s in ipairs(secrets) do
        if s.as == "file" then
            files[#files + 1] = s
        end
    end
    return { secrets = secrets, secret_files = files, mounts = mounts }
end


local function chown(path, uid, gid)
    if uid == nil or fs.geteuid() ~= 0 then
        return true -- an unprivileged daemon's handlers run as its own uid
    end
    local ok, err = unistd.chown(path, uid, gid)
    if not ok then
        return nil, path .. ": chown: " .. tostring(err)
    end
    return true
end


--- Writes files (each {name, value}) into the new directory dir.
function _M.write(dir, files, uid, gid)
    local ok, err = safefs.private_dir(dir, BUILD_MODE)
    for _, f in ipairs(files) do
        if not ok then
            break
        end
        local path = dir .. "/" .. f.name
        ok, err = safefs.write_new(path, f.value, FILE_MODE)
        if ok then
            ok, err = chown(path, uid, gid)
        end
    end
    if ok then
        ok, err = chown(dir, uid, gid)
    end
    if ok and stat.chmod(dir, DIR_MODE) ~= 0 then
        ok, err = nil, dir .. ": chmod failed"
    end
    if not ok then
        _M.remove(dir)
        return nil, "secrets: " .. tostring(err)
    end
    return true
end


--- Removes a secrets directory (nothing when it is not there).
function _M.remove(dir)
    if fs.is_dir(dir) then
        stat.chmod(dir, BUILD_MODE)
        fs.rm_rf(dir)
    end
end


return _M
