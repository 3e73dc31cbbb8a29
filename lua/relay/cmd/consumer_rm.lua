--- relay consumer rm NAME: removes a dead consumer from the group. Its
-- pending entries are claimed by a live consumer first, idle enough for the
-- next reclaim sweep to retry them, so nothing leaves every PEL.
local config = require("relay.config")
local constants = require("relay.constants")
local consumers = require("relay.consumers")
local exit = require("relay.exit")
local keys = require("relay.keys")
local redis = require("relay.redis")
local refusal = require("relay.redis_refusal")

local _M = {}


function _M.configure(cmd)
    cmd:argument("name", "The consumer name.")
    config.add_flags(cmd, { "redis_url", "stream", "group" })
end


local function find(list, name)
    for _, c in ipairs(list) do
        if c.name == name then
            return c
        end
    end
    return nil
end


--- A live consumer other than `name`, to take over its pending entries.
local function heir_for(list, name)
    for _, c in ipairs(list) do
        if c.alive and c.name ~= name then
            return c.name
        end
    end
    return nil
end


local function checked_target(list, cfg, name)
    local target = find(list, name)
    if not target then
        exit.negative(string.format("no consumer %s in group %s of stream %s", name, cfg.group, cfg.stream))
    end
    if target.alive then
        exit.negative(name .. " is alive: a running daemon holds it; stop that daemon first")
    end
    local heir = heir_for(list, name)
    if target.pending > 0 and not heir then
        exit.negative(string.format("%s has %d pending entries and no live consumer to take them; "
            .. "start a replica first", name, target.pending))
    end
    return target, heir
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local client = redis.connect_cli(cfg)
    local k = keys.for_stream(cfg.stream)
    local list, err, kind = consumers.list(client, cfg.stream, cfg.group, k)
    if not list then
        exit.env(kind == "reply" and refusal.describe(err) or ("cannot list the consumers: " .. tostring(err)))
    end
    local _, heir = checked_target(list, cfg, args.name)
    -- without pending entries nothing is claimed: any other name will do
    local result, handed = consumers.remove(client, cfg.stream, cfg.group, k, args.name, heir or "-",
        constants.min_pending_idle_ms)
    client:close()
    if result == nil then
        exit.env("cannot remove " .. args.name .. ": " .. tostring(handed))
    elseif result == "alive" then
        exit.negative(args.name .. " became alive: a daemon took the name; nothing removed")
    end
    if handed > 0 then
        print(string.format("removed %s; %d pending entries handed to %s", args.name, handed, heir))
    else
        print("removed " .. args.name)
    end
    return 0
end


return _M
