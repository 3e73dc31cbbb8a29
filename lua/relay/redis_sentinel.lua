--- Redis Sentinel, as Relay meets it: REDIS_URL names the Sentinels and
-- the primary they watch (redis+sentinel://…/<master>); Relay asks them
-- where the primary is, and checks with ROLE that the server it reached is
-- the primary still (a Sentinel may answer with the old one for a moment
-- during a failover). relay.redis_failover follows the primary afterwards.
local loop = require("relay.core.loop")

local _M = {}

local TRIES = 10  -- discoveries before giving up: a failover takes seconds
local RETRY_S = 0.5


-- The node a Sentinel names for the master, or nil, err.
local function ask(client, master)
    local reply, err = client:call("SENTINEL", "get-master-addr-by-name", master)
    if type(reply) == "table" and reply[1] then
        return { host = reply[1], port = tonumber(reply[2]) }
    end
    return nil, reply == nil and err or ("no primary named " .. master)
end


-- The first Sentinel that names the primary: node, its open client | nil, err.
local function first_answer(addr, connect)
    local errors = {}
    for _, s in ipairs(addr.sentinels) do
        local client, err = connect({ host = s.host, port = s.port, db = 0 })
        if client then
            local node
            node, err = ask(client, addr.master)
            if node then
                return node, client
            end
            client:close()
        end
        errors[#errors + 1] = s.host .. ":" .. s.port .. ": " .. tostring(err)
    end
    return nil, "no sentinel named the primary " .. addr.master .. " (" .. table.concat(errors, "; ") .. ")"
end


--- The primary's { host, port } from the first Sentinel that names it.
-- connect(addr) → client | nil, err (blocking or async: the same call API).
-- @return node | nil, err
function _M.primary(addr, connect)
    local node, client_or_err = first_answer(addr, connect)
    if not node then
        return nil, client_or_err
    end
    client_or_err:close()
    return node
end


--- For a long-lived watcher: primary() on one kept connection to the
-- Sentinel that answered last, so asking every few seconds opens no new
-- connection each time. When that Sentinel fails to answer, the ask goes
-- round them all again.
local Asker = {}
Asker.__index = Asker

function _M.asker(addr, connect)
    return setmetatable({ addr = addr, connect = connect }, Asker)
end


function Asker:primary()
    local kept = self.client
    if kept then
        local node = ask(kept, self.addr.master)
        if node then
            return node
        end
        if self.client == kept then -- else close() already closed it
            kept:close()
            self.client = nil
        end
    end
    local node, client_or_err = first_answer(self.addr, self.connect)
    if not node then
        return nil, client_or_err
    end
    if self.closed then -- closed while it asked
        client_or_err:close()
    else
        self.client = client_or_err
    end
    return node
end


function Asker:close()
    self.closed = true
    if self.client then
        self.client:close()
        self.client = nil
    end
end


--- The primary's address: the node, with the URL's credentials, database
-- and TLS settings (rediss+sentinel://).
function _M.at(addr, node)
    return { host = node.host, port = node.port, user = addr.user, password = addr.password, db = addr.db,
        tls = addr.tls }
end


--- Whether the server behind client is a primary (ROLE).
-- @return true | false | nil, err, kind
function _M.is_primary(client)
    local role, err, kind = client:call("ROLE")
    if type(role) ~= "table" then
        return nil, err, kind
    end
    return role[1] == "master"
end


--- A client on the primary, found through the Sentinels and checked with
-- ROLE, retried while a failover settles. connect(addr) as above.
-- @return client, node | nil, err, kind
function _M.connect_primary(addr, connect)
    local err, kind = "no try", "io"
    for try = 1, TRIES do
        local node, client
        node, err = _M.primary(addr, connect)
        if node then
            client, err = connect(_M.at(addr, node))
        end
        if client then
            local primary
            primary, err, kind = _M.is_primary(client)
            if primary then
                return client, node
            end
            client:close()
            if primary == false then
                err, kind = string.format("%s:%d is not the primary (yet)", node.host, node.port), "io"
            elseif kind == "reply" then
                return nil, err, kind  -- NOAUTH and the like: waiting will not help
            end
        end
        if try < TRIES then
            loop.sleep(RETRY_S)
        end
    end
    return nil, err, kind or "io"
end


return _M
