--- relay app pause APP / relay app resume APP: the fleet-wide paused set
-- (the set relay:<stream>:paused). A paused app is unavailable: its matched
-- invocations stay pending until it is resumed.
local apps = require("relay.apps")
local config = require("relay.config")
local exit = require("relay.exit")
local keys = require("relay.keys")
local known_apps = require("relay.known_apps")
local redis = require("relay.redis")

local _M = {}


--- Also relay app resume's arguments.
function _M.configure(cmd)
    cmd:argument("app", "The app.")
    cmd:flag("--force", "Also an app no running replica has reported and --apps lacks.")
    config.add_flags(cmd, { "redis_url", "stream", "apps" })
end


local function redis_now_ms(client)
    local t = exit.or_env(client:call("TIME"))
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end


--- A typo must not pause nothing while the operator thinks the app is
-- paused: the app must be one a replica reported lately, or one of --apps.
local function check_known(client, cfg, k, app)
    local known, err = known_apps.knows(client, k.apps, app, redis_now_ms(client))
    if known == nil then
        exit.env(err)
    end
    if known or apps.load_app(cfg.apps, app) then
        return
    end
    exit.negative(string.format("no replica runs an app %s and %s has none (a typo?); "
        .. "--force to do it anyway", app, cfg.apps))
end


--- Adds (pause) or removes (resume) args.app; exits 2 on a bad name, 1 on
-- an app nobody knows (unless --force).
function _M.set_paused(args, paused)
    if not apps.valid_name(args.app) then
        exit.usage("invalid app name " .. tostring(args.app) .. " (app names match " .. apps.APP_NAME_RULE .. ")")
    end
    local cfg = config.load_or_exit(args)
    local client = redis.connect_cli(cfg)
    local k = keys.for_stream(cfg.stream)
    local key = k.paused
    if not args.force and not (not paused and client:call("SISMEMBER", key, args.app) == 1) then
        check_known(client, cfg, k, args.app)
    end
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
