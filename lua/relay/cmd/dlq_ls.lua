--- relay dlq ls: dead letters oldest first, one line each (id,
-- app/handler, handler_attempts, timestamp, reason), or one JSON object each.
local cjson = require("cjson")
local dlq = require("relay.dlq")
local dlq_cmd = require("relay.cmd.dlq")
local exit = require("relay.exit")

local _M = {}


function _M.configure(cmd)
    dlq_cmd.filter_flags(cmd)
    cmd:option("--limit", "At most N entries.", nil, tonumber):argname("<n>")
    cmd:flag("--json", "One JSON object per entry.")
end


local function line(entry, json)
    local f = entry.fields
    if json then
        local record = { id = entry.id }
        for k, v in pairs(f) do
            record[k] = v
        end
        return cjson.encode(record)
    end
    return table.concat({ entry.id, (f.app or "-") .. "/" .. (f.handler or "-"), f.handler_attempts or "0",
        f.timestamp or "", f.reason or "" }, "\t")
end


function _M.execute(args)
    if args.limit and (args.limit < 1 or args.limit % 1 ~= 0) then
        exit.usage("--limit must be a whole number of at least 1")
    end
    local client, key = dlq_cmd.open(args)
    local next_entry, failure = dlq.entries(client, key, { app = args.app, handler = args.handler })
    local shown = 0
    for entry in next_entry do
        print(line(entry, args.json))
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


return _M
