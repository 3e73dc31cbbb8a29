--- Runs the relay binary under test (the very binary hosting these specs,
-- unless RELAY_BIN says otherwise) and captures its stdout, stderr and status.
--   local r = cli.run({ "publish", "{}" }, { REDIS_URL = url }, stdin_text)
--   r.code, r.stdout, r.stderr
local fs = require("relay.fs")
local tmp = require("helpers.tmp")

local _M = {}


local function quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
_M.quote = quote


local function binary()
    local from_env = os.getenv("RELAY_BIN")
    if from_env and from_env ~= "" then
        return from_env
    end
    local p = io.popen("readlink -f /proc/" .. require("relay.core.loop").getpid() .. "/exe")
    local path = p:read("*l")
    p:close()
    return path
end
_M.binary = binary


local function slurp(path)
    local f = io.open(path, "rb")
    if not f then
        return ""
    end
    local data = f:read("*a")
    f:close()
    return data
end


--- Runs relay with args; env adds variables (false removes one).
function _M.run(args, env, stdin)
    local dir = tmp.mkdtemp("relay-cli-")
    local words = { "env" }
    for k, v in pairs(env or {}) do
        if v == false then
            words[#words + 1] = "-u " .. k
        else
            words[#words + 1] = k .. "=" .. quote(v)
        end
    end
    words[#words + 1] = quote(binary())
    for _, a in ipairs(args) do
        words[#words + 1] = quote(a)
    end
    local stdin_path = dir .. "/in"
    local f = assert(io.open(stdin_path, "wb"))
    f:write(stdin or "")
    f:close()
    local cmd = string.format("%s <%s >%s/out 2>%s/err; echo $? >%s/rc", table.concat(words, " "),
        stdin_path, dir, dir, dir)
    os.execute(cmd)
    local result = {
        code = tonumber(slurp(dir .. "/rc")),
        stdout = slurp(dir .. "/out"),
        stderr = slurp(dir .. "/err"),
    }
    fs.rm_rf(dir)
    return result
end


return _M
