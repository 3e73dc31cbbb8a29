--- relay consumer ls: the group's consumers with their liveness.
local config = require("relay.config")
local consumers = require("relay.consumers")
local exit = require("relay.exit")
local keys = require("relay.keys")
local listing = require("relay.listing")
local log = require("relay.log")
local redis = require("relay.redis")
local refusal = require("relay.redis_refusal")
local text = require("relay.text")

local _M = {}


function _M.configure(cmd)
    cmd:flag("--json", "One JSON object per consumer.")
    listing.add_flags(cmd)
    config.add_flags(cmd, { "redis_url", "stream", "group" })
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local client = redis.connect_cli(cfg)
    local list, err, kind = consumers.list(client, cfg.stream, cfg.group, keys.for_stream(cfg.stream))
    client:close()
    if not list then
        if tostring(err):find("NOGROUP", 1, true) then
            list = {}  -- no group yet: no consumers
        else
            exit.env(kind == "reply" and refusal.describe(err) or ("cannot list the consumers: " .. tostring(err)))
        end
    end
    listing.header(args, { "NAME", "IDLE", "PENDING", "ALIVE" })
    for _, c in ipairs(list) do
        if args.json then
            print(string.format('{"name":%s,"idle_ms":%d,"pending":%d,"alive":%s}', log.json_quote(c.name),
                c.idle_ms, c.pending, tostring(c.alive)))
        else
            print(string.format("%s\t%.1fs\t%d\t%s", text.escape(c.name), c.idle_ms / 1000, c.pending,
                c.alive and "yes" or "no"))
        end
    end
    return 0
end


return _M
