--- Throw-away TLS material and a TLS-only redis-server, for the TLS specs.
--   local pki = tls.pki()            -- CA, server (localhost, 127.0.0.1, redis.test) and client certificates
--   local server = tls.server(pki, { auth_clients = "yes" })
--   local args, url = tls.redis_args(pki)  -- for helpers.world's redis_args
--   server.url                       -- "rediss://localhost:PORT/0"
--   server:env({ RELAY_REDIS_CA = pki.ca })   -- REDIS_URL plus the given variables
--   server.plain                     -- a helpers.redis-like handle on its unix socket (redis-cli, cfg)
--   server:stop(); pki:remove()
-- Made with openssl(1) in a temp dir; nothing outside it is touched.
local redis_server = require("helpers.redis")
local tmp = require("helpers.tmp")

local _M = {}


local function sh(cmd)
    local ok = os.execute(cmd .. " >/dev/null 2>&1")
    return ok == 0 or ok == true
end


local function run(cmd)
    assert(sh(cmd), "failed: " .. cmd)
end


--- A certificate and key signed by the CA at ca (a path without .crt):
-- a server's with subjectAltName sans, else a client's.
local function issue(dir, name, ca, subject, sans)
    local key, csr, crt = dir .. "/" .. name .. ".key", dir .. "/" .. name .. ".csr", dir .. "/" .. name .. ".crt"
    run(string.format("openssl req -new -newkey rsa:2048 -nodes -keyout %s -out %s -subj '/CN=%s'", key, csr, subject))
    local ext = dir .. "/" .. name .. ".ext"
    local f = assert(io.open(ext, "w"))
    f:write(sans and ("subjectAltName=" .. sans .. "\n") or "extendedKeyUsage=clientAuth\n")
    f:close()
    run(string.format("openssl x509 -req -in %s -CA %s.crt -CAkey %s.key -CAcreateserial -days 2 -out %s -extfile %s",
        csr, ca, ca, crt, ext))
    return crt, key
end


local function make_ca(dir, name)
    local base = dir .. "/" .. name
    run(string.format("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout %s.key -out %s.crt -subj '/CN=%s'",
        base, base, name))
    return base .. ".crt"
end


--- pki.ca, pki.server_cert/server_key, pki.client_cert/client_key, and
-- pki.other_ca: a CA that signed nothing here (a wrong RELAY_REDIS_CA).
function _M.pki()
    local dir = tmp.mkdtemp("relay-pki-", 493)
    local pki = { dir = dir }
    pki.ca = make_ca(dir, "ca")
    pki.other_ca = make_ca(dir, "other-ca")
    pki.server_cert, pki.server_key = issue(dir, "server", dir .. "/ca", "redis server",
        "DNS:localhost,DNS:redis.test,IP:127.0.0.1")
    pki.client_cert, pki.client_key = issue(dir, "client", dir .. "/ca", "relay client")
    function pki.remove()
        sh("rm -rf " .. dir)
    end
    return pki
end


--- A free TCP port on 127.0.0.1, picked by the kernel.
local function free_port()
    local p = io.popen("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); " ..
        "print(s.getsockname()[1]); s.close()'")
    local port = tonumber(p:read("*l"))
    p:close()
    return assert(port, "no free port")
end


--- redis-server arguments for TLS on a free TCP port of 127.0.0.1 (no
-- plaintext TCP port; the helpers' unix socket stays plaintext), and the
-- rediss:// URL of it. auth_clients: "no" (default), "optional" or "yes".
function _M.redis_args(pki, auth_clients)
    local port = free_port()
    local args = string.format(
        "--tls-port %d --bind 127.0.0.1 --tls-cert-file %s --tls-key-file %s --tls-ca-cert-file %s " ..
        "--tls-auth-clients %s",
        port, pki.server_cert, pki.server_key, pki.ca, auth_clients or "no")
    return args, string.format("rediss://localhost:%d/0", port), port
end


--- A redis-server with TLS (redis_args) and its plaintext unix socket
-- (self.plain, a helpers.redis server) for the specs' own checks.
-- opts.auth_clients as redis_args.
function _M.server(pki, opts)
    opts = opts or {}
    local args, url, port = _M.redis_args(pki, opts.auth_clients)
    local plain = redis_server.start(args)
    local self = { plain = plain, port = port, url = url }
    function self.env(_, vars)
        local env = { REDIS_URL = self.url }
        for k, v in pairs(vars or {}) do
            env[k] = v
        end
        return env
    end
    function self.stop()
        plain:stop()
    end
    return self
end


return _M
