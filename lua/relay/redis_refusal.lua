--- An error reply from Redis, told to a person: `redis refused: <reply>;
-- <what to do>`. The reply is kept as Redis sent it (it names the command's
-- problem); the advice names the setting that fixes the usual cause.
local _M = {}

-- The reply's first word → the fix. Cluster redirections only reach a
-- person when following them failed.
local ADVICE = {
    NOAUTH = "put the password in REDIS_URL",
    WRONGPASS = "check the user and password in REDIS_URL",
    NOPERM = "grant the Redis user the commands and keys the README's ACL lines list",
    WRONGTYPE = "REDIS_STREAM names a key that is not a stream",
    READONLY = "REDIS_URL points at a replica; point it at the primary",
    MASTERDOWN = "the replica lost its primary; point REDIS_URL at the primary",
    MOVED = "the stream lives on another cluster node",
    ASK = "the stream's slot is being migrated; retry",
    TRYAGAIN = "the stream's slot is being migrated; retry",
    CROSSSLOT = "put the stream name in a hash tag: REDIS_STREAM='{orders}'",
    CLUSTERDOWN = "the cluster is down",
    LOADING = "redis is loading its data set; retry",
    BUSY = "a script is running on redis; retry",
    OOM = "redis is out of memory (maxmemory)",
}


--- The reply's first word (NOAUTH, WRONGTYPE, MOVED…), or nil.
function _M.code(err)
    return tostring(err):match("^(%u+)")
end


--- "redis refused: <reply>; <advice>" (without advice for a reply it has
-- none for).
function _M.describe(err)
    local text = tostring(err)
    local advice = ADVICE[_M.code(text) or ""]
    return "redis refused: " .. text .. (advice and ("; " .. advice) or "")
end


return _M
