--- relay app pause APP / relay app resume APP: the fleet-wide paused set
-- (relay.md section 5). A paused app is unavailable: its matched
-- invocations stay pending until it is resumed.
local config = require("relay.config")
local exit = require("relay.exit")
local keys = require("relay.keys")
local redis = require("relay.redis")

local _M = {}

local APP_NAME = "^[a-z0-9][a-z0-9_-]*$"


--- Adds (pause) or removes (resume) args.app; exits 2 on a bad name.
function _M.set_paused(args, paused)
    if not tostring(args.app):find(APP_NAME) then
        exit.usage("invalid app name " .. tostring(args.app) .. " (app names match [a-z0-9][a-z0-9_-]*)")
    end
    local cfg = config.load_or_exit(args)
    local client = redis.connect_cli(cfg)
    local key = keys.for_stream(cfg.stream).paused
    local changed, cerr = client:call(paused and "SADD" or "SREM", key, args.app)
    client:close()
    if changed == nil then
        exit.env(cerr)
    end
    print(string.format("%s %s%s", args.app, paused and "paused" or "resumed",
        changed == 0 and " (no change)" or ""))
    return 0
end


function _M.execute(args)
    return _M.set_paused(args, true)
end


return _M
