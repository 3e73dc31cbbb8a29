--- relay dlq ls | inspect | replay | rm: find, read, fix and replay dead
-- letters with the CLI alone (relay.md section 6).
local cjson = require("cjson")
local config = require("relay.config")
local dlq = require("relay.dlq")
local exit = require("relay.exit")
local jsonfmt = require("relay.jsonfmt")
local keys = require("relay.keys")
local log = require("relay.log")
local redis = require("relay.redis")
local text = require("relay.text")

local _M = {}

-- Fields shown first by inspect, in this order; the rest follow sorted.
local FIELD_ORDER = { "original_stream", "original_id", "app", "handler", "reason", "handler_attempts",
    "deliveries", "timestamp", "group", "consumer" }


local function filters_and_flags(cmd)
    cmd:option("--app", "Only entries of this app."):argname("<app>")
    cmd:option("--handler", "Only entries of this handler."):argname("<handler>")
    config.add_flags(cmd, { "redis_url", "stream" })
end


function _M.configure(parser)
    parser:command_target("dlq_command")
    parser:require_command(true)
    local ls = parser:command("ls", "Oldest first: id, app/handler, handler_attempts, timestamp, reason.")
    filters_and_flags(ls)
    ls:option("--limit", "At most N entries.", nil, tonumber):argname("<n>")
    ls:flag("--json", "One JSON object per entry.")
    local inspect = parser:command("inspect", "Every field of an entry; the event pretty-printed.")
    inspect:argument("id", "The DLQ entry id.")
    inspect:flag("--json", "One JSON object.")
    config.add_flags(inspect, { "redis_url", "stream" })
    local replay = parser:command("replay", "Re-publish entries to their stream, targeted at their handler.")
    replay:argument("ids", "DLQ entry ids."):args("*")
    replay:flag("--all", "Every entry (after --app/--handler).")
    filters_and_flags(replay)
    local rm = parser:command("rm", "Delete entries.")
    rm:argument("ids", "DLQ entry ids."):args("*")
    rm:flag("--all", "Every entry (after --app/--handler).")
    filters_and_flags(rm)
end


local function open(args)
    local cfg = config.load_or_exit(args)
    return redis.connect_cli(cfg), keys.for_stream(cfg.stream).dlq
end


local function ls(args)
    if args.limit and (args.limit < 1 or args.limit % 1 ~= 0) then
        exit.usage("--limit must be a whole number of at least 1")
    end
    local client, key = open(args)
    local next_entry, failure = dlq.entries(client, key, { app = args.app, handler = args.handler })
    local shown = 0
    for entry in next_entry do
        local f = entry.fields
        if args.json then
            local record = { id = entry.id }
            for k, v in pairs(f) do
                record[k] = v
            end
            print(cjson.encode(record))
        else
            print(table.concat({ entry.id, (f.app or "-") .. "/" .. (f.handler or "-"), f.handler_attempts or "0",
                f.timestamp or "", f.reason or "" }, "\t"))
        end
        shown = shown + 1
        if args.limit and shown >= args.limit then
            break
        end
    end
    client:close()
    if failure() then
        exit.env("reading the DLQ failed: " .. failure())
    end
    return 0
end


-- inspect's text output: every line is a `name: value` field or an
-- indented line of the event or output block, and control bytes in names
-- and values are shown as \xNN, so no value can forge a line.
local function print_field(name, value)
    print(text.escape(name) .. ": " .. text.escape(value))
end


local function print_event(event)
    print("event:")
    local pretty = jsonfmt.pretty(event, "  ")
    if pretty == "  " .. event then
        -- not JSON: pretty returns it as it is, newlines and all, so it is
        -- shown escaped on one line
        print("  " .. text.escape(event))
        return
    end
    for line in (pretty .. "\n"):gmatch("(.-)\n") do
        print(text.escape(line))  -- valid JSON has no raw newline: each is pretty's own
    end
end


-- The output is the tail of the handler's stderr lines, joined with "\n":
-- one indented line each.
local function print_output(output)
    print("output:")
    for line in (output .. "\n"):gmatch("(.-)\n") do
        print("  " .. text.escape(line))
    end
end


