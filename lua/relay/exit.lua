--- Tagged exits for CLI commands: raise one, and relay.cli prints
-- `relay: <message>` on stderr and exits with the code (docs/errors.md).
local _M = {}

local EXIT_TAG = {}


local function raise(code, message)
    error(setmetatable({ code = code, message = message }, EXIT_TAG), 0)
end


--- A usage error: bad flags or arguments (exit 2).
function _M.usage(message)
    raise(2, message)
end


--- An environment error: bad configuration, Redis unreachable (exit 2).
function _M.env(message)
    raise(2, message)
end


--- value, or when it is nil an environment error with err: for the
-- `value, err` returns of the calls a command cannot go on without.
function _M.or_env(value, err)
    if value == nil then
        _M.env(err)
    end
    return value
end


--- A negative result: no match, not found, invalid app (exit 1).
function _M.negative(message)
    raise(1, message)
end


--- Whether err was raised by this module.
function _M.is_exit(err)
    return getmetatable(err) == EXIT_TAG
end


return _M
