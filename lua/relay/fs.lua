--- The few filesystem and process calls the runtime drivers need, through
-- luaposix (Debian's lua-posix, which ships a Lua 5.1 build LuaJIT loads).
-- Local-disk calls only: they are short and never touch the network, so
-- they may run inside the loop.
--
-- Conventions: predicates return booleans; calls that change something
-- return true, or nil and "<call> <path>: <strerror text>".
local dirent = require("posix.dirent")
local errno = require("posix.errno")
local signal = require("posix.signal")
local stat = require("posix.sys.stat")
local stdlib = require("posix.stdlib")
local unistd = require("posix.unistd")

local _M = {}

local DEFAULT_DIR_MODE = 493 -- 0755, before the umask


local function strerror(errnum)
    return (errno.errno(errnum))
end


local function errmsg(what, path, errnum)
    return string.format("%s %s: %s", what, path, strerror(errnum))
end


--- luaposix calls return 0 (or a value) on success and nil, message, errno
-- on failure; this turns one into our convention.
local function result(what, path, ok, _, errnum)
    if ok == nil then
        return nil, errmsg(what, path, errnum)
    end
    return true
end


local function mode_of(path, follow)
    local st = (follow and stat.stat or stat.lstat)(path)
    return st and st.st_mode
end


function _M.exists(path)
    return unistd.access(path, "f") == 0
end


--- Whether path is a directory or a symlink to one.
function _M.is_dir(path)
    local mode = mode_of(path, true)
    return mode ~= nil and stat.S_ISDIR(mode) ~= 0
end


--- Whether path is a regular file or a symlink to one.
function _M.is_file(path)
    local mode = mode_of(path, true)
    return mode ~= nil and stat.S_ISREG(mode) ~= 0
end


function _M.is_executable(path)
    return unistd.access(path, "x") == 0 and not _M.is_dir(path)
end


--- The size in bytes of what path names (symlinks followed), or nil.
function _M.size(path)
    local st = stat.stat(path)
    return st and st.st_size
end


--- What path is, without following a final symlink: "link", "dir",
-- "file" or "other"; nil when it does not exist.
function _M.kind(path)
    local mode = mode_of(path, false)
    if not mode then
        return nil
    end
    if stat.S_ISLNK(mode) ~= 0 then
        return "link"
    elseif stat.S_ISDIR(mode) ~= 0 then
        return "dir"
    elseif stat.S_ISREG(mode) ~= 0 then
        return "file"
    end
    return "other"
end


--- Target of a symlink, or nil if path is not one.
function _M.readlink(path)
    return (unistd.readlink(path))
end


function _M.realpath(path)
    local real, _, errnum = stdlib.realpath(path)
    if not real then
        return nil, errmsg("realpath", path, errnum)
    end
    return real
end


--- Why opendir(path) fails. luaposix raises on that failure with errno only
-- inside its message, so stat gives the reason for the usual cases (missing,
-- not a directory, a component not searchable) and the message the rest.
local function opendir_reason(path, raised)
    local st, _, errnum = stat.stat(path)
    if not st then
        return strerror(errnum)
    end
    if stat.S_ISDIR(st.st_mode) == 0 then
        return strerror(errno.ENOTDIR)
    end
    raised = tostring(raised)
    return raised:match(".*: (.-)%)$") or raised
end


--- Entries of a directory: list of {name=, dir=bool, link=bool}, sorted by
-- name; or nil, "opendir PATH: reason", reason. dir and link describe the
-- entry itself (lstat): a symlink to a directory is link=true, dir=false,
-- so walking the tree never leaves it.
function _M.list(path)
    local ok, names = pcall(dirent.dir, path)
    if not ok then
        local reason = opendir_reason(path, names)
        return nil, "opendir " .. path .. ": " .. reason, reason
    end
    local out = {}
    for _, name in ipairs(names) do
        if name ~= "." and name ~= ".." then
            -- An entry removed since the read is listed as neither.
            local mode = mode_of(path .. "/" .. name, false)
            out[#out + 1] = {
                name = name,
                dir = mode ~= nil and stat.S_ISDIR(mode) ~= 0,
                link = mode ~= nil and stat.S_ISLNK(mode) ~= 0,
            }
        end
    end
    table.sort(out, function(a, b) return a.name < b.name end)
    return out
end


--- The names in a directory, unsorted, without . and .. and without an
-- lstat of each (see list); or nil, err.
function _M.names(path)
    local ok, names = pcall(dirent.dir, path)
    if not ok then
        return nil, tostring(names)
    end
    local out = {}
    for _, name in ipairs(names) do
        if name ~= "." and name ~= ".." then
            out[#out + 1] = name
        end
    end
    return out
end


--- mkdir; an existing path counts as success (callers create idempotently).
function _M.mkdir(path, mode)
    local ok, _, errnum = stat.mkdir(path, mode or DEFAULT_DIR_MODE)
    if ok or errnum == errno.EEXIST then
        return true
    end
    return nil, errmsg("mkdir", path, errnum)
end


function _M.mkdir_p(path, mode)
    local acc = path:sub(1, 1) == "/" and "" or "."
    for part in path:gmatch("[^/]+") do
        acc = acc .. "/" .. part
        local ok, err = _M.mkdir(acc, mode)
        if not ok then
            return nil, err
        end
    end
    return true
end


--- A new directory only we can use (mode 0700), named prefix followed by six
-- random characters, created atomically (no other process can have made or
-- replaced it). A prefix without a '/' goes under $TMPDIR, or /tmp.
-- Returns its path, or nil, "mkdtemp PREFIX: reason".
function _M.mkdtemp(prefix)
    prefix = prefix or "relay-"
    if not prefix:find("/", 1, true) then
        local tmp = os.getenv("TMPDIR")
        prefix = ((tmp and tmp ~= "") and tmp or "/tmp") .. "/" .. prefix
    end
    local dir, _, errnum = stdlib.mkdtemp(prefix .. "XXXXXX")
    if not dir then
        return nil, errmsg("mkdtemp", prefix, errnum)
    end
    return dir
end


function _M.chmod(path, mode)
    return result("chmod", path, stat.chmod(path, mode))
end


--- symlink; an existing path counts as success, whatever it is.
function _M.symlink(target, path)
    local ok, _, errnum = unistd.link(target, path, true)
    if ok or errnum == errno.EEXIST then
        return true
    end
    return nil, errmsg("symlink", path, errnum)
end


function _M.rmdir(path)
    return result("rmdir", path, unistd.rmdir(path))
end


function _M.unlink(path)
    return result("unlink", path, unistd.unlink(path))
end


--- Removes a tree we created. Symlinks are removed, never followed (path
-- itself included). Errors below path are ignored; the last rmdir's is not.
function _M.rm_rf(path)
    local mode = mode_of(path, false)
    if mode == nil then
        return true
    end
    if stat.S_ISDIR(mode) == 0 then
        return _M.unlink(path)
    end
    for _, e in ipairs(_M.list(path) or {}) do
        local child = path .. "/" .. e.name
        if e.dir then
            _M.rm_rf(child)
        else
            unistd.unlink(child)
        end
    end
    return _M.rmdir(path)
end


--- Removes a directory we made and filled with `names` (files or links):
-- those unlinked, then the directory, with no listing and no lstat of each
-- entry. Should anything else be in it, rm_rf removes the rest.
function _M.remove_known(path, names)
    for _, name in ipairs(names or {}) do
        unistd.unlink(path .. "/" .. name)
    end
    local ok, _, errnum = unistd.rmdir(path)
    if ok or errnum == errno.ENOENT then
        return true
    end
    return _M.rm_rf(path)
end


function _M.write_file(path, data)
    local f, err = io.open(path, "wb")
    if not f then
        return nil, err
    end
    local ok, werr = f:write(data)
    f:close()
    if not ok then
        return nil, werr
    end
    return true
end


function _M.read_file(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    local data = f:read("*a")
    f:close()
    return data
end


function _M.geteuid()
    return unistd.geteuid()
end


function _M.getpid()
    return unistd.getpid()
end


--- Sends sig to pid; whether it was delivered.
function _M.kill(pid, sig)
    return signal.kill(pid, sig) == 0
end


--- Whether a process exists and is not a zombie (a killed process whose
-- parent has not reaped it yet is as dead as we care).
function _M.alive(pid)
    if not _M.kill(pid, 0) then
        return false
    end
    local stat_line = _M.read_file("/proc/" .. pid .. "/stat") or ""
    return stat_line:match("^%d+ %(.*%) (%a)") ~= "Z"
end


--- First executable named `name` in PATH (or `name` itself if it has a '/').
function _M.which(name, path)
    if name:find("/", 1, true) then
        return _M.is_executable(name) and name or nil
    end
    path = path or os.getenv("PATH") or "/usr/local/bin:/usr/bin:/bin"
    for dir in path:gmatch("[^:]+") do
        local candidate = dir .. "/" .. name
        if _M.is_executable(candidate) then
            return candidate
        end
    end
    return nil
end


return _M
