--- What the clients that wrap a relay.core.redis async client and may
-- replace it (relay.redis_failover follows a Sentinel primary,
-- relay.redis_redirect a Cluster slot's owner) share: call and
-- call_timeout go through the wrapper's send(method, ...), the rest to the
-- current inner client, reconnects counted across the replaced ones
-- (self.retired_reconnects).
local _M = {}


function _M.install(Client)
    function Client:call(...)
        return self:send("call", ...)
    end

    function Client:call_timeout(...)
        return self:send("call_timeout", ...)
    end

    function Client:connected()
        return self.inner:connected()
    end

    function Client:info()
        local info = {}
        for k, v in pairs(self.inner:info()) do
            info[k] = v
        end
        info.reconnects = (info.reconnects or 0) + self.retired_reconnects
        return info
    end
end


return _M
