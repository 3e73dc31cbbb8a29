--- Redis Cluster, as Relay meets it: a stream and all of its keys live in
-- one slot (the stream name's hash tag, which every `relay:<stream>:` key
-- repeats), so Relay talks to that slot's owner only. This module tells a
-- cluster from a standalone server, refuses a stream name without a hash
-- tag, and finds the owner of the stream's slot. relay.redis_redirect
-- follows the owner when the slot moves.
local _M = {}


--- The stream name's hash tag (the text between its first "{" and the next
-- "}", when not empty), or nil. Redis hashes only that part of a key, and
-- "relay:" holds no brace, so every key of the stream shares its slot.
function _M.hash_tag(stream)
    return stream:match("^[^{]*{([^}]+)}")
end


local function untagged(stream)
    return string.format("redis runs in cluster mode and REDIS_STREAM=%s has no hash tag, so the stream and "
        .. "Relay's keys for it would live in different slots; name it with one: REDIS_STREAM='{%s}'",
        stream, stream)
end


local function same_node(addr, node)
    return addr.path == nil and addr.host == node.host and addr.port == node.port
end


--- addr (a parsed REDIS_URL) moved to another node: same credentials, and
-- TLS again for rediss:// (a redirect must never fall back to plaintext).
function _M.at(addr, node)
    return { host = node.host, port = node.port, user = addr.user, password = addr.password, db = 0, tls = addr.tls }
end


--- "MOVED 3999 127.0.0.1:6381" → "MOVED", { host, port }; "TRYAGAIN …" → "TRYAGAIN".
function _M.redirection(err)
    local code, host, port = tostring(err):match("^(%u+) %d+ (.+):(%d+)$")
    if code == "MOVED" or code == "ASK" then
        return code, { host = host, port = tonumber(port) }
    end
    return tostring(err):match("^(TRYAGAIN)")
end


local function owner_of(client, stream)
    local slot, err, kind = client:call("CLUSTER", "KEYSLOT", stream)
    if slot == nil then
        return nil, err, kind
    end
    local ranges
    ranges, err, kind = client:call("CLUSTER", "SLOTS")
    if ranges == nil then
        return nil, err, kind
    end
    for _, range in ipairs(ranges) do
        local node = range[3]
        if slot >= range[1] and slot <= range[2] and type(node) == "table" then
            return { host = node[1], port = tonumber(node[2]), slot = slot }
        end
    end
    return nil, string.format("CLUSTERDOWN no node serves slot %d of REDIS_STREAM", slot), "reply"
end


--- Where the stream lives, asked of a connected client (async or blocking).
-- @return false (not a cluster, or not allowed to ask: the server's own
--   replies will tell) | node { host, port, slot, here = bool }
--   | nil, err, kind (kind "config": a setting must change)
function _M.locate(client, addr, stream)
    local info, err, kind = client:call("INFO", "cluster")
    if info == nil then
        if kind == "reply" and tostring(err):find("^NOPERM") then
            return false  -- a user without INFO (a producer): as before, standalone
        end
        return nil, err, kind
    end
    if not tostring(info):find("cluster_enabled:1", 1, true) then
        return false
    end
    if not _M.hash_tag(stream) then
        return nil, untagged(stream), "config"
    end
    if addr.db ~= 0 then
        return nil, "redis runs in cluster mode, which has database 0 only; drop /" .. addr.db
            .. " from REDIS_URL", "config"
    end
    local node
    node, err, kind = owner_of(client, stream)
    if not node then
        return nil, err, kind
    end
    node.here = same_node(addr, node)
    return node
end


return _M
