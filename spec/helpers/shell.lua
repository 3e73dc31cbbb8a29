--- Shell commands for spec helpers: whether one succeeded, or its output.
local _M = {}


--- true when cmd exited 0.
function _M.ok(cmd)
    local status = os.execute(cmd)
    return status == 0 or status == true
end


--- cmd's stdout and stderr, trailing whitespace removed.
function _M.output(cmd)
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("*a")
    p:close()
    return (out:gsub("%s+$", ""))
end


return _M
