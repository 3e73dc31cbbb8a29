--- The daemons that have held a consumer's runtime root, recorded in the
-- root itself (`<root>/holders`, a line "<stream> <instance>" each).
--
-- Why the root and not Redis: the sweep that removes a root's containers
-- takes its owner lock exclusive, which the kernel grants only once every
-- daemon that held it is dead. The sweeper then knows which instances are
-- dead and that their containers are gone, even when their consumer keys
-- have long expired, and says so in Redis (relay.guard: the dead key), so
-- that other replicas charge their attempts at once instead of waiting out
-- the attempts' leases.
local fcntl = require("posix.fcntl")
local fs = require("relay.fs")
local safefs = require("relay.core.safefs")
local unistd = require("posix.unistd")

local _M = {}

local FILE = "holders"


local function path_in(dir)
    return dir .. "/" .. FILE
end


--- Adds a holder (the daemon holds the root's shared lock by now). Appends
-- of one short line are atomic, so daemons of several streams sharing the
-- root never mix their lines. Returns true, or nil and why.
function _M.record(dir, stream, instance)
    local path = path_in(dir)
    local st = safefs.lstat(path)
    if st and st.type ~= "file" then
        return nil, path .. " is not a regular file"
    end
    local fd, err = fcntl.open(path, fcntl.O_WRONLY + fcntl.O_CREAT + fcntl.O_APPEND + fcntl.O_CLOEXEC, 384)
    if not fd then
        return nil, err
    end
    local line = stream .. " " .. instance .. "\n"
    local n, werr = unistd.write(fd, line)
    unistd.close(fd)
    if n ~= #line then
        return nil, werr or "short write"
    end
    return true
end


--- The recorded holders, { {stream, instance}… }, and the record removed:
-- only for the holder of the root's exclusive lock, after its sweep.
function _M.take(dir)
    local path = path_in(dir)
    local st = safefs.lstat(path)
    if not st or st.type ~= "file" then
        return {}
    end
    local out = {}
    for stream, instance in (fs.read_file(path) or ""):gmatch("(%S+) (%S+)\n") do
        out[#out + 1] = { stream = stream, instance = instance }
    end
    fs.unlink(path)
    return out
end


--- Whether the root records any holder.
function _M.any(dir)
    return fs.exists(path_in(dir))
end


return _M
