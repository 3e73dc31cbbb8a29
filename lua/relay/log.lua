--- Relay's log: text or JSON lines on stderr.
--   log.info("message", { key = value, ... })
-- Handler output goes through log.handler_line, which writes at every level.
--
-- A failure that repeats (a task retrying against Redis, a read that keeps
-- failing) is logged once per change of state, not once per attempt:
--   log.failing(name, msg, fields)    WARN msg on the first failure; then
--                                     DEBUG, and once per still_failing_log_ms
--                                     a WARN "msg: still failing (N s)"
--   log.recovered(name, msg, fields)  INFO msg, if name was failing
-- A failure that nobody reports for a minute (and two periods) has ended
-- too, silently: a task that does not report its recoveries never sees
-- "still failing" for a failure of long ago.
-- While an outage is being reported (log.set_outage: Redis unreachable,
-- say), every other failure is its consequence and only a DEBUG record.
--
-- The daemon makes the sink asynchronous (log.start_async): records are
-- queued and written by a thread of the sink's own, so the loop never waits
-- for a slow reader of stderr; what does not fit is dropped and counted.
--
-- A text record is one line, so that nothing a handler prints or a field
-- holds can forge another record: the sink (src/log.c) writes control
-- bytes (but TAB) and DEL as \xNN, in the message, the fields and handler
-- lines alike. A field value with a space, '"', '=' or '\' (or an empty
-- one) is quoted, with '\' and '"' escaped inside the quotes, so a reader
-- can tell where it ends and that a \xNN in it came from the sink.
local constants = require("relay.constants")
local core = require("relay.core.log")
local cjson = require("cjson.safe")

local _M = {}

_M.BUFFER_BYTES = 1024 * 1024  -- the daemon's log buffer (start_async)

local LEVELS = { debug = true, info = true, warn = true, error = true }
local FORMATS = { text = true, json = true }

local on_log  -- the hooks' on_log, when one is loaded (record = { ts, level, msg, fields })


local failures = {}  -- name → { since, reported, last, count } while failing
local outage  -- { name, probe } (set_outage)


local function now_ms()
    return require("relay.core.loop").now_ms()
end


local function loop_monotonic()
    return require("relay.core.loop").monotonic()
end

local monotonic = loop_monotonic


