--- relay app resume APP: see relay.cmd.app_pause.
local app_pause = require("relay.cmd.app_pause")

local _M = {}

_M.configure = app_pause.configure


function _M.execute(args)
    return app_pause.set_paused(args, false)
end


return _M
