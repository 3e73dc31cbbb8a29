--- relay run: the daemon.
local config = require("relay.config")

local _M = {}


function _M.configure(cmd)
    config.add_flags(cmd)
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    return require("relay.worker").run(cfg)
end


return _M
