--- relay dlq replay ID… | --all: re-publish each entry to its original
-- stream, targeted at its handler (a schedule entry as its occurrence),
-- then delete it; prints one new id per line (--json: {"dlq_id":…,"id":…}),
-- exit 1 if any was refused, missing or failed (after the rest are done).
local dlq = require("relay.dlq")
local dlq_cmd = require("relay.cmd.dlq")

local _M = {}


function _M.configure(cmd)
    dlq_cmd.selection_args(cmd)
end


local function replay_one(client, key, entry, json)
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
    print(json and string.format('{"dlq_id":"%s","id":"%s"}', entry.id, new_id) or new_id)
    return true
end


function _M.execute(args)
    local client, key = dlq_cmd.open(args)
    local problems = dlq_cmd.each_selected(args, client, key, function(entry)
        return replay_one(client, key, entry, args.json)
    end)
    client:close()
    return problems > 0 and 1 or 0
end


return _M
