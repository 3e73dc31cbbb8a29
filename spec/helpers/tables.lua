--- Table helpers for specs.
--   local tables = require("helpers.tables")
--   local c = tables.merged(constants, { heartbeat_every_ms = 20 })  -- a copy with overrides
local _M = {}


--- A new table with the fields of each argument, later ones winning (nil arguments skipped).
function _M.merged(...)
    local out = {}
    for i = 1, select("#", ...) do
        for k, v in pairs(select(i, ...) or {}) do
            out[k] = v
        end
    end
    return out
end

return _M
