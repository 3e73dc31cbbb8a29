--- relay dlq inspect ID: every field of a dead letter, the event
-- pretty-printed, the handler's output tail; or one JSON object.
local config = require("relay.config")
local dlq = require("relay.dlq")
local dlq_cmd = require("relay.cmd.dlq")
local exit = require("relay.exit")
local jsonfmt = require("relay.jsonfmt")
local text = require("relay.text")

local _M = {}



function _M.configure(cmd)
    cmd:argument("id", "The DLQ entry id.")
    cmd:flag("--json", "One JSON object.")
    config.add_flags(cmd, { "redis_url", "stream" })
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
    for _, name in ipairs(dlq_cmd.FIELD_ORDER) do
        if entry.fields[name] then
            print_field(name, entry.fields[name])
            shown[name] = true
        end
    end
    for _, name in ipairs(dlq_cmd.sorted_names(entry.fields, shown)) do
        print_field(name, entry.fields[name])
    end
    print_event(entry.fields.event or "")
    if entry.fields.output and entry.fields.output ~= "" then
        print_output(entry.fields.output)
    end
end


function _M.execute(args)
    dlq_cmd.check_ids({ args.id })
    local client, key = dlq_cmd.open(args)
    local entry, err = dlq.get(client, key, args.id)
    client:close()
    if not entry then
        if err then
            exit.env(err)
        end
        exit.negative("no DLQ entry " .. args.id)
    end
    if args.json then
        print(dlq_cmd.json_entry(entry))
        return 0
    end
    print_entry(entry)
    return 0
end


return _M
