--- The `relay` command line: one lua-argparse parser, one module per command
-- under relay.cmd (the shape is relay.subcommands'), one protected call.
-- Runs inside the host's main task, so commands may use the yielding APIs
-- (Redis, sleep, processes).
local argparse = require("argparse")
local exit = require("relay.exit")
local subcommands = require("relay.subcommands")

local _M = {}

-- Every command, in the order `relay --help` lists them.
_M.COMMANDS = {
    { "run", "Run the daemon: consume, dispatch, reclaim, schedule, trim." },
    { "dev", "Like run, with a private redis-server when REDIS_URL is unset." },
    { "publish", "Append an external event (a JSON object) to the stream." },
    { "match", "Show which invocations an event would start." },
    { "app", "List, validate, invoke, pause and resume apps." },
    { "dlq", "List, inspect, replay and remove dead letters." },
    { "schedule", "List schedules and their next occurrences." },
    { "status", "Show stream, group, consumers, DLQ and paused apps." },
    { "consumer", "List the group's consumers; remove a dead one." },
    { "version", "Show the versions of relay and its libraries." },
    { "completion", "Print a shell completion script (bash, zsh or fish)." },
}


--- The top-level parser without its commands (relay.cmd.completion adds
-- every one of them to generate scripts and the manual page).
function _M.new_parser()
    return argparse("relay", "Relay: dispatch events from a Redis stream to handlers in containers.")
        :command_target("command")
        :require_command(true)
        :help_max_width(100)
end


-- Only the command being run is loaded and configured (subcommands.declare).
local function build_parser(argv)
    local parser = _M.new_parser()
    return parser, subcommands.declare(parser, "relay.cmd.", _M.COMMANDS, argv)
end


-- EX_SOFTWARE: a bug, told apart from 1 ("not found") and 2 (usage, config).
local INTERNAL_ERROR = 70

local function report(err)
    if exit.is_exit(err) then
        return err
    end
    return { code = INTERNAL_ERROR, message = "internal error: " .. debug.traceback(tostring(err), 2) }
end


--- Runs a Lua file inside the host with `arg` set (the spec launcher and
-- developer scripts); not a user command.
local function run_script(argv)
    local path = argv[2]
    if not path then
        io.stderr:write("relay: x-lua needs a script path\n")
        return 2
    end
    local script_args = { [0] = path }
    for i = 3, #argv do
        script_args[#script_args + 1] = argv[i]
    end
    rawset(_G, "arg", script_args)
    local chunk, err = loadfile(path)
    if not chunk then
        io.stderr:write("relay: ", err, "\n")
        return 2
    end
    local result = chunk(unpack(script_args))
    return type(result) == "number" and result or 0
end


--- parser:pparse, except that argparse's os.exit (after --help) becomes
-- a normal return, so the host still closes Lua and its loop cleanly.
-- @return true, args | false, usage message | "exit", code
local function parse(parser, argv)
    local real_exit = os.exit
    local exit_code
    rawset(os, "exit", function(code)
        exit_code = (code == true or code == nil) and 0 or tonumber(code) or 1
        error("argparse asked to exit", 0)
    end)
    local ok, parsed, args = pcall(parser.pparse, parser, argv)
    rawset(os, "exit", real_exit)
    if exit_code ~= nil then
        io.stdout:flush()
        return "exit", exit_code
    end
    if not ok then
        error(parsed, 0)
    end
    return parsed, args
end


-- `relay help [COMMAND…]` is `relay [COMMAND…] --help`; `relay --version`
-- is `relay version`.
local function with_aliases(argv)
    if argv[1] == "help" then
        local rest = { unpack(argv, 2) }
        rest[#rest + 1] = "--help"
        return rest
    end
    if argv[1] == "--version" then
        return { "version", unpack(argv, 2) }
    end
    return argv
end


--- Entry point: the host calls it with argv (without the program name).
-- @return the process exit code
function _M.main(argv)
    if argv[1] == "x-lua" then
        return run_script(argv)
    end
    if #argv == 0 then
        io.stderr:write(_M.new_parser():get_help(), "\n")
        return 2
    end
    argv = with_aliases(argv)
    local parser, command = build_parser(argv)
    local ok, args = parse(parser, argv)
    if ok == "exit" then
        return args
    end
    if not ok then
        io.stderr:write("relay: ", args, " (see relay ", command and (argv[1] .. " ") or "", "--help)\n")
        return 2
    end
    local success, result = xpcall(function()
        return command.execute(args)
    end, report)
    io.stdout:flush()
    if not success then
        if require("relay.core.log").is_json() then
            -- The daemon set RELAY_LOG_FORMAT=json: its last words are a record too.
            require("relay.log").error("relay: " .. result.message, { exit_code = result.code })
            return result.code
        end
        require("relay.log").flush()  -- the daemon's queued records come before its last words
        io.stderr:write("relay: ", result.message, "\n")
        return result.code
    end
    return type(result) == "number" and result or 0
end


return _M
