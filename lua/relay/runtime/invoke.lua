--- Runs one handler invocation in its container: the one code path shared by
-- `relay app invoke` and the worker. Must be called inside a task.
local apps = require("relay.apps")
local constants = require("relay.constants")
local proc = require("relay.core.proc")
local runtime = require("relay.runtime")

local _M = {}


local function now_ms()
    local ok, loop = pcall(require, "relay.core.loop")
    if ok and loop.now_ms then
        return loop.now_ms()
    end
    return os.time() * 1000
end


local function monotonic()
    return require("relay.core.loop").monotonic()
end


--- relay-init's deadline (CLOCK_MONOTONIC ms): timeout + kill grace + half
-- the lease margin after the claim was sent (before the lease began), or
-- after now without a claim. The daemon's own TERM, grace and KILL count
-- from the spawn, a little later, and come first while the daemon is well;
-- the init's cut is the backstop, and the other half of the margin is the
-- container's teardown before the lease ends (lifecycle.lua: lease =
-- timeout + kill grace + lease margin).
local function kill_at_ms(args, timeout_ms)
    local from = args.claimed_at or monotonic()
    return math.floor(from * 1000 + timeout_ms + constants.kill_grace_ms + constants.lease_margin_ms / 2)
end


--- The handler's lines go to on_line; relay-init's record only to the driver.
local function line_router(spec, on_line)
    return function(stream, line, partial)
        if spec.observe then
            spec.observe(stream, line, partial)
        end
        if on_line and stream ~= "control" then
            on_line(stream, line, partial)
        end
    end
end


local function host_failure(detail, started)
    return {
        ok = false,
        host_failure = true,
        timed_out = false,
        reason = detail,
        detail = detail,
        duration_ms = started and (now_ms() - started) or 0,
    }
end


--- The proc.spawn options of a driver's spec; lines go to route.
function _M.spawn_options(spec, route)
    return {
        argv = spec.argv,
        env = spec.env,
        grace = constants.kill_grace_ms / 1000,
        term_argv = spec.term_argv,
        kill_argv = spec.kill_argv,
        kill_delay = spec.kill_delay,
        cgroup_procs = spec.cgroup_procs,
        keep_group = spec.keep_group,
        pass_fds = spec.pass_fds,
        control = spec.control,
        nofile = spec.nofile,
        no_core = spec.no_core,
        uid = spec.uid,
        gid = spec.gid,
        on_line = route,
    }
end


--- A container created for this invocation: h, spec, or nil and the
-- host failure.
local function start_cold(args, drv, inv, timeout_ms, started)
    local spec, perr = drv:prepare(args.app, inv)
    if not spec then
        return nil, host_failure(drv.name .. ": " .. tostring(perr), started)
    end
    local opts = _M.spawn_options(spec, line_router(spec, args.on_line))
    opts.stdin = args.stdin or ""
    opts.timeout = timeout_ms / 1000
    local h, serr = proc.spawn(opts)
    -- the child has its copies (or never will): ours would only leak
    runtime.close_fds(spec.pass_fds)
    if not h then
        drv:finish(spec, { start_error = serr, timed_out = false })
        return nil, host_failure(drv.name .. ": " .. serr, started)
    end
    return h, spec
end


--- A pre-created container of the app's warm pool, started with this
-- invocation's values (relay-init's start record), or nil: start cold.
local function start_warm(args, drv, inv, timeout_ms)
    local entry = args.rt.warm and args.rt.warm:take(args.app, drv)
    if not entry then
        return nil
    end
    local record = runtime.start_record(inv)
    entry.on_line = args.on_line
    local ok = record and entry.h:activate({ start = record, stdin = args.stdin or "",
        timeout = timeout_ms / 1000, grace = constants.kill_grace_ms / 1000 })
    if not ok then
        args.rt.warm:retire(entry)
        return nil
    end
    return entry.h, entry.spec
end


--- args: {
--   rt          runtime context (relay.runtime.new); its warm pool
--               (rt.warm, relay.runtime.warm_pool), when it has one, gives
--               the container if it holds one of the app's
--   app         app table (relay.apps)
--   entry       the event or schedule entry: { handler, timeout_ms }
--   trigger     "event" | "schedule" | "invoke"
--   message_id, attempt
--   stdin       bytes written to the handler's stdin, then closed
--   on_line     function(stream, line, partial): each output line; runs on
--               the main state, must not yield
--   on_start    optional function(handle, spec): the running proc (the
--               worker keeps it to terminate on a forced shutdown)
--   claimed_at  optional loop.monotonic() taken before the attempt's claim
--               was sent: relay-init's deadline counts from it
-- }
-- Returns { ok, status, signal, timed_out, reason, host_failure, duration_ms,
--           detail, container_id, warm }. host_failure means the host could
-- not start the container: not an attempt (its claim is released
-- uncharged). warm: the container came from the warm pool.
function _M.run(args)
    local rt, app, entry = args.rt, args.app, args.entry
    local started = now_ms()
    local timeout_ms = entry.timeout_ms or apps.DEFAULT_TIMEOUT_MS
    local drv, err = rt:driver_for(app)
    if not drv then
        return host_failure(err, started)
    end
    local ok, why = drv:check(app)
    if not ok then
        return host_failure("app unavailable: " .. why, started)
    end
    local inv = {
        handler = entry.handler,
        trigger = args.trigger,
        message_id = args.message_id,
        attempt = args.attempt or 1,
        deadline_ms = started + timeout_ms,
        kill_at_ms = kill_at_ms(args, timeout_ms),
    }
    local h, spec = start_warm(args, drv, inv, timeout_ms)
    local warm = h ~= nil
    if not h then
        h, spec = start_cold(args, drv, inv, timeout_ms, started)
        if not h then
            return spec
        end
    end
    if args.on_start then
        args.on_start(h, spec)
    end
    local report = h:wait()
    local class = drv:finish(spec, report)
    if class.host_failure then
        local out = host_failure(class.detail, started)
        out.container_id = spec.id
        out.warm = warm
        return out
    end
    local out = {
        status = class.status,
        signal = class.signal,
        timed_out = report.timed_out or class.timed_out or false,
        host_failure = false,
        duration_ms = report.duration_ms,
        detail = class.detail,
        container_id = spec.id,
        warm = warm,
    }
    out.ok = not out.timed_out and out.signal == nil and out.status == 0
    out.reason = runtime.reason({ timed_out = out.timed_out, timeout_ms = timeout_ms,
        signal = out.signal, status = out.status })
    return out
end


return _M
