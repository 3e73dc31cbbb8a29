--- relay app resume APP: see relay.cmd.app_pause.
local _M = {}


function _M.execute(args)
    return require("relay.cmd.app_pause").set_paused(args, false)
end


return _M
