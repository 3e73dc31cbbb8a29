--- This process's own figures for the Prometheus `process_*` metrics, read
-- from /proc/self as the official clients read them (client_python's
-- ProcessCollector): CPU seconds and the start time from
-- /proc/self/stat in clock ticks, the resident set from
-- /proc/self/status, open descriptors by listing /proc/self/fd.
-- Each reader returns nil where /proc cannot tell (no procfs).
local dirent = require("posix.dirent")
local fs = require("relay.fs")
local unistd = require("posix.unistd")

local _M = {}

local TICKS_PER_SECOND = unistd.sysconf(unistd._SC_CLK_TCK) or 100


--- The fields of a /proc/<pid>/stat text after the command name, which
-- may itself hold spaces and parentheses: field n of proc(5) is [n - 2].
local function stat_fields(text)
    local rest = text and text:match("^.*%)%s+(.*)$")
    if not rest then
        return nil
    end
    local fields = {}
    for word in rest:gmatch("%S+") do
        fields[#fields + 1] = word
    end
    return fields
end


local function self_stat()
    return stat_fields(fs.read_file("/proc/self/stat"))
end


--- User plus system CPU time, in seconds.
function _M.cpu_seconds()
    local f = self_stat()
    if not f then
        return nil
    end
    return (tonumber(f[12]) + tonumber(f[13])) / TICKS_PER_SECOND  -- utime (14), stime (15)
end


--- The resident set size, in bytes.
function _M.resident_bytes()
    local kib = (fs.read_file("/proc/self/status") or ""):match("\nVmRSS:%s*(%d+) kB")
    return kib and tonumber(kib) * 1024
end


--- How many file descriptors are open (the listing's own included, as
-- the official clients count them).
function _M.open_fds()
    local ok, names = pcall(dirent.dir, "/proc/self/fd")
    if not ok then
        return nil
    end
    local n = 0
    for _, name in ipairs(names) do
        if name ~= "." and name ~= ".." then
            n = n + 1
        end
    end
    return n
end


--- When the process started, in seconds since the Unix epoch: the boot
-- time plus the start in ticks after boot.
function _M.start_time_seconds()
    local f = self_stat()
    local boot = (fs.read_file("/proc/stat") or ""):match("\nbtime (%d+)")
    if not (f and boot) then
        return nil
    end
    return tonumber(boot) + tonumber(f[20]) / TICKS_PER_SECOND  -- starttime (22)
end


return _M
