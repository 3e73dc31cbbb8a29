--- The build's precompiled Lua tree (src/lua_bytecode.c loads it): one file
-- per module, its LuaJIT bytecode behind a header naming the source file with
-- its size and modification time, so a source edited since is parsed again.
local core = require("relay.core.bytecode")
local fs = require("relay.fs")

local _M = {}

-- Modules from outside the tree that every command loads (the parser).
_M.EXTRA_MODULES = { "argparse" }


--- Writes `dir`/<name>.bc for the module `name` found at `path`; true or
-- nil, err. Written aside and renamed: a loader never sees half a file.
function _M.compile_module(name, path, dir)
    local signature = core.signature(path)
    if not signature then
        return nil, "cannot stat " .. path
    end
    local chunk, err = loadfile(path)
    if not chunk then
        return nil, err
    end
    local target = dir .. "/" .. name .. ".bc"
    local ok, werr = fs.write_file(target .. ".tmp",
        core.MAGIC .. signature .. " " .. path .. "\n" .. string.dump(chunk))
    if not ok then
        return nil, werr
    end
    local moved, merr = os.rename(target .. ".tmp", target)
    if not moved then
        return nil, merr
    end
    return true
end


--- The module names of the Lua files under `root` (relay/x/init.lua is relay.x).
function _M.tree_modules(root, prefix, out)
    out = out or {}
    for _, e in ipairs(fs.list(root) or {}) do
        local path = root .. "/" .. e.name
        if e.dir then
            _M.tree_modules(path, (prefix or "") .. e.name .. ".", out)
        elseif e.name:match("%.lua$") then
            local name = (prefix or "") .. e.name:gsub("%.lua$", "")
            out[#out + 1] = (name:gsub("%.init$", ""))
        end
    end
    return out
end


--- Compiles every module of the tree at `lua_dir` and the extra modules,
-- each as require finds it on package.path, into `dir`; removes the files of
-- modules no longer there. Returns the count, or nil, err.
function _M.compile_tree(lua_dir, dir)
    local ok, err = fs.mkdir_p(dir, 493)
    if not ok then
        return nil, err
    end
    local names = _M.tree_modules(lua_dir)
    for _, extra in ipairs(_M.EXTRA_MODULES) do
        names[#names + 1] = extra
    end
    local written = {}
    for _, name in ipairs(names) do
        local path = package.searchpath(name, package.path)
        if path then
            ok, err = _M.compile_module(name, path, dir)
            if not ok then
                return nil, err
            end
            written[name .. ".bc"] = true
        end
    end
    for _, e in ipairs(fs.list(dir) or {}) do
        if not written[e.name] and e.name:sub(1, 1) ~= "." then
            fs.unlink(dir .. "/" .. e.name)
        end
    end
    return #names
end


return _M
