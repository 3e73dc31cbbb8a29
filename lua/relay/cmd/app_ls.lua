--- relay app ls: one tab-separated line per app:
-- name, state (ok, invalid, unavailable, paused), driver, handlers,
-- schedules, effective concurrency, note. Empty columns print as `-`; the
-- note is last because it may hold spaces. --json: one object per line.
local apps = require("relay.apps")
local config = require("relay.config")
local exit = require("relay.exit")
local jsonfmt = require("relay.jsonfmt")
local keys = require("relay.keys")
local listing = require("relay.listing")
local redis = require("relay.redis")
local runtime = require("relay.runtime")

local _M = {}


function _M.configure(cmd)
    cmd:flag("--json", "One JSON object per app.")
    listing.add_flags(cmd)
    config.add_flags(cmd, { "apps", "runtime", "max_concurrency", "redis_url", "stream" })
end


--- The set {name = true} of fleet-wide paused apps. Listing apps must not
-- depend on Redis: when it cannot be reached the paused state is reported
-- as unknown on stderr and no app shows as paused.
function _M.paused_apps(cfg)
    local client, err = redis.connect_blocking(cfg, 2)
    if not client then
        io.stderr:write("relay: paused state unknown: ", err, "\n")
        return {}
    end
    local names, cerr = client:call("SMEMBERS", keys.for_stream(cfg.stream).paused)
    client:close()
    if type(names) ~= "table" then
        io.stderr:write("relay: paused state unknown: ", tostring(cerr), "\n")
        return {}
    end
    local set = {}
    for _, name in ipairs(names) do
        set[name] = true
    end
    return set
end


local function names(list, field)
    local out = {}
    for _, e in ipairs(list or {}) do
        out[#out + 1] = e[field]
    end
    return out
end


--- The row of one app: { name, state, driver, handlers, schedules, concurrency, note }.
function _M.row(rt, cfg, app, paused)
    local row = {
        name = app.name,
        state = app.state,
        driver = "-",
        handlers = names(app.events, "handler"),
        schedules = names(app.schedules, "name"),
        concurrency = nil,
        note = nil,
    }
    if app.state ~= "ok" then
        row.state, row.note = "invalid", app.error
        return row
    end
    row.concurrency = math.min(app.concurrency or cfg.max_concurrency, cfg.max_concurrency)
    local driver, derr = rt:driver_for(app)
    if not driver then
        row.state, row.note = "unavailable", derr
        return row
    end
    row.driver = driver.name
    local ok, why = driver:check(app)
    if not ok then
        row.state, row.note = "unavailable", why
        return row
    end
    if paused[app.name] then
        row.state = "paused"
    end
    local notes = {}
    local unconfined = runtime.seccomp_unconfined(app)
    notes[#notes + 1] = unconfined and ("seccomp unconfined: " .. unconfined) or nil
    notes[#notes + 1] = driver:note(app)
    notes[#notes + 1] = app.reload_error
    row.note = #notes > 0 and table.concat(notes, "; ") or nil
    return row
end


local function dash(s)
    if s == nil or s == "" then
        return "-"
    end
    return (tostring(s):gsub("[\t\n]", " "))
end


function _M.format(row)
    return table.concat({
        row.name, row.state, dash(row.driver),
        dash(table.concat(row.handlers, ",")), dash(table.concat(row.schedules, ",")),
        dash(row.concurrency), dash(row.note),
    }, "\t")
end


--- The row as one JSON object: empty lists as [], and no driver key when
-- there is no driver (the text shows `-`).
function _M.json(row)
    local obj = {
        name = row.name, state = row.state, driver = row.driver ~= "-" and row.driver or nil,
        handlers = row.handlers, schedules = row.schedules,
        concurrency = row.concurrency, note = row.note,
    }
    return (jsonfmt.encode(obj, { "handlers", "schedules" }):gsub("\\/", "/"))
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local list = exit.or_env(apps.load_all(cfg.apps))
    local rt = runtime.new({ runtime = cfg.runtime, state_dir = cfg.state_dir, images = cfg.images,
        consumer = cfg.consumer, stream = cfg.stream, group = cfg.group, secrets_dir = cfg.secrets_dir,
        allowed_mounts = cfg.allowed_mounts })
    local paused = _M.paused_apps(cfg) or {}
    listing.header(args, { "NAME", "STATE", "DRIVER", "HANDLERS", "SCHEDULES", "CONCURRENCY", "NOTE" })
    for _, app in ipairs(list) do
        local row = _M.row(rt, cfg, app, paused)
        io.stdout:write(args.json and _M.json(row) or _M.format(row), "\n")
    end
    return 0
end


return _M
