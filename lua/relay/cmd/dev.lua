--- relay dev: `relay run` for a developer's machine. When REDIS_URL is
-- unset it starts a private redis-server on a unix socket in a temp dir
-- (stopped when relay stops) and prints how to publish to it.
local config = require("relay.config")
local exit = require("relay.exit")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")

local _M = {}


function _M.configure(cmd)
    config.add_flags(cmd)
end


local function start_private_redis()
    -- mkdtemp makes the directory, private to us, in one step: no other
    -- user can create or swap it between choosing the name and using it.
    local dir, err = fs.mkdtemp("relay-dev-")
    if not dir then
        exit.env("cannot create a directory for the private redis-server: " .. err)
    end
    local sock = dir .. "/redis.sock"
    local handle, spawn_err = proc.spawn({
        argv = { "redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", dir, "--logfile", dir .. "/redis.log" },
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


local function print_banner(url, apps_dir)
    io.stderr:write(table.concat({
        "",
        "relay dev: a private Redis is running at " .. url,
        "  apps:    " .. apps_dir,
        "  publish: REDIS_URL=" .. url .. " relay publish '{\"type\":\"greeting\",\"name\":\"Ada\"}'",
        "  status:  REDIS_URL=" .. url .. " relay status",
        "  stop:    Ctrl-C (drains running handlers, then stops Redis)",
        "", "",
    }, "\n"))
end


function _M.execute(args)
    local redis_handle, dir
    if not args.redis_url and not os.getenv("REDIS_URL") then
        local url
        redis_handle, dir, url = start_private_redis()
        args.redis_url = url
    end
    local cfg = config.load_or_exit(args)
    local ok, result = pcall(require("relay.worker").run, cfg, {
        on_ready = function()
            if redis_handle then
                print_banner(cfg.redis_url_text, cfg.apps)
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
