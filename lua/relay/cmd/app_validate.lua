--- relay app validate [DIR...]: validate apps (default: every app under --apps).
-- Each DIR is an app directory holding template.yaml, a template file, or an apps directory
-- (every app inside it is validated).
-- Prints `ok <app>` per valid app on stdout and `relay: FILE:LINE:COL: message` per
-- error of an invalid one on stderr (every error of the file); exit 1 if any is invalid, 0 otherwise.
local apps = require("relay.apps")
local command_path = require("relay.runtime.command_path")
local config = require("relay.config")
local exit = require("relay.exit")

local _M = {}


function _M.configure(cmd)
    cmd:argument("dirs", "App directories (each holding template.yaml)."):args("*")
    cmd:flag("--json", "One JSON object per app.")
    config.add_flags(cmd, { "apps" })
end


local function basename(path)
    return path:match("([^/]+)/*$") or path
end


local function dirname(path)
    local dir = path:match("^(.*)/[^/]*$")
    if dir == nil then
        return "."
    end
    return dir == "" and "/" or dir
end


local function file_exists(path)
    local f = io.open(path, "rb")
    if f then
        f:close()
        return true
    end
    return false
end


--- The apps named by one DIR argument, appended to `list`: an app directory (holding
-- template.yaml), a template file, or an apps directory (no template.yaml of its own but
-- app subdirectories), whose apps are all validated.
local function load_arg(arg, list)
    local dir = arg:match("%.ya?ml$") and dirname(arg) or arg:gsub("(.)/+$", "%1")
    local name = basename(dir)
    if arg:match("%.ya?ml$") and basename(arg) ~= "template.yaml" then
        local f, err = io.open(arg, "rb")
        if not f then
            list[#list + 1] = { name = name, dir = dir, state = "invalid", error = arg .. ": cannot read: " .. err }
            return
        end
        local text = f:read("*a")
        f:close()
        list[#list + 1] = apps.validate(text, arg, name, dir)
        return
    end
    if not file_exists(dir .. "/template.yaml") then
        local inner = apps.load_all(dir)
        if inner and #inner > 0 then
            for _, app in ipairs(inner) do
                list[#list + 1] = app
            end
            return
        end
    end
    local app = apps.load_app(dirname(dir), name)
    list[#list + 1] = app or { name = name, dir = dir, state = "invalid", error = dir .. ": no such directory" }
end


local function print_result(app, json)
    local errors = app.errors or { app.error }
    if json then
        local jsonfmt = require("relay.jsonfmt")
        io.stdout:write(jsonfmt.encode({ app = app.name, state = app.state, error = app.error,
            errors = app.state ~= "ok" and errors or nil }, { "errors" }), "\n")
    elseif app.state == "ok" then
        io.stdout:write("ok ", app.name, "\n")
    else
        for _, err in ipairs(errors) do
            io.stderr:write("relay: ", err, "\n")
        end
    end
end


--- An app whose program is missing from its image, or not executable,
-- becomes invalid here: the daemon would only see exit status 127.
local function check_program(app, images_dir)
    if app.state ~= "ok" or not app.program_at then
        return
    end
    local ok, why = command_path.check(app, images_dir)
    if not ok then
        app.state = "invalid"
        app.error = app.program_at .. ": runtime.command[1]: " .. why
    end
end


function _M.execute(args)
    local list = {}
    if args.dirs and #args.dirs > 0 then
        for _, dir in ipairs(args.dirs) do
            load_arg(dir, list)
        end
    else
        list = exit.or_env(apps.load_all(config.load_or_exit(args).apps))
    end
    local invalid = 0
    local images_dir = config.load_or_exit(args).images
    for _, app in ipairs(list) do
        check_program(app, images_dir)
        print_result(app, args.json)
        if app.state ~= "ok" then
            invalid = invalid + 1
        end
    end
    return invalid > 0 and 1 or 0
end


return _M
