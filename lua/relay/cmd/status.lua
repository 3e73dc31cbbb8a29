--- relay status: the stream, the group, its consumers, the DLQ, the fleet
-- counters and the paused apps, as text or one JSON object. Entries trimmed
-- before the group read them are told apart from the lag they sit in.
local cjson = require("cjson")
local config = require("relay.config")
local exit = require("relay.exit")
local jsonfmt = require("relay.jsonfmt")
local redis = require("relay.redis")
local refusal = require("relay.redis_refusal")
local keys = require("relay.keys")
local scripts = require("relay.scripts")

local _M = {}


function _M.configure(cmd)
    cmd:flag("--json", "One JSON object.")
    config.add_flags(cmd, { "redis_url", "stream", "group" })
end


--- value, or an exit 2: Redis unreachable, or an error reply told as
-- `redis refused: …` with its fix. A status built from half the answers
-- would mislead (a NOAUTH is no missing group).
local function must(value, err, kind)
    if value == nil then
        exit.env(kind == "reply" and refusal.describe(err) or tostring(err))
    end
    return value
end


local function group_info(client, cfg)
    local groups, err, kind = client:call("XINFO", "GROUPS", cfg.stream)
    if groups == nil and kind == "reply" and tostring(err):find("^ERR no such key") then
        return nil  -- no stream yet, so no group either
    end
    must(groups, err, kind)
    for _, flat in ipairs(groups) do
        local g = redis.pairs_to_table(flat)
        if g.name == cfg.group then
            return g
        end
    end
    return nil
end


--- The group's consumers (relay.consumers): a dead one is removed by a
-- live replica once it has been idle past the bound docs/lifecycle.md gives.
local function consumers(client, cfg, k)
    return must(require("relay.consumers").list(client, cfg.stream, cfg.group, k))
end


--- How much of the group's lag is entries trimmed before delivery that no
-- daemon has counted yet (relay.scripts.count_trimmed; a daemon counts them
-- within a minute and corrects the lag).
local function lag_trimmed(client, cfg, k)
    local gone = must(redis.eval(client, scripts.count_trimmed, { cfg.stream, k.stats }, { cfg.group, "peek" }))
    return tonumber(gone) or 0
end


local function counter(client, k, name)
    local value = must(client:call("HGET", k.stats, name))
    return tonumber(value ~= redis.null and value or 0)
end


local function collect(client, cfg)
    local k = keys.for_stream(cfg.stream)
    local status = { stream = cfg.stream, group = cfg.group }
    status.length = must(client:call("XLEN", cfg.stream))
    local g = group_info(client, cfg)
    status.group_exists = g ~= nil
    if g then
        status.lag = g.lag ~= redis.null and g.lag or cjson.null
        status.pending = g.pending
        status.last_delivered_id = g["last-delivered-id"]
        status.lag_trimmed = lag_trimmed(client, cfg, k)
        status.consumers = consumers(client, cfg, k)
    else
        -- Same keys either way: null where the group cannot say yet.
        status.lag, status.pending, status.last_delivered_id = cjson.null, cjson.null, cjson.null
        status.lag_trimmed = 0
        status.consumers = {}
    end
    status.dlq_length = must(client:call("XLEN", k.dlq))
    status.missing_payload_total = counter(client, k, "missing_payload_total")
    status.trimmed_undelivered_total = counter(client, k, "trimmed_undelivered_total") + status.lag_trimmed
    local paused = must(client:call("SMEMBERS", k.paused))
    table.sort(paused)
    status.paused_apps = paused
    return status
end


local function print_text(s)
    print(string.format("stream\t%s\tlength %d", s.stream, s.length))
    if s.group_exists then
        local lag = s.lag == cjson.null and "unknown" or tostring(s.lag)
        if s.lag_trimmed > 0 then
            lag = string.format("%s (%d trimmed before delivery)", lag, s.lag_trimmed)
        end
        print(string.format("group\t%s\tlag %s\tpending %d\tlast-delivered %s", s.group, lag, s.pending,
            s.last_delivered_id))
    else
        print(string.format("group\t%s\tnot created yet", s.group))
    end
    for _, c in ipairs(s.consumers) do
        print(string.format("consumer\t%s\tpending %d\tidle %.1fs\t%s", c.name, c.pending, c.idle_ms / 1000,
            c.alive and "alive" or "dead"))
    end
    print(string.format("dlq\tlength %d", s.dlq_length))
    print(string.format("missing_payload_total\t%d", s.missing_payload_total))
    print(string.format("trimmed_undelivered_total\t%d", s.trimmed_undelivered_total))
    print("paused\t" .. (#s.paused_apps > 0 and table.concat(s.paused_apps, ",") or "-"))
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local client = redis.connect_cli(cfg)
    local status = collect(client, cfg)
    client:close()
    if args.json then
        print(jsonfmt.encode(status, { "paused_apps", "consumers" }))
    else
        print_text(status)
    end
    return 0
end


return _M
