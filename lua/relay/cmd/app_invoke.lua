--- relay app invoke APP HANDLER [--event JSON | --event-file F]: run one handler
-- now in its container, the same code path as the worker. The event comes
-- from --event, --event-file or stdin; the handler's stdout and stderr pass
-- through unprefixed. Exit: the handler's status, 124 on timeout, 128+N on
-- signal N, 125 if Relay could not start it, 1 if the app or handler does
-- not exist, 2 on usage errors. Loads only its own app, uses a private
-- runtime root (removed at exit) and never sweeps.
local apps = require("relay.apps")
local config = require("relay.config")
local exit = require("relay.exit")
local fs = require("relay.fs")
local invoke = require("relay.runtime.invoke")
local runtime = require("relay.runtime")

local _M = {}

-- One handler run: in a fresh process the JIT spent ~2 ms of CPU recording
-- and compiling traces of code that runs a few times (relay.subcommands).
_M.JIT = false

local EXIT_TIMEOUT = 124
local EXIT_HOST = 125
local SIGINT, SIGTERM = 2, 15


function _M.configure(cmd)
    cmd:argument("app", "The app.")
    cmd:argument("handler", "The handler (of events or schedules).")
    cmd:mutex(
        cmd:option("--event", "The event JSON given to the handler on stdin."):argname("<json>"),
        cmd:option("--event-file", "A file holding the event JSON."):argname("<file>")
    )
    config.add_flags(cmd, { "apps", "runtime", "state_dir" })
end


--- The event or schedule entry running `handler`, events first.
function _M.find_entry(app, handler)
    for _, e in ipairs(app.events or {}) do
        if e.handler == handler then
            return e
        end
    end
    for _, s in ipairs(app.schedules or {}) do
        if s.handler == handler then
            return s
        end
    end
    return nil
end


local function read_event(args)
    if args.event then
        return args.event
    end
    if args.event_file then
        local f, err = io.open(args.event_file, "rb")
        if not f then
            exit.usage("--event-file: " .. tostring(err))
        end
        local text = f:read("*a")
        f:close()
        return text
    end
    return io.stdin:read("*a") or ""
end


local function pass_through(stream, line, partial)
    local f = stream == "stdout" and io.stdout or io.stderr
    f:write(line)
    if not partial then
        f:write("\n")
    end
    if stream == "stderr" then
        f:flush()
    end
end


--- Exit code for an outcome (docs/errors.md).
function _M.exit_code(outcome, interrupted)
    if outcome.host_failure then
        return EXIT_HOST
    elseif interrupted then
        return 128 + interrupted
    elseif outcome.timed_out then
        return EXIT_TIMEOUT
    elseif outcome.signal then
        return 128 + outcome.signal
    end
    return outcome.status or 1
end


local function on_signals(fn)
    local ok, loop = pcall(require, "relay.core.loop")
    if ok and loop.on_signal then
        loop.on_signal(SIGINT, fn)
        loop.on_signal(SIGTERM, fn)
    end
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local app, aerr = apps.load_app(cfg.apps, args.app)
    if not app then
        exit.negative(aerr)
    end
    if app.state ~= "ok" then
        exit.negative(app.error or ("app " .. args.app .. " is invalid"))
    end
    local entry = _M.find_entry(app, args.handler)
    if not entry then
        exit.negative(string.format("app %s has no handler %s", app.name, args.handler))
    end
    local stdin = read_event(args)
    if args.event or args.event_file then
        -- what `relay publish` would refuse never reaches a handler either
        local ok, reason = require("relay.core.matcher").validate_object(stdin, cfg.max_event_bytes)
        if not ok then
            exit.usage("not a valid event: " .. reason)
        end
    end

    local rt = runtime.new({ runtime = cfg.runtime, state_dir = cfg.state_dir, images = cfg.images,
        consumer = cfg.consumer, stream = cfg.stream, group = cfg.group, private = true,
        secrets_dir = cfg.secrets_dir, allowed_mounts = cfg.allowed_mounts })
    -- runc: pay the kernel's cgroup-attach grace period in a thread while
    -- the bundle is written and runc starts (runc.lua, D.prewarm)
    local drv = rt:driver_for(app)
    if drv and drv.prewarm then
        drv:prewarm()
    end
    local handle, interrupted
    -- Ctrl-C or a TERM: stop the container (TERM, grace, KILL) before leaving,
    -- so nothing outlives this command
    on_signals(function(signum)
        interrupted = interrupted or signum
        if handle then
            handle:terminate()
        end
    end)
    local outcome = invoke.run({
        rt = rt,
        app = app,
        entry = entry,
        trigger = "invoke",
        message_id = "invoke-" .. fs.getpid(),
        attempt = 1,
        stdin = stdin,
        on_line = pass_through,
        on_start = function(h)
            handle = h
            if interrupted then
                h:terminate()
            end
        end,
    })
    on_signals(nil)
    rt:close()
    io.stdout:flush()
    if outcome.host_failure then
        io.stderr:write("relay: could not start the handler: ", tostring(outcome.reason), "\n")
    elseif outcome.timed_out and not interrupted then
        io.stderr:write("relay: ", outcome.reason, "\n")
    elseif outcome.detail then
        io.stderr:write("relay: ", outcome.detail, "\n")
    end
    return _M.exit_code(outcome, interrupted)
end


return _M
