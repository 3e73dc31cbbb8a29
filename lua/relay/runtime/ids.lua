--- Host uid and gid ranges of handler containers.
--
-- A handler never runs as a host uid of 0, and apps never share one:
-- anything scoped by uid (kernel keyrings, files left in a shared directory,
-- quotas) would otherwise leak from one app to the next. Each app gets its
-- own block of BLOCK ids: container uid N runs as host uid base + N, so a
-- handler (container uid 65534) is host uid base + 65534 and its container's
-- root is host uid base, never 0.
--
-- Where the ids come from: the subordinate ranges of the user `relay` in
-- /etc/subuid and /etc/subgid when they exist (as podman takes those of
-- `containers`), else DEFAULT_START .. DEFAULT_START + DEFAULT_COUNT, a range
-- no distribution allocates to users (below 2^31, since code that stores
-- uids as signed 32-bit numbers misreads larger ones).
--
-- An app's block is chosen by a hash of its name; a collision with another
-- app in the same apps directory moves the one whose name sorts later to the
-- next free block. So a block is stable across restarts, reloads and
-- replicas, and changes only when a newly added app collides with it.
local apps = require("relay.apps")
local bit = require("bit")
local fs = require("relay.fs")

local _M = {}

_M.BLOCK = 65536
_M.DEFAULT_START = 0x70000000
_M.DEFAULT_COUNT = 0x0FFE0000
_M.CONTAINER_USER = 65534
_M.SUBID_USER = "relay"
_M.SUBUID_FILE = "/etc/subuid"
_M.SUBGID_FILE = "/etc/subgid"


--- The first "user:start:count" range of `user` in a subordinate-id file.
function _M.subordinate(path, user)
    for line in (fs.read_file(path) or ""):gmatch("[^\n]+") do
        local name, start, count = line:match("^%s*([^:#%s]+):(%d+):(%d+)%s*$")
        if name == user then
            return tonumber(start), tonumber(count)
        end
    end
    return nil
end


--- { uid = start, gid = start, blocks = N, source = text } for this host.
function _M.range()
    local us, uc = _M.subordinate(_M.SUBUID_FILE, _M.SUBID_USER)
    local gs, gc = _M.subordinate(_M.SUBGID_FILE, _M.SUBID_USER)
    if us and gs then
        local blocks = math.floor(math.min(uc, gc) / _M.BLOCK)
        if blocks >= 1 then
            return { uid = us, gid = gs, blocks = blocks,
                source = string.format("%s and %s entries of %s", _M.SUBUID_FILE, _M.SUBGID_FILE, _M.SUBID_USER) }
        end
    end
    return { uid = _M.DEFAULT_START, gid = _M.DEFAULT_START, blocks = math.floor(_M.DEFAULT_COUNT / _M.BLOCK),
        source = "the built-in range" }
end


--- FNV-1a over the name: stable across processes, hosts and versions.
local function hash(name)
    local h = 2166136261
    for i = 1, #name do
        h = bit.bxor(h, name:byte(i)) % 4294967296
        -- h * 16777619 mod 2^32 without leaving a double's exact range
        h = (h * 403 + bit.lshift(h, 24) % 4294967296) % 4294967296
    end
    return h
end
_M.hash = hash


--- The block index of `name` among `names` (all apps of its directory):
-- its hash slot, unless an app that sorts earlier took it (linear probing).
function _M.slot(name, names, blocks)
    local taken = {}
    local sorted = {}
    for _, n in ipairs(names) do
        sorted[#sorted + 1] = n
    end
    table.sort(sorted)
    for _, n in ipairs(sorted) do
        local s = hash(n) % blocks
        while taken[s] and taken[s] ~= n do
            s = (s + 1) % blocks
        end
        taken[s] = n
        if n == name then
            return s
        end
    end
    return hash(name) % blocks
end


--- The apps directory holding an app, or nil.
function _M.apps_dir_of(app)
    return (app.dir or ""):match("^(.*)/[^/]+/?$")
end


--- The app names of an apps directory (its directories with valid names).
function _M.app_names(dir)
    local names = {}
    for _, e in ipairs(fs.list(dir) or {}) do
        if e.dir and apps.valid_name(e.name) then
            names[#names + 1] = e.name
        end
    end
    return names
end


--- { uid, gid } base of an app's block, and the handler's host ids. range
-- and names (the app names beside it) are read from the host when not given.
function _M.for_app(app, range, names)
    range = range or _M.range()
    if not names then
        local parent = _M.apps_dir_of(app)
        names = parent and _M.app_names(parent) or {}
    end
    local s = _M.slot(app.name, names, range.blocks)
    local uid, gid = range.uid + s * _M.BLOCK, range.gid + s * _M.BLOCK
    return { uid = uid, gid = gid, size = _M.BLOCK,
        handler_uid = uid + _M.CONTAINER_USER, handler_gid = gid + _M.CONTAINER_USER }
end


return _M
