--- Fresh temporary directories for specs, made with mkdtemp: created in one
-- step under an unpredictable name, mode 0700, so no other process can have
-- made, replaced or redirected them first (os.tmpname, then remove, then
-- mkdir leaves a window for exactly that).
--   local tmp = require("helpers.tmp")
--   local dir = tmp.mkdtemp("relay-state-")        -- /tmp/relay-state-Ab3xYz, 0700
--   local dir = tmp.mkdtemp("relay-state-", 493)   -- the same, then 0755
--   ...; fs.rm_rf(dir)
local fs = require("relay.fs")

local _M = {}


--- A new directory named prefix plus six random characters (under $TMPDIR,
-- or /tmp, unless prefix holds a '/'). mode, if given, replaces 0700 once
-- the directory exists: a handler's container runs in a user namespace
-- whose uids are not ours, so a tree it is started from must be searchable
-- by others. Raises if the directory cannot be made.
function _M.mkdtemp(prefix, mode)
    local dir = assert(fs.mkdtemp(prefix or "relay-spec-"))
    if mode then
        assert(fs.chmod(dir, mode))
    end
    return dir
end


return _M
