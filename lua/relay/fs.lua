--- The few filesystem and process calls the runtime drivers need, through
-- LuaJIT's FFI (the host has no lfs). Local-disk calls only: they are short
-- and never touch the network, so they may run inside the loop.
local ffi = require("ffi")

local _M = {}

local DECLS = {
    "typedef struct relay_rt_dir relay_rt_dir;",
    [[struct relay_rt_dirent { uint64_t d_ino; int64_t d_off; unsigned short d_reclen;
        unsigned char d_type; char d_name[256]; };]],
    "relay_rt_dir *opendir(const char *name);",
    "int closedir(relay_rt_dir *d);",
    "int mkdir(const char *path, unsigned int mode);",
    "int rmdir(const char *path);",
    "int unlink(const char *path);",
    "int chmod(const char *path, unsigned int mode);",
    "int access(const char *path, int mode);",
    "unsigned int geteuid(void);",
    "int getpid(void);",
    "int kill(int pid, int sig);",
    "int symlink(const char *target, const char *linkpath);",
    "long readlink(const char *path, char *buf, size_t len);",
    "char *realpath(const char *path, char *resolved);",
    "void free(void *p);",
    "char *strerror(int errnum);",
}

-- Another module may have declared some of these already; a redeclaration
-- is an error in LuaJIT, so each goes in on its own.
for _, decl in ipairs(DECLS) do
    pcall(ffi.cdef, decl)
end
pcall(ffi.cdef, "struct relay_rt_dirent *readdir(relay_rt_dir *d);")

local C = ffi.C
-- If another module declared the dir functions with its own types, ours were
-- refused: call through pointers of our types either way.
local opendir = ffi.cast("relay_rt_dir *(*)(const char *)", C.opendir)
local readdir = ffi.cast("struct relay_rt_dirent *(*)(relay_rt_dir *)", C.readdir)
local closedir = ffi.cast("int (*)(relay_rt_dir *)", C.closedir)
local X_OK, F_OK = 1, 0
local DT_DIR, DT_LNK = 4, 10
local EEXIST = 17


local function errmsg(what, path)
    return string.format("%s %s: %s", what, path, ffi.string(C.strerror(ffi.errno())))
end


function _M.exists(path)
    return C.access(path, F_OK) == 0
end


function _M.is_dir(path)
    local d = opendir(path)
    if d == nil then
        return false
    end
    closedir(d)
    return true
end


function _M.is_executable(path)
    return C.access(path, X_OK) == 0 and not _M.is_dir(path)
end


--- Target of a symlink, or nil if path is not one.
function _M.readlink(path)
    local buf = ffi.new("char[4096]")
    local n = C.readlink(path, buf, 4096)
    if n < 0 then
        return nil
    end
    return ffi.string(buf, n)
end


function _M.realpath(path)
    local p = C.realpath(path, nil)
    if p == nil then
        return nil, errmsg("realpath", path)
    end
    local s = ffi.string(p)
    C.free(p)
    return s
end


--- Entries of a directory: list of {name=, dir=bool, link=bool}, sorted by
-- name; or nil, "opendir PATH: reason", reason.
function _M.list(path)
    local d = opendir(path)
    if d == nil then
        local reason = ffi.string(C.strerror(ffi.errno()))
        return nil, "opendir " .. path .. ": " .. reason, reason
    end
    local out = {}
    while true do
        local e = readdir(d)
        if e == nil then
            break
        end
        local name = ffi.string(e.d_name)
        if name ~= "." and name ~= ".." then
            out[#out + 1] = { name = name, dir = e.d_type == DT_DIR, link = e.d_type == DT_LNK }
        end
    end
    closedir(d)
    table.sort(out, function(a, b) return a.name < b.name end)
    return out
end


function _M.mkdir(path, mode)
    if C.mkdir(path, mode or 493) == 0 or ffi.errno() == EEXIST then
        return true
    end
    return nil, errmsg("mkdir", path)
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


function _M.chmod(path, mode)
    if C.chmod(path, mode) ~= 0 then
        return nil, errmsg("chmod", path)
    end
    return true
end


function _M.symlink(target, path)
    if C.symlink(target, path) == 0 or ffi.errno() == EEXIST then
        return true
    end
    return nil, errmsg("symlink", path)
end


function _M.rmdir(path)
    if C.rmdir(path) ~= 0 then
        return nil, errmsg("rmdir", path)
    end
    return true
end


function _M.unlink(path)
    if C.unlink(path) ~= 0 then
        return nil, errmsg("unlink", path)
    end
    return true
end


--- Removes a tree we created. Symlinks are removed, never followed.
function _M.rm_rf(path)
    local entries = _M.list(path)
    if not entries then
        if _M.exists(path) or _M.readlink(path) then
            return _M.unlink(path)
        end
        return true
    end
    for _, e in ipairs(entries) do
        local child = path .. "/" .. e.name
        if e.dir then
            _M.rm_rf(child)
        else
            C.unlink(child)
        end
    end
    return _M.rmdir(path)
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
    return tonumber(C.geteuid())
end


function _M.getpid()
    return tonumber(C.getpid())
end


function _M.kill(pid, sig)
    return C.kill(pid, sig) == 0
end


--- Whether a process exists and is not a zombie (a killed process whose
-- parent has not reaped it yet is as dead as we care).
function _M.alive(pid)
    if C.kill(pid, 0) ~= 0 then
        return false
    end
    local stat = _M.read_file("/proc/" .. pid .. "/stat") or ""
    return stat:match("^%d+ %(.*%) (%a)") ~= "Z"
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
