--- relay dev: `relay run` for a developer's machine. When REDIS_URL is
-- unset it starts a private redis-server (stopped when relay stops, and
-- killed by the kernel if relay is) on a unix socket whose path depends
-- only on the user and the apps directory, so a REDIS_URL printed by one
-- run still works after a restart; then it prints how to publish to it.
local config = require("relay.config")
local exit = require("relay.exit")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local safefs = require("relay.core.safefs")

local _M = {}

local CONNECT_TIMEOUT_S = 1


function _M.configure(cmd)
    config.add_flags(cmd)
end


--- The private directory of this user's `relay dev` on apps_dir:
-- $XDG_RUNTIME_DIR (else /tmp)/relay-dev-<uid>-<hash of the apps path>.
function _M.private_dir(apps_dir, env)
    local real = fs.realpath(apps_dir) or apps_dir
    local base = env.XDG_RUNTIME_DIR
    if not base or base:sub(1, 1) ~= "/" then
        base = "/tmp"
    end
    local hash = require("relay.runtime.ids").hash(real)
    return string.format("%s/relay-dev-%d-%08x", base, fs.geteuid(), hash)
end


--- Makes dir, or accepts it only as this user's own private directory:
-- a fixed name in a shared /tmp could have been made (or be a symlink
-- placed) by someone else, who would then see or swap our socket.
local function own_private_dir(dir)
    local made, err = fs.mkdir(dir, 448)  -- true when it exists already too
    if not made then
        exit.env("cannot create " .. dir .. ": " .. tostring(err))
    end
    local st = safefs.lstat(dir)
    if not st or st.type ~= "dir" or st.uid ~= fs.geteuid() or st.mode % 64 ~= 0 then
        exit.env(dir .. " exists but is not a private directory of this user (mode 0700, not a symlink); "
            .. "remove it or set XDG_RUNTIME_DIR")
    end
    return dir
end


local function answers(sock)
    local client = require("relay.core.redis").connect_blocking({ path = sock, db = 0 }, CONNECT_TIMEOUT_S)
    if client then
        client:close()
        return true
    end
    return false
end


local function start_private_redis(apps_dir)
    local dir = own_private_dir(_M.private_dir(apps_dir, { XDG_RUNTIME_DIR = os.getenv("XDG_RUNTIME_DIR") }))
    local sock = dir .. "/redis.sock"
    if fs.exists(sock) then
        if answers(sock) then
            exit.env("relay dev already runs on " .. apps_dir .. " (its Redis: unix://" .. sock .. "); "
                .. "stop it first, or join it with REDIS_URL=unix://" .. sock)
        end
        fs.unlink(sock)  -- left by a run that was killed
    end
    local handle, spawn_err = proc.spawn({
        argv = { "redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", dir, "--logfile", dir .. "/redis.log" },
        die_with_parent = true,
    })
    if not handle then
        exit.env("cannot start a private redis-server (is it installed?): " .. tostring(spawn_err))
    end
    for _ = 1, 250 do
        if fs.exists(sock) then
            return handle, dir, "unix://" .. sock
        end
        loop.sleep(0.02)
    end
    handle:kill(9)
    exit.env("the private redis-server did not start; see " .. dir .. "/redis.log")
end


--- A REDIS_URL from the environment that does not answer is most often
-- one an earlier `relay dev` printed: say how to get a private Redis.
local function check_given_redis(cfg)
    -- relay.redis: a Sentinel or Cluster URL is followed to the node that serves the stream
    local client, err, kind = require("relay.redis").connect_blocking(cfg, CONNECT_TIMEOUT_S)
    if client then
        client:close()
        return
    elseif kind ~= "io" then
        exit.env(kind == "reply" and require("relay.redis_refusal").describe(err) or tostring(err))
    end
    exit.env(string.format("%s; if it is left from an earlier relay dev, `unset REDIS_URL` and relay dev "
        .. "starts a private Redis", tostring(err)))
end


--- An event the app's first pattern matches, when its conditions are
-- plain values (`type: [greeting]`); nil otherwise.
local function example_event(app)
    local cjson = require("cjson")
    local first = (app.events or {})[1]
    local ok, pattern = pcall(cjson.decode, first and first.pattern_json or "null")
    if not ok or type(pattern) ~= "table" then
        return nil
    end
    local event = {}
    for field, values in pairs(pattern) do
        -- compiled form: {"type":[{"eq":"greeting"}]}
        local first_value = type(values) == "table" and type(values[1]) == "table" and values[1].eq
        if type(first_value) ~= "string" and type(first_value) ~= "number" and type(first_value) ~= "boolean" then
            return nil
        end
        event[field] = first_value
    end
    return next(event) and cjson.encode(event) or nil
end


local function handler_names(app)
    local names = {}
    for _, e in ipairs(app.events or {}) do
        names[#names + 1] = e.handler
    end
    for _, s in ipairs(app.schedules or {}) do
        names[#names + 1] = "schedule " .. s.name
    end
    return table.concat(names, ", ")
end


--- One line per loaded app, and a publish line for the first app with a
-- plain-valued pattern.
local function describe_apps(list)
    local lines, example = {}, nil
    for _, app in ipairs(list) do
        if app.state == "ok" then
            lines[#lines + 1] = string.format("    %s: %s", app.name, handler_names(app))
            example = example or example_event(app)
        else
            lines[#lines + 1] = string.format("    %s: invalid (%s)", app.name, tostring(app.error))
        end
    end
    if #lines == 0 then
        lines[1] = "    (none yet: add a directory with a template.yaml)"
    end
    return lines, example or '{"type":"example"}'
end


function _M.banner(url, apps_dir, list)
    local app_lines, example = describe_apps(list)
    local out = { "", "relay dev: a private Redis is running at " .. url, "  apps in " .. apps_dir .. ":" }
    for _, l in ipairs(app_lines) do
        out[#out + 1] = l
    end
    local q = "'" .. example:gsub("'", "'\\''") .. "'"
    for _, l in ipairs({
        "  publish: REDIS_URL=" .. url .. " relay publish " .. q,
        "  status:  REDIS_URL=" .. url .. " relay status",
        "  stop:    Ctrl-C (drains running handlers, then stops Redis)",
        "", "",
    }) do
        out[#out + 1] = l
    end
    return table.concat(out, "\n")
end


function _M.execute(args)
    local redis_handle, dir
    local given = args.redis_url or os.getenv("REDIS_URL")
    if not given then
        local url
        redis_handle, dir, url = start_private_redis(config.load_or_exit(args).apps)
        args.redis_url = url
    end
    local cfg = config.load_or_exit(args)
    if given then
        check_given_redis(cfg)
    end
    local ok, result = pcall(require("relay.worker").run, cfg, {
        on_ready = function(worker)
            if redis_handle then
                io.stderr:write(_M.banner(cfg.redis_url_text, cfg.apps, worker.registry.list))
            end
        end,
        before_exit = function()
            -- a forced stop: no time to wait for a clean shutdown of Redis
            if redis_handle then
                redis_handle:kill(9)
                fs.rm_rf(dir)
            end
        end,
    })
    if redis_handle then
        redis_handle:kill(15)
        redis_handle:wait(5)
        fs.rm_rf(dir)
    end
    if not ok then
        error(result, 0)
    end
    return result
end


return _M