local function sorted_keys(fields)
    local keys = {}
    for key in pairs(fields) do
        keys[#keys + 1] = key
    end
    table.sort(keys)
    return keys
end


local function text_value(value)
    local s = tostring(value)
    if s == "" or s:find("[%s\"=\\]") then
        return '"' .. s:gsub('[\\"]', "\\%0") .. '"'
    end
    return s
end


--- A copy of a record's fields for on_log, tables copied too: a hook must
-- not reach (and, say, set a metatable on) a table Relay still uses.
local function plain_copy(t, seen)
    seen = seen or {}
    local c = {}
    seen[t] = c
    for k, v in next, t do
        if type(v) == "table" then
            v = seen[v] or plain_copy(v, seen)
        end
        c[k] = v
    end
    return c
end


local function json_value(value)
    local kind = type(value)
    if kind == "string" then
        return core.json_quote(value)
    elseif kind == "number" then
        if value ~= value or value == math.huge or value == -math.huge then
            return core.json_quote(tostring(value))
        end
        if value % 1 == 0 and math.abs(value) < 2 ^ 53 then
            return string.format("%d", value)
        end
        return string.format("%.17g", value)
    elseif kind == "boolean" then
        return tostring(value)
    elseif kind == "table" then
        return cjson.encode(value) or core.json_quote(tostring(value))
    end
    return core.json_quote(tostring(value))
end


local function render_fields(fields)
    if not fields or next(fields) == nil then
        return nil
    end
    local parts = {}
    local json = core.is_json()
    for _, key in ipairs(sorted_keys(fields)) do
        if json then
            parts[#parts + 1] = "," .. core.json_quote(tostring(key)) .. ":" .. json_value(fields[key])
        else
            parts[#parts + 1] = " " .. tostring(key) .. "=" .. text_value(fields[key])
        end
    end
    return table.concat(parts)
end


local function emit(level, msg, fields)
    if not core.enabled(level) then
        return
    end
    if on_log then
        local copy = plain_copy(fields or {})
        local ok, keep = pcall(on_log, { ts = now_ms(), level = level, msg = tostring(msg), fields = copy })
        if ok and keep == false then
            return
        end
    end
    core.write(level, tostring(msg), render_fields(fields))
end


function _M.debug(msg, fields) emit("debug", msg, fields) end
function _M.info(msg, fields) emit("info", msg, fields) end
function _M.warn(msg, fields) emit("warn", msg, fields) end
function _M.error(msg, fields) emit("error", msg, fields) end


--- Applies RELAY_LOG_LEVEL / RELAY_LOG_FORMAT (already validated by config).
function _M.configure(level, format)
    assert(LEVELS[level], "bad log level")
    assert(FORMATS[format], "bad log format")
    core.configure(level, format == "json")
end


--- Installs (or removes, with nil) the hooks' on_log function.
function _M.set_hook(fn)
    on_log = fn
end


--- One line of handler output, written regardless of the level (never
-- passed to on_log). ctx = { app, handler, message_id, attempt };
-- stream = "stdout"|"stderr". Text: an INFO record whose message is the
-- prefix `[<app>/<handler> <message-id>#<attempt>] ` and the line.
function _M.handler_line(ctx, stream, line)
    if core.is_json() then
        core.write_output("info", "handler output", render_fields({
            app = ctx.app, handler = ctx.handler, message_id = ctx.message_id,
            attempt = ctx.attempt, stream = stream, line = line,
        }))
        return
    end
    core.write_output("info", string.format("[%s/%s %s#%d] ", ctx.app, ctx.handler, ctx.message_id, ctx.attempt)
        .. line)
end


--- fields plus extra, as a new table.
local function with(fields, extra)
    local out = {}
    for k, v in pairs(fields or {}) do
        out[k] = v
    end
    for k, v in pairs(extra) do
        out[k] = v
    end
    return out
end


--- Reports one failure of name (see the top of this file).
function _M.failing(name, msg, fields)
    if outage and name ~= outage.name and outage.probe() then
        emit("debug", msg, fields)
        return
    end
    local now, f = monotonic(), failures[name]
    local period = (constants.still_failing_log_ms or 60000) / 1000
    if not f or now - f.last > math.max(60, 2 * period) then
        failures[name] = { since = now, reported = now, last = now, count = 1 }
        emit("warn", msg, fields)
        return
    end
    f.count, f.last = f.count + 1, now
    if now - f.reported < period then
        emit("debug", msg, fields)
        return
    end
    f.reported = now
    emit("warn", string.format("%s: still failing (%d s)", msg, now - f.since), with(fields, { failures = f.count }))
end


--- Ends name's failure: INFO msg with how long it lasted; nothing when
-- name was not failing.
function _M.recovered(name, msg, fields)
    local f = failures[name]
    if not f then
        return
    end
    failures[name] = nil
    emit("info", msg, with(fields, { failed_s = math.floor(monotonic() - f.since + 0.5), failures = f.count }))
end


--- Whether name is failing now.
function _M.is_failing(name)
    return failures[name] ~= nil
end


--- While probe() is true, failures of any name but `name` are DEBUG only:
-- the outage `name` reports stands for them. nil removes it.
function _M.set_outage(name, probe)
    outage = name and { name = name, probe = probe } or nil
end


--- The clock of failing/recovered (seconds; loop.monotonic), for specs.
function _M.set_clock(fn)
    monotonic = fn or loop_monotonic
end


--- Makes the sink asynchronous with a buffer of bytes (default
-- BUFFER_BYTES); when it cannot, says so and records go on being written
-- directly. @return true | nil, err
function _M.start_async(bytes)
    local ok, err = core.start_async(bytes or _M.BUFFER_BYTES)
    if not ok then
        _M.warn("log records are written directly: a slow reader of stderr will slow the daemon", { error = err })
    end
    return ok, err
end


--- Waits up to timeout_s for queued records to be written.
_M.flush = core.flush

--- Records (and bytes) the asynchronous sink dropped since the start.
_M.dropped = core.dropped

_M.json_quote = core.json_quote


return _M
