-- Precompiles the Lua tree for src/lua_bytecode.c (the build runs it):
--   relay x-lua scripts/compile_bytecode.lua OUT_DIR
local bytecode = require("relay.bytecode")

local out = assert(arg[1], "usage: relay x-lua scripts/compile_bytecode.lua OUT_DIR")
-- the tree this binary loads (src/lua_boot.c sets it)
local lua_dir = rawget(package, "relay_lua_dir")
local n, err = bytecode.compile_tree(lua_dir, out)
if not n then
    io.stderr:write("compile_bytecode: ", err, "\n")
    return 1
end
return 0
