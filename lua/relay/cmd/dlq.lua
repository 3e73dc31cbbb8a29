--- relay dlq <sub>: find, read, fix and replay dead letters with the CLI
-- alone. Each sub-command is its own module relay.cmd.dlq_<sub>; what they
-- share (the connection, the filters, the selection of entries) is here.
local config = require("relay.config")
local dlq = require("relay.dlq")
local exit = require("relay.exit")
local keys = require("relay.keys")
local log = require("relay.log")
local redis = require("relay.redis")

local _M = require("relay.subcommands").group("dlq", {
    { "ls", "Oldest first: id, app/handler, handler_attempts, timestamp, reason." },
    { "inspect", "Every field of an entry; the event pretty-printed." },
    { "replay", "Re-publish entries to their stream, targeted at their handler." },
    { "rm", "Delete entries." },
})


--- --app, --handler and the Redis flags.
function _M.filter_flags(cmd)
    cmd:option("--app", "Only entries of this app."):argname("<app>")
    cmd:option("--handler", "Only entries of this handler."):argname("<handler>")
    config.add_flags(cmd, { "redis_url", "stream" })
end


--- The ids and --all of replay and rm.
function _M.selection_args(cmd)
    cmd:argument("ids", "DLQ entry ids."):args("*")
    cmd:flag("--all", "Every entry (after --app/--handler).")
    cmd:flag("--json", "JSON output.")
    _M.filter_flags(cmd)
end


--- Refuses (usage error, before anything is read or changed) an id that
-- is not a stream id: Redis's own answer would be a generic ERR.
function _M.check_ids(ids)
    for _, id in ipairs(ids) do
        if not (id:match("^%d+%-%d+$") or id:match("^%d+$")) then
            exit.usage(id .. ": not a stream id (<ms>-<seq>, as `relay dlq ls` shows them)")
        end
    end
end


-- Fields shown first, in this order (text and JSON); the rest follow sorted.
_M.FIELD_ORDER = { "original_stream", "original_id", "app", "handler", "reason", "handler_attempts",
    "deliveries", "timestamp", "group", "consumer" }
local NUMERIC = { handler_attempts = true, deliveries = true }


--- The names of fields not in `skip`, sorted.
function _M.sorted_names(fields, skip)
    local names = {}
    for name in pairs(fields) do
        if not skip[name] then
            names[#names + 1] = name
        end
    end
    table.sort(names)
    return names
end


local function json_value(name, value)
    if NUMERIC[name] and value:match("^%d+$") then
        return value
    end
    if name == "event" and require("relay.core.matcher").validate_object(value, #value + 1) then
        -- the producer's exact bytes; a raw control byte can only be
        -- whitespace between tokens here, and stays off the line
        return (value:gsub("[\r\n\t]", " "))
    end
    return log.json_quote(value)
end


--- An entry as one JSON object on one line: id, FIELD_ORDER, the rest
-- sorted; counts as numbers, a valid event as an object (else a string).
-- Strings are quoted by the log's JSON quoting, which replaces invalid
-- UTF-8 (a tail cut mid-character, binary output) with U+FFFD.
function _M.json_entry(entry)
    local parts, shown = { '{"id":' .. log.json_quote(entry.id) }, {}
    local function add(name)
        parts[#parts + 1] = log.json_quote(name) .. ":" .. json_value(name, entry.fields[name])
        shown[name] = true
    end
    for _, name in ipairs(_M.FIELD_ORDER) do
        if entry.fields[name] then
            add(name)
        end
    end
    for _, name in ipairs(_M.sorted_names(entry.fields, shown)) do
        add(name)
    end
    return table.concat(parts, ",") .. "}"
end


--- A client and the DLQ key of the configured stream.
function _M.open(args)
    local cfg = config.load_or_exit(args)
    return redis.connect_cli(cfg), keys.for_stream(cfg.stream).dlq
end


--- Every entry matching --app/--handler, read page by page before any is
-- changed (the caller deletes entries as it goes).
local function all_matching(args, client, key)
    local list = {}
    local next_entry, failure = dlq.entries(client, key, { app = args.app, handler = args.handler })
    for entry in next_entry do
        list[#list + 1] = entry
    end
    if failure() then
        exit.env("reading the DLQ failed: " .. failure())
    end
    return list
end


--- The entry `id`, or nil after saying on stderr why it is not selected.
local function named(args, client, key, id)
    local entry, err = dlq.get(client, key, id)
    if not entry then
        io.stderr:write("relay: ", err and ("reading " .. id .. " failed: " .. err) or ("no DLQ entry " .. id), "\n")
        return nil
    end
    if (args.app and entry.fields.app ~= args.app) or (args.handler and entry.fields.handler ~= args.handler) then
        io.stderr:write("relay: ", id, " does not match --app/--handler; skipped\n")
        return nil
    end
    return entry
end


--- Calls fn(entry) for each entry named by args.ids, or with --all for
-- every entry matching the filters; fn returns true when it succeeded.
-- @return the number of problems (missing, skipped or failed entries)
function _M.each_selected(args, client, key, fn)
    local problems = 0
    if args.all then
        if #args.ids > 0 then
            exit.usage("give ids or --all, not both")
        end
        for _, entry in ipairs(all_matching(args, client, key)) do
            problems = problems + (fn(entry) and 0 or 1)
        end
        return problems
    end
    if #args.ids == 0 then
        exit.usage("give DLQ entry ids, or --all")
    end
    _M.check_ids(args.ids)
    for _, id in ipairs(args.ids) do
        local entry = named(args, client, key, id)
        problems = problems + ((entry and fn(entry)) and 0 or 1)
    end
    return problems
end


return _M
