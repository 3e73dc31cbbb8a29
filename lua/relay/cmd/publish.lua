--- relay publish JSON: XADD an external event, byte for byte, as `event`.
local config = require("relay.config")
local exit = require("relay.exit")
local redis = require("relay.redis")

local _M = {}


function _M.configure(cmd)
    cmd:argument("json", "The event: a JSON object, or - to read it from stdin.")
    -- the event argument is args.json already
    cmd:flag("--json", 'Print {"id":…} instead of the bare id.'):target("as_json")
    config.add_flags(cmd, { "redis_url", "stream" })
end


local function read_event(arg)
    if arg ~= "-" then
        return arg
    end
    return io.stdin:read("*a") or ""
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local text = read_event(args.json)
    local ok, reason = require("relay.core.matcher").validate_object(text, cfg.max_event_bytes)
    if not ok then
        exit.usage("not a valid event: " .. reason)
    end
    local client = redis.connect_cli(cfg)
    local id, xadd_err = client:call("XADD", cfg.stream, "*", "event", text)
    client:close()
    if not id then
        exit.env("XADD to " .. cfg.stream .. " failed: " .. xadd_err)
    end
    print(args.as_json and ('{"id":"' .. id .. '"}') or id)
    return 0
end


return _M
