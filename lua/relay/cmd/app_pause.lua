--- relay app pause APP / relay app resume APP: the fleet-wide paused set
-- (the set relay:<stream>:paused). A paused app is unavailable: its matched
-- invocations stay pending until it is resumed.
local apps = require("relay.apps")
local config = require("relay.config")
local exit = require("relay.exit")
local keys = require("relay.keys")
local redis = require("relay.redis")

local _M = {}


--- Also relay app resume's arguments.
function _M.configure(cmd)
    cmd:argument("app", "The app.")
    config.add_flags(cmd, { "redis_url", "stream", "apps" })
end


--- Adds (pause) or removes (resume) args.app; exits 2 on a bad name.
function _M.set_paused(args, paused)
    if not apps.valid_name(args.app) then
        exit.usage("invalid app name " .. tostring(args.app) .. " (app names match " .. apps.APP_NAME_RULE .. ")")
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
