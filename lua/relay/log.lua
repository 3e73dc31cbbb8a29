--- Relay's log: text or JSON lines on stderr.
--   log.info("message", { key = value, ... })
-- Handler output goes through log.handler_line, which writes at every level.
--
-- A text record is one line, so that nothing a handler prints or a field
-- holds can forge another record: the sink (src/log.c) writes control
-- bytes (but TAB) and DEL as \xNN, in the message, the fields and handler
-- lines alike. A field value with a space, '"', '=' or '\' (or an empty
-- one) is quoted, with '\' and '"' escaped inside the quotes, so a reader
-- can tell where it ends and that a \xNN in it came from the sink.
local core = require("relay.core.log")
local cjson = require("cjson.safe")

local _M = {}

local LEVELS = { debug = true, info = true, warn = true, error = true }
local FORMATS = { text = true, json = true }

local on_log  -- the hooks' on_log, when one is loaded (record = { ts, level, msg, fields })


local function now_ms()
    return require("relay.core.loop").now_ms()
end


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
        core.write("info", "handler output", render_fields({
            app = ctx.app, handler = ctx.handler, message_id = ctx.message_id,
            attempt = ctx.attempt, stream = stream, line = line,
        }))
        return
    end
    core.write("info", string.format("[%s/%s %s#%d] ", ctx.app, ctx.handler, ctx.message_id, ctx.attempt) .. line)
end


_M.json_quote = core.json_quote


return _M
