--- Redis helpers over relay.core.redis: connecting from a config, running
-- server-side scripts with EVALSHA that survive a script-cache flush or a
-- Redis restart (NOSCRIPT → SCRIPT LOAD → retry once), and logging the
-- daemon's Redis outages.
local cluster = require("relay.redis_cluster")
local core = require("relay.core.redis")
local exit = require("relay.exit")
local failover = require("relay.redis_failover")
local log = require("relay.log")
local loop = require("relay.core.loop")
local redirect = require("relay.redis_redirect")
local refusal = require("relay.redis_refusal")
local sentinel = require("relay.redis_sentinel")

local _M = {}

_M.null = core.null
_M.stream_batch = core.stream_batch  -- a first command word: the reply of a stream read as a batch

local CONNECT_TIMEOUT_S = 5
local OUTAGE = "redis"  -- the log.failing name of an outage
local WATCH_S = 0.25  -- how often the outage watcher looks (no command: the clients' own state)
local watching = false

local script_sha = {}  -- script text → sha1, filled by SCRIPT LOAD


local function describe(cfg)
    return cfg.redis_url_text or "redis"
end


--- A blocking client on the node that serves the stream (the one REDIS_URL
-- names, the primary the Sentinels name, or on a Redis Cluster the owner
-- of the stream's slot). @return client | nil, err, kind ("config": a setting
-- must change, "reply": Redis refused, "io": unreachable)
function _M.connect_blocking(cfg, timeout_s)
    if cfg.redis_url.sentinels then
        local client, err, kind = sentinel.connect_primary(cfg.redis_url, function(addr)
            return core.connect_blocking(addr, timeout_s)
        end)
        if not client then
            return nil, kind == "reply" and err or (tostring(err) .. " (REDIS_URL=" .. describe(cfg) .. ")"), kind
        end
        return client
    end
    local client, err = core.connect_blocking(cfg.redis_url, timeout_s)
    if not client then
        return nil, err .. " (REDIS_URL=" .. describe(cfg) .. ")", "io"
    end
    local node, lerr, kind = cluster.locate(client, cfg.redis_url, cfg.stream)
    if node == nil then
        client:close()
        return nil, lerr, kind
    end
    if node and not node.here then
        client:close()
        client, err = core.connect_blocking(cluster.at(cfg.redis_url, node), timeout_s)
        if not client then
            return nil, string.format("%s (the cluster node serving REDIS_STREAM; REDIS_URL=%s)", err, describe(cfg)),
                "io"
        end
    end
    return client
end


--- connect_blocking for a short CLI command: exits 2 naming the address
-- when Redis cannot be reached within 5 s, and naming the fix when it
-- refuses (a stream name without a hash tag on a cluster, NOAUTH…).
function _M.connect_cli(cfg)
    local client, err, kind = _M.connect_blocking(cfg, CONNECT_TIMEOUT_S)
    if not client then
        exit.env(kind == "reply" and refusal.describe(err) or tostring(err))
    end
    return client
end


local function connect_core(addr, cfg, max_reply_bytes)
    local client, err, failed = core.connect(addr, CONNECT_TIMEOUT_S, max_reply_bytes)
    if not client then
        if failed then
            failed:close()
        end
        return nil, string.format("cannot connect to redis (REDIS_URL=%s): %s", describe(cfg), err)
    end
    return client
end


--- An async client for the daemon; parks the task until connected. On a
-- Redis Cluster it is connected to the node serving the stream's slot and
-- follows that slot (relay.redis_redirect); a stream name without a hash
-- tag is refused there. With Sentinel it is connected to the primary and
-- follows it through failovers (relay.redis_failover).
-- max_reply_bytes (optional) caps what one reply may hold (relay.core.redis).
-- @return client | nil, err
function _M.connect(cfg, max_reply_bytes)
    if cfg.redis_url.sentinels then
        local client, err, kind = failover.connect(cfg.redis_url, function(addr)
            return connect_core(addr, cfg, max_reply_bytes)
        end)
        if not client then
            return nil, kind == "reply" and refusal.describe(err) or err
        end
        return client
    end
    local client, err = connect_core(cfg.redis_url, cfg, max_reply_bytes)
    if not client then
        return nil, err
    end
    local node, lerr, kind = cluster.locate(client, cfg.redis_url, cfg.stream)
    if node == nil then
        client:close()
        return nil, kind == "reply" and refusal.describe(lerr) or tostring(lerr)
    elseif not node then
        return client
    end
    local addr = cfg.redis_url
    if not node.here then
        client:close()
        addr = cluster.at(cfg.redis_url, node)
        client, err = connect_core(addr, cfg, max_reply_bytes)
        if not client then
            return nil, err
        end
    end
    return redirect.wrap(client, addr, function(to) return connect_core(to, cfg, max_reply_bytes) end)
end


--- Whether Redis is reachable (relay.core.redis.reachable: the async
-- clients' own view, no command). @return true | false, last error
_M.reachable = core.reachable


--- Logs the process's Redis outages, once: a WARN when the async clients
-- lose Redis, a "still failing" line per still_failing_log_ms while it
-- lasts, an INFO "reconnected to redis" when they are back. Meanwhile every
-- other task's failure is a DEBUG record only (log.set_outage): an outage
-- costs a few lines, not one per task and retry.
function _M.watch_outage()
    if watching then
        return
    end
    watching = true
    log.set_outage(OUTAGE, function() return not core.reachable() or log.is_failing(OUTAGE) end)
    loop.spawn(function()
        local looks = 0  -- consecutive looks that found Redis unreachable
        while true do
            local ok, err = core.reachable()
            looks = ok and 0 or looks + 1
            if ok then
                log.recovered(OUTAGE, "reconnected to redis")
            elseif looks >= 2 then  -- a blip within one look (a deliberate reset) is no outage
                log.failing(OUTAGE, "redis unreachable; retrying", { error = err })
            end
            loop.sleep(WATCH_S)
        end
    end)
end


local function load_script(client, script)
    local sha, err, kind = client:call("SCRIPT", "LOAD", script)
    if not sha then
        return nil, err, kind
    end
    script_sha[script] = sha
    return sha
end


--- Runs a Lua script on the server. keys and args are arrays.
-- @return value | nil, err, kind
function _M.eval(client, script, keys, args)
    local sha = script_sha[script]
    local err, kind
    if not sha then
        sha, err, kind = load_script(client, script)
        if not sha then
            return nil, err, kind
        end
    end
    local argv = { "EVALSHA", sha, #keys }
    for _, key in ipairs(keys) do
        argv[#argv + 1] = key
    end
    for _, arg in ipairs(args or {}) do
        argv[#argv + 1] = arg
    end
    local value
    value, err, kind = client:call(argv)
    if value == nil and kind == "reply" and err:find("^NOSCRIPT") then
        sha, err, kind = load_script(client, script)
        if not sha then
            return nil, err, kind
        end
        argv[2] = sha
        return client:call(argv)
    end
    return value, err, kind
end


--- Converts a flat Redis field/value array (a stream entry, HGETALL, an
-- XINFO record) to a table. A stream entry may repeat a field name; the
-- first occurrence wins, because the scripts read an entry's `event` that
-- way when they write a dead letter, and the handler must have run on the
-- same bytes the dead letter keeps.
function _M.pairs_to_table(flat)
    local t = {}
    for i = 1, #flat - 1, 2 do
        if t[flat[i]] == nil then
            t[flat[i]] = flat[i + 1]
        end
    end
    return t
end


return _M
