--- relay run: the daemon.
local config = require("relay.config")
local exit = require("relay.exit")

local _M = {}


function _M.configure(cmd)
    config.add_flags(cmd)
end


function _M.execute(args)
    local cfg, err = config.load(nil, args)
    if not cfg then
        exit.env(err)
    end
    return require("relay.worker").run(cfg)
end


return _M
