--- Which apps the fleet runs: every daemon records the names of its valid
-- apps in the hash relay:<stream>:apps (app -> last time seen, ms), after
-- each reload and once a minute, so that `relay app pause` can tell a typo
-- from an app some replica has, without a daemon to ask.
local _M = {}

-- An app no live daemon has mentioned for this long is no longer known.
_M.HORIZON_MS = 10 * 60 * 1000


--- Records names (a list) as seen at now_ms. true | nil, err.
function _M.record(client, key, names, now_ms)
    if #names == 0 then
        return true
    end
    local args = { "HSET", key }
    for _, name in ipairs(names) do
        args[#args + 1] = name
        args[#args + 1] = tostring(now_ms)
    end
    local ok, err = client:call(unpack(args))
    if ok == nil then
        return nil, err
    end
    return true
end


--- Whether some daemon mentioned app within the horizon. bool | nil, err.
function _M.knows(client, key, app, now_ms)
    local seen, err = client:call("HGET", key, app)
    if seen == nil then
        return nil, err
    end
    local ms = tonumber(seen)
    return ms ~= nil and now_ms - ms <= _M.HORIZON_MS
end


return _M
