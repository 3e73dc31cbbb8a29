--- Configuration: the environment variables (README, Configuration), overridden by flags.
-- Every value is validated strictly; a bad one is an error naming the
-- variable (or flag) and the value. Nothing silently falls back.
local duration = require("relay.duration")

local _M = {}

local MAX_CONCURRENCY_LIMIT = 1024
local MAX_EVENT_BYTES_LIMIT = 512 * 1024 * 1024
local SENTINEL_PORT = 26379  -- Redis Sentinel's own default

-- variable, flag, config key, default (a function for computed defaults), parser
local SETTINGS = {}
local SETTINGS_BY_KEY = {}


--- This machine's name: the default consumer name, and what the consumer
-- guard compares to tell a holder on this host from one elsewhere.
function _M.hostname()
    local f = io.open("/proc/sys/kernel/hostname", "r")
    local name = f and f:read("*l")
    if f then
        f:close()
    end
    return (name and name ~= "") and name or "localhost"
end


local function default_state_dir(env)
    local uid_file = io.open("/proc/self/status", "r")
    local uid
    if uid_file then
        for line in uid_file:lines() do
            uid = uid or line:match("^Uid:%s+(%d+)")
        end
        uid_file:close()
    end
    if uid == "0" then
        return "/run/relay"
    end
    local xdg = env.XDG_RUNTIME_DIR
    if xdg and xdg ~= "" then
        return xdg .. "/relay"
    end
    return "/tmp/relay-" .. (uid or "user")
end


local function percent_decode(s)
    return (s:gsub("%%(%x%x)", function(hex) return string.char(tonumber(hex, 16)) end))
end


local function parse_db(text)
    if not text:match("^%d+$") or tonumber(text) > 1000000 then
        return nil, "the database must be a whole number"
    end
    return tonumber(text)
end


--- user:password@ (or :password@) before an address: sets addr.user and
-- addr.password. @return true | nil, reason
local function parse_credentials(auth, addr)
    if auth == "" then
        return true
    end
    local user, password = auth:sub(1, -2):match("^([^:]*):(.*)$")
    if not user then
        return nil, "credentials must be user:password@ (or :password@)"
    end
    addr.user = user ~= "" and percent_decode(user) or nil
    addr.password = percent_decode(password)
    return true
end


--- A unix URL's query: db=N and password=P, joined by &.
local function parse_unix_query(query, addr)
    for pair in query:gmatch("[^&]+") do
        local name, value = pair:match("^([^=]+)=(.*)$")
        if name == "db" then
            local db, err = parse_db(value)
            if not db then
                return nil, err
            end
            addr.db = db
        elseif name == "password" then
            addr.password = percent_decode(value)
        else
            return nil, "the query parameters are db=N and password=P"
        end
    end
    return true
end


local function parse_unix_url(rest)
    -- A socket path holds no "@" in practice; a password may, percent-encoded.
    local auth, after = rest:match("^([^/]*@)(/.*)$")
    if not auth then
        auth, after = "", rest
    end
    local path, query = after:match("^(/[^?]*)%??(.*)$")
    if not path or path == "/" then
        return nil, "a unix URL needs an absolute socket path (unix://[user:password@]/path/to/sock)"
    end
    local addr = { path = path, db = 0 }
    local ok, err = parse_credentials(auth, addr)
    if ok then
        ok, err = parse_unix_query(query, addr)
    end
    if not ok then
        return nil, err
    end
    return addr
end


local function parse_tcp_url(rest)
    local auth, hostport, path = rest:match("^([^@/]*@)([^/]*)(.*)$")
    if not auth then
        auth, hostport, path = "", rest:match("^([^/]*)(/?.*)$")
    end
    local addr = { db = 0 }
    local ok, err = parse_credentials(auth, addr)
    if not ok then
        return nil, err
    end
    local host, port = hostport:match("^%[(.+)%]:?(%d*)$")
    if not host then
        host, port = hostport:match("^([^:]+):?(%d*)$")
    end
    if not host or host == "" or (hostport:find(":") and port == "" and not hostport:find("%]$")) then
        return nil, "expected host:port"
    end
    port = port ~= "" and tonumber(port) or 6379
    if port < 1 or port > 65535 then
        return nil, "the port must be 1..65535"
    end
    addr.host, addr.port = host, port
    if path ~= "" and path ~= "/" then
        addr.db, err = parse_db(path:sub(2))
        if not addr.db then
            return nil, err
        end
    end
    return addr
end