local function print_entry(entry)
    print_field("id", entry.id)
    local shown = { event = true, output = true }
    for _, name in ipairs(FIELD_ORDER) do
        if entry.fields[name] then
            print_field(name, entry.fields[name])
            shown[name] = true
        end
    end
    local rest = {}
    for name in pairs(entry.fields) do
        if not shown[name] then
            rest[#rest + 1] = name
        end
    end
    table.sort(rest)
    for _, name in ipairs(rest) do
        print_field(name, entry.fields[name])
    end
    print_event(entry.fields.event or "")
    if entry.fields.output and entry.fields.output ~= "" then
        print_output(entry.fields.output)
    end
end


--- inspect --json: one object, fields sorted after "id". Quoted by the log's
-- JSON quoting, which replaces invalid UTF-8 (a tail cut mid-character, a
-- handler's binary output) with U+FFFD, so the object is always valid JSON.
local function json_entry(entry)
    local names = {}
    for name in pairs(entry.fields) do
        names[#names + 1] = name
    end
    table.sort(names)
    local parts = { '{"id":' .. log.json_quote(entry.id) }
    for _, name in ipairs(names) do
        parts[#parts + 1] = log.json_quote(name) .. ":" .. log.json_quote(entry.fields[name])
    end
    return table.concat(parts, ",") .. "}"
end


local function inspect(args)
    local client, key = open(args)
    local entry, err = dlq.get(client, key, args.id)
    client:close()
    if not entry then
        if err then
            exit.env(err)
        end
        exit.negative("no DLQ entry " .. args.id)
    end
    if args.json then
        print(json_entry(entry))
        return 0
    end
    print_entry(entry)
    return 0
end


--- The entries named by ids, or with --all every entry matching filters;
-- calls fn(entry) for each and reports missing ids. Returns the problems.
local function each_selected(args, client, key, fn)
    local problems = 0
    if args.all then
        if #args.ids > 0 then
            exit.usage("give ids or --all, not both")
        end
        -- Collect ids page by page first: fn deletes entries as it goes.
        local ids = {}
        local next_entry, failure = dlq.entries(client, key, { app = args.app, handler = args.handler })
        for entry in next_entry do
            ids[#ids + 1] = entry
        end
        if failure() then
            exit.env("reading the DLQ failed: " .. failure())
        end
        for _, entry in ipairs(ids) do
            problems = problems + (fn(entry) and 0 or 1)
        end
        return problems
    end
    if #args.ids == 0 then
        exit.usage("give DLQ entry ids, or --all")
    end
    for _, id in ipairs(args.ids) do
        local entry, err = dlq.get(client, key, id)
        if not entry then
            io.stderr:write("relay: ", err and ("reading " .. id .. " failed: " .. err) or ("no DLQ entry " .. id),
                "\n")
            problems = problems + 1
        elseif (args.app and entry.fields.app ~= args.app)
            or (args.handler and entry.fields.handler ~= args.handler) then
            io.stderr:write("relay: ", id, " does not match --app/--handler; skipped\n")
            problems = problems + 1
        else
            problems = problems + (fn(entry) and 0 or 1)
        end
    end
    return problems
end


local function replay(args)
    local client, key = open(args)
    local problems = each_selected(args, client, key, function(entry)
        local why = dlq.refusal(entry)
        if why then
            io.stderr:write("relay: refusing to replay ", entry.id, ": ", why, "\n")
            return false
        end
        local new_id, err = dlq.replay(client, key, entry)
        if not new_id then
            io.stderr:write("relay: replaying ", entry.id, " failed: ", err, "\n")
            return false
        end
        print(new_id)
        return true
    end)
    client:close()
    return problems > 0 and 1 or 0
end


local function rm(args)
    local client, key = open(args)
    local removed = 0
    local problems = each_selected(args, client, key, function(entry)
        local n, err = client:call("XDEL", key, entry.id)
        if not n then
            io.stderr:write("relay: removing ", entry.id, " failed: ", err, "\n")
            return false
        end
        removed = removed + n
        return true
    end)
    client:close()
    print(removed)
    return problems > 0 and 1 or 0
end


local SUBCOMMANDS = { ls = ls, inspect = inspect, replay = replay, rm = rm }


function _M.execute(args)
    return SUBCOMMANDS[args.dlq_command](args)
end


return _M
