--- relay dlq ls: dead letters oldest first, one line each (id,
-- app/handler, handler_attempts, timestamp, reason), or one JSON object each;
-- in pages with --limit N and --after ID (the next page's command is told on
-- stderr when more entries follow).
local dlq = require("relay.dlq")
local dlq_cmd = require("relay.cmd.dlq")
local exit = require("relay.exit")
local listing = require("relay.listing")
local text = require("relay.text")

local _M = {}


function _M.configure(cmd)
    dlq_cmd.filter_flags(cmd)
    cmd:option("--limit", "At most N entries.", nil, tonumber):argname("<n>")
    cmd:option("--after", "Start after this entry id (the cursor of the previous page)."):argname("<id>")
    cmd:flag("--json", "One JSON object per entry.")
    listing.add_flags(cmd)
end


local function line(entry, json)
    local f = entry.fields
    if json then
        return dlq_cmd.json_entry(entry)
    end
    return text.escape(table.concat({ entry.id, (f.app or "-") .. "/" .. (f.handler or "-"),
        f.handler_attempts or "0", f.timestamp or "", f.reason or "" }, "\t"))
end


function _M.execute(args)
    if args.limit and (args.limit < 1 or args.limit % 1 ~= 0) then
        exit.usage("--limit must be a whole number of at least 1")
    end
    if args.after then
        dlq_cmd.check_ids({ args.after })
    end
    local client, key = dlq_cmd.open(args)
    local next_entry, failure = dlq.entries(client, key,
        { app = args.app, handler = args.handler, after = args.after })
    local shown, last = 0, nil
    listing.header(args, { "ID", "APP/HANDLER", "ATTEMPTS", "TIMESTAMP", "REASON" })
    for entry in next_entry do
        if args.limit and shown >= args.limit then
            io.stdout:flush()
            io.stderr:write("relay: more entries follow; the next page: --after ", last, "\n")
            break
        end
        print(line(entry, args.json))
        shown, last = shown + 1, entry.id
    end
    client:close()
    if failure() then
        exit.env("reading the DLQ failed: " .. failure())
    end
    return 0
end


return _M