--- redis+sentinel://[user:password@]host:port[,host:port…]/<master>[/db]:
-- the Sentinels to ask, the name of the primary they watch, and the
-- credentials and database of the primary.
local function parse_sentinel_url(rest)
    local auth, hosts, master, db = rest:match("^([^@/]*@)([^/]*)/([^/]+)/?(%d*)$")
    if not auth then
        auth, hosts, master, db = "", rest:match("^([^/]*)/([^/]+)/?(%d*)$")
    end
    if not hosts or hosts == "" then
        return nil, "expected redis+sentinel://[user:password@]host:port[,host:port…]/master[/db]"
    end
    local addr = { sentinels = {}, master = percent_decode(master), db = 0 }
    local ok, err = parse_credentials(auth, addr)
    if not ok then
        return nil, err
    end
    for hostport in hosts:gmatch("[^,]+") do
        local host, port = hostport:match("^%[?([^%]]-)%]?:(%d+)$")
        host, port = host or hostport:match("^%[?([^%]:]+)%]?$"), tonumber(port or SENTINEL_PORT)
        if not host or port < 1 or port > 65535 then
            return nil, "expected host:port for each sentinel, not " .. hostport
        end
        addr.sentinels[#addr.sentinels + 1] = { host = host, port = port }
    end
    if db ~= "" then
        addr.db, err = parse_db(db)
        if not addr.db then
            return nil, err
        end
    end
    return addr
end


--- Parses a REDIS_URL into an address table for relay.core.redis (or, for
-- Sentinel, for relay.redis_sentinel to find the primary with). rediss://
-- marks the address with a tls table, which load() fills from the
-- RELAY_REDIS_* TLS variables.
-- @return {host, port, path, user, password, db, tls} | {sentinels, master, user,
--   password, db, tls} | nil, reason
-- Each scheme: its parser and whether it speaks TLS (to the primary, for
-- rediss+sentinel://: the Sentinels are asked in plaintext).
local SCHEMES = {
    { "unix", parse_unix_url, false },
    { "redis", parse_tcp_url, false },
    { "rediss", parse_tcp_url, true },
    { "redis+sentinel", parse_sentinel_url, false },
    { "rediss+sentinel", parse_sentinel_url, true },
}

function _M.parse_redis_url(url)
    for _, scheme in ipairs(SCHEMES) do
        local name, parse, tls = scheme[1], scheme[2], scheme[3]
        local rest = url:match("^" .. name:gsub("%+", "%%+") .. "://(.*)$")
        if rest then
            local addr, err = parse(rest)
            if addr and tls then
                addr.tls = {}
            end
            return addr, err
        end
    end
    return nil, "expected redis://[user:password@]host:port/db, rediss://… (TLS), "
        .. "unix://[user:password@]/path/to/sock[?db=N] or "
        .. "redis+sentinel://[user:password@]host:port[,host:port…]/master[/db] (rediss+sentinel:// for "
        .. "TLS to the primary)"
end


--- A Redis URL as messages may show it: the password replaced by ***
-- (user:password@, :password@, a password= query parameter), so that no
-- log line, error or journald record carries it.
function _M.mask_redis_url(url)
    local masked = url:gsub("^([%w+]+://[^:/@]*:)[^@]*@", "%1***@")
    masked = masked:gsub("([?&]password=)[^&]*", "%1***")
    return masked
end


local function parse_nonempty_name(value)
    if value == "" or value:find("[%s%c]") then
        return nil, "must be non-empty, without spaces or control characters"
    end
    return value
end


local function parse_consumer(value)
    if not value:match("^[A-Za-z0-9_.-]+$") then
        return nil, "must match [A-Za-z0-9_.-]+ (it names containers and keys)"
    end
    return value
end


local function parse_concurrency(value)
    local n = value:match("^%d+$") and tonumber(value)
    if not n or n < 1 or n > MAX_CONCURRENCY_LIMIT then
        return nil, "must be a whole number from 1 to " .. MAX_CONCURRENCY_LIMIT
    end
    return n
end


-- The accepted values of each parser made by one_of, for --help.
local CHOICES = setmetatable({}, { __mode = "k" })

local function one_of(...)
    local allowed = { ... }
    local parse = function(value)
        for _, option in ipairs(allowed) do
            if value == option then
                return value
            end
        end
        return nil, "must be one of " .. table.concat(allowed, ", ")
    end
    CHOICES[parse] = allowed
    return parse
end


local function parse_path(value)
    if value == "" then
        return nil, "must not be empty"
    end
    return value
end


local function parse_absolute_path(value)
    if value:sub(1, 1) ~= "/" then
        return nil, "must be an absolute path"
    end
    return value
end


--- RELAY_ALLOWED_MOUNTS: colon-separated absolute host directories that
-- templates may mount (runtime.mounts). "/" is refused: it would let any
-- template bind any host path into its container.
local function parse_allowed_mounts(value)
    local dirs = {}
    for dir in (value .. ":"):gmatch("([^:]*):") do
        if dir:sub(1, 1) ~= "/" then
            return nil, "each directory must be an absolute path (colon-separated list)"
        elseif dir:match("^/+$") then
            return nil, "/ cannot be allowed: name the directories templates may mount"
        end
        dirs[#dirs + 1] = dir
    end
    return dirs
end


local function parse_listen_addr(value)
    local host, port = value:match("^%[?([^%]]*)%]?:(%d+)$")
    port = tonumber(port)
    if not host or not port or port < 1 or port > 65535 then
        return nil, "expected host:port (port 1..65535)"
    end
    return { host = host ~= "" and host or "0.0.0.0", port = port, text = value }
end


local function parse_retention(value)
    if value == "0" then
        return 0
    end
    return duration.parse_duration(value)
end


local function parse_event_bytes(value)
    local n, err = duration.parse_size(value:match("^%d+$") and tonumber(value) or value)
    if not n then
        return nil, err
    end
    if n < 2 or n > MAX_EVENT_BYTES_LIMIT then
        return nil, "must be between 2 bytes and 512Mi"
    end
    return n
end


local MAX_CLAIM_REPLICAS = 100
local DEFAULT_CLAIM_WAIT_MS = 1000


--- RELAY_CLAIM_WAIT=N[/timeout]: after each claim, WAIT for N replicas to
-- acknowledge it (at most timeout, default 1s) before the container starts.
-- "0" turns it off (nil).
local function parse_claim_wait(value)
    local n, rest = value:match("^(%d+)(.*)$")
    n = tonumber(n)
    if not n or n > MAX_CLAIM_REPLICAS or (rest ~= "" and rest:sub(1, 1) ~= "/") then
        return nil, "expected N or N/timeout: N replicas (0 to " .. MAX_CLAIM_REPLICAS .. "), a timeout like 500ms"
    end
    local timeout_ms = DEFAULT_CLAIM_WAIT_MS
    if rest ~= "" then
        local err
        timeout_ms, err = duration.parse_duration(rest:sub(2))
        if not timeout_ms then
            return nil, err
        elseif timeout_ms < 1 then
            return nil, "the timeout must be at least 1ms (WAIT with 0 waits forever)"
        end
    end
    if n == 0 then
        return false
    end
    return { replicas = n, timeout_ms = timeout_ms }
end


--- RELAY_DLQ_MAXLEN: the DLQ's approximate length bound; "0" (the default)
-- keeps every dead letter (nil).
local function parse_dlq_maxlen(value)
    local n = value:match("^%d+$") and tonumber(value)
    if not n or n > 2 ^ 53 then
        return nil, "must be a whole number (0: unlimited)"
    end
    return n > 0 and n or false
end


local function setting(var, flag, key, default, parse, default_help)
    SETTINGS[#SETTINGS + 1] = { var = var, flag = flag, key = key, default = default, parse = parse,
        default_help = default_help }
    SETTINGS_BY_KEY[key] = SETTINGS[#SETTINGS]
end

setting("REDIS_URL", "redis-url", "redis_url", "redis://127.0.0.1:6379/0", _M.parse_redis_url)
setting("REDIS_STREAM", "stream", "stream", "events", parse_nonempty_name)
setting("REDIS_GROUP", "group", "group", "relay", parse_nonempty_name)
setting("RELAY_CONSUMER", "consumer", "consumer", _M.hostname, parse_consumer, "this host's name")
setting("MAX_CONCURRENCY", "max-concurrency", "max_concurrency", "4", parse_concurrency)
setting("RELAY_APPS", "apps", "apps", "./apps", parse_path)
setting("RELAY_RUNTIME", "runtime", "runtime", "auto", one_of("auto", "runc", "bwrap", "docker", "podman"))
setting("RELAY_STATE_DIR", "state-dir", "state_dir", default_state_dir, parse_path,
    "/run/relay as root, else $XDG_RUNTIME_DIR/relay or /tmp/relay-UID")
setting("RELAY_LOG_LEVEL", "log-level", "log_level", "info", one_of("debug", "info", "warn", "error"))
setting("RELAY_LOG_FORMAT", "log-format", "log_format", "text", one_of("text", "json"))
setting("RELAY_METRICS_ADDR", "metrics-addr", "metrics_addr", nil, parse_listen_addr)
setting("RELAY_HOOKS", "hooks", "hooks", nil, parse_path)
setting("RELAY_RETENTION", "retention", "retention_ms", "24h", parse_retention)
setting("RELAY_MAX_EVENT_BYTES", nil, "max_event_bytes", "1Mi", parse_event_bytes)
setting("RELAY_IMAGES", nil, "images", nil, parse_absolute_path)
setting("RELAY_SECRETS_DIR", nil, "secrets_dir", nil, parse_absolute_path)
setting("RELAY_ALLOWED_MOUNTS", nil, "allowed_mounts", nil, parse_allowed_mounts)
setting("RELAY_DLQ_MAXLEN", nil, "dlq_maxlen", "0", parse_dlq_maxlen)
setting("RELAY_CLAIM_WAIT", nil, "claim_wait", nil, parse_claim_wait)
setting("RELAY_REDIS_CA", nil, "redis_ca", nil, parse_path)
setting("RELAY_REDIS_CERT", nil, "redis_cert", nil, parse_path)
setting("RELAY_REDIS_KEY", nil, "redis_key", nil, parse_path)
setting("RELAY_REDIS_TLS_SERVERNAME", nil, "redis_tls_servername", nil, parse_nonempty_name)

-- The TLS variables, and where they go in a rediss:// address's tls table.
local TLS_SETTINGS = {
    { key = "redis_ca", field = "ca" }, { key = "redis_cert", field = "cert" },
    { key = "redis_key", field = "key" }, { key = "redis_tls_servername", field = "servername" },
}


local function flag_field(flag)
    return flag and flag:gsub("-", "_")
end


--- "overrides VAR; one of a|b; default x": what --help says of a setting.
local function flag_help(s)
    local parts = { "overrides " .. s.var }
    if CHOICES[s.parse] then
        parts[#parts + 1] = "one of " .. table.concat(CHOICES[s.parse], "|")
    end
    if type(s.default) == "string" then
        parts[#parts + 1] = "default " .. s.default
    elseif type(s.default) == "function" then
        parts[#parts + 1] = "default: " .. (s.default_help or "computed")
    end
    return table.concat(parts, "; ")
end


--- Adds the flags of the named config keys (all when keys is nil) to an
-- argparse command.
function _M.add_flags(parser, keys)
    local wanted
    if keys then
        wanted = {}
        for _, key in ipairs(keys) do
            wanted[key] = true
        end
    end
    for _, s in ipairs(SETTINGS) do
        if s.flag and (not wanted or wanted[s.key]) then
            parser:option("--" .. s.flag, flag_help(s)):argname("<value>")
        end
    end
end


local function environment()
    local env = {}
    for _, s in ipairs(SETTINGS) do
        env[s.var] = os.getenv(s.var)
    end
    env.XDG_RUNTIME_DIR = os.getenv("XDG_RUNTIME_DIR")
    return env
end


--- The text a setting takes (a flag wins over its variable, which wins
-- over the default) and where it came from.
local function raw_value(s, env, flags)
    local from_flag = s.flag and flags[flag_field(s.flag)]
    -- a string: argparse also sets a field true for the command named
    -- (`relay consumer …` sets args.consumer)
    if type(from_flag) == "string" then
        return from_flag, "--" .. s.flag
    end
    if env[s.var] ~= nil then
        return env[s.var], s.var
    end
    local default = s.default
    if type(default) == "function" then
        default = default(env)
    end
    return default, s.var .. " (default)"
end


--- A setting's parsed value (nil when it is unset and has no default),
-- or nil, "invalid SOURCE=TEXT: reason".
local function setting_value(s, env, flags)
    local raw, source = raw_value(s, env, flags)
    if raw == nil then
        return nil
    end
    local value, err = s.parse(raw)
    if value == nil then
        local shown = s.key == "redis_url" and _M.mask_redis_url(raw) or raw
        return nil, string.format("invalid %s=%s: %s", source, shown, err)
    end
    return value
end


--- Puts the TLS variables into a rediss:// address. Set with any other
-- URL they would be ignored, and a connection believed encrypted would
-- not be: that is an error.
local function attach_tls(cfg)
    local tls = type(cfg.redis_url) == "table" and cfg.redis_url.tls
    for _, t in ipairs(TLS_SETTINGS) do
        if cfg[t.key] and not tls then
            return nil, string.format("%s is set but REDIS_URL is not rediss:// (TLS); use rediss:// or unset it",
                SETTINGS_BY_KEY[t.key].var)
        end
        if tls then
            tls[t.field] = cfg[t.key]
        end
    end
    return cfg
end


--- Builds the configuration from env (default: the process environment)
-- and flags (parsed argparse results; a flag wins over its variable).
-- @return cfg | nil, "REDIS_URL=…: reason"
function _M.load(env, flags)
    env = env or environment()
    flags = flags or {}
    local cfg = {}
    for _, s in ipairs(SETTINGS) do
        local value, err = setting_value(s, env, flags)
        if err then
            return nil, err
        end
        cfg[s.key] = value
    end
    -- Only ever shown in messages, so it never holds the password.
    cfg.redis_url_text = _M.mask_redis_url(raw_value(SETTINGS_BY_KEY.redis_url, env, flags))
    return attach_tls(cfg)
end


--- load(), for a CLI command: a bad value exits 2 naming it.
function _M.load_or_exit(flags)
    return require("relay.exit").or_env(_M.load(nil, flags))
end


return _M
