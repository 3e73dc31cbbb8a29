--- relay version: Relay's version and its libraries'.
local build = require("relay.core.build")

local _M = {}


function _M.configure(cmd)
    cmd:flag("--json", "One JSON object.")
end


function _M.execute(args)
    if args.json then
        local cjson = require("cjson")
        print(cjson.encode({
            relay = build.version, luajit = build.luajit, hiredis = build.hiredis,
            libev = build.libev, libyaml = build.libyaml, test_constants = build.test_constants and true or nil,
        }))
        return 0
    end
    print("relay " .. build.version)
    print(build.luajit)
    print("hiredis " .. build.hiredis)
    print("libev " .. build.libev)
    print("libyaml " .. build.libyaml)
    if build.test_constants then
        print("test build: compressed lifecycle waits (seconds for minutes); not for production")
    end
    return 0
end


return _M
