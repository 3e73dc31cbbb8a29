--- relay dlq rm ID… | --all: delete entries; prints how many were removed
-- (--json: {"removed":N}), exit 1 if any was missing or failed.
local dlq_cmd = require("relay.cmd.dlq")

local _M = {}


function _M.configure(cmd)
    dlq_cmd.selection_args(cmd)
end


function _M.execute(args)
    local client, key = dlq_cmd.open(args)
    local removed = 0
    local problems = dlq_cmd.each_selected(args, client, key, function(entry)
        local n, err = client:call("XDEL", key, entry.id)
        if not n then
            io.stderr:write("relay: removing ", entry.id, " failed: ", err, "\n")
            return false
        end
        removed = removed + n
        return true
    end)
    client:close()
    print(args.json and ('{"removed":' .. removed .. "}") or removed)
    return problems > 0 and 1 or 0
end


return _M
