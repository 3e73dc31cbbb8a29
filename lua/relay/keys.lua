--- Relay's Redis key names, built in one place: every other module gets
-- its keys here, and the scripts that append ids themselves get their
-- prefixes here.
local _M = {}


--- All keys of one stream's namespace.
function _M.for_stream(stream)
    local base = "relay:" .. stream .. ":"
    local inv_prefix, instance_prefix = base .. "inv:", base .. "instance:"
    -- An entry a daemon took from a pending list and has not classified yet
    -- (a count of such reads that ended in a crash: relay.scripts.take_pending).
    local handling_prefix = base .. "handling:"
    return {
        dlq = base .. "dlq",
        paused = base .. "paused",
        -- Hash: app -> when a daemon last said it runs it (relay.known_apps).
        apps = base .. "apps",
        stats = base .. "stats",
        -- Sorted set of the entry ids Relay's own publishers wrote (score:
        -- the id's milliseconds); only those may carry reserved fields.
        trusted = base .. "trusted",
        inv_prefix = inv_prefix,
        instance_prefix = instance_prefix,
        handling_prefix = handling_prefix,
        handling = function(message_id) return handling_prefix .. message_id end,
        inv = function(message_id) return inv_prefix .. message_id end,
        sched = function(app, name) return base .. "sched:" .. app .. "/" .. name end,
        consumer = function(name) return base .. "consumer:" .. name end,
        instance = function(id) return instance_prefix .. id end,
        -- Set (with a TTL) once a daemon on the instance's host found it
        -- dead and removed its containers: its attempts are lost at once.
        dead = function(id) return base .. "dead:" .. id end,
    }
end


return _M
