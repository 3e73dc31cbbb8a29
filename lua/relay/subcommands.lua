--- The one shape of every command: a module returning configure(cmd, rest)
-- (declares its arguments on its argparse command; rest is the argv after
-- its name) and execute(args) (runs it, returns the exit code). `relay X`
-- is the module relay.cmd.X; a command with sub-commands is a group, and
-- `relay X Y` is the module relay.cmd.X_Y. A module may set JIT = false: a
-- one-shot command that runs too little Lua for LuaJIT's trace compilation
-- to pay for itself runs in the interpreter.
local _M = {}


--- Declares entries ({name, summary} pairs) as the sub-commands of parser,
-- each the module prefix .. name, and loads and configures only the one
-- argv[1] names: the others show just their summary in help, and loading
-- every module would cost each invocation milliseconds.
-- @return the selected module, or nil when argv[1] names none of them
function _M.declare(parser, prefix, entries, argv)
    local chosen
    for _, entry in ipairs(entries) do
        local name, summary = entry[1], entry[2]
        local cmd = parser:command(name, summary)
        if name == argv[1] then
            chosen = require(prefix .. name)
            if chosen.JIT == false then
                jit.off()
            end
            chosen.configure(cmd, { unpack(argv, 2) })
        else
            cmd:argument("rest", "arguments"):args("*")
            cmd:handle_options(false)
        end
    end
    return chosen
end


--- A command made of sub-commands (entries: {name, summary} pairs in help
-- order): `relay <name> <sub>` runs the module relay.cmd.<name>_<sub>.
function _M.group(name, entries)
    local prefix, target = "relay.cmd." .. name .. "_", name .. "_command"
    return {
        entries = entries,
        configure = function(cmd, rest)
            cmd:command_target(target)
            cmd:require_command(true)
            _M.declare(cmd, prefix, entries, rest)
        end,
        execute = function(args)
            return require(prefix .. args[target]).execute(args)
        end,
    }
end


return _M
