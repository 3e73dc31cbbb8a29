--- relay completion bash|zsh|fish: a completion script for the shell, made
-- by lua-argparse's own generators from the whole command tree, so it
-- always knows exactly the commands and flags this binary accepts.
--   source <(relay completion bash)
--   relay completion zsh > "${fpath[1]}/_relay"
--   relay completion fish > ~/.config/fish/completions/relay.fish
-- The packages install the three scripts where each shell finds them.
local _M = {}

_M.SHELLS = { "bash", "zsh", "fish" }


function _M.configure(cmd)
    cmd:argument("shell", "The shell: bash, zsh or fish."):choices(_M.SHELLS)
end


--- Declares entries ({name, summary} pairs, as in relay.cli) on parser with
-- every module loaded and configured: a normal run configures only the
-- command it runs (relay.subcommands), which would leave the others empty.
local function declare_all(parser, prefix, entries)
    for _, entry in ipairs(entries) do
        local cmd = parser:command(entry[1], entry[2])
        local mod = require(prefix .. entry[1])
        if mod.entries then  -- a group (relay.subcommands.group): relay X Y is relay.cmd.X_Y
            cmd:require_command(true)
            declare_all(cmd, prefix .. entry[1] .. "_", mod.entries)
        else
            mod.configure(cmd, {})
        end
    end
end


--- The complete parser: every command and sub-command with its arguments
-- (also the source of the manual page's command reference).
function _M.full_parser()
    local cli = require("relay.cli")
    local parser = cli.new_parser()
    declare_all(parser, "relay.cmd.", cli.COMMANDS)
    return parser
end


--- The script for shell (one of SHELLS).
function _M.script(shell)
    local parser = _M.full_parser()
    if shell == "bash" then
        return parser:get_bash_complete()
    elseif shell == "zsh" then
        return parser:get_zsh_complete()
    elseif shell == "fish" then
        return parser:get_fish_complete()
    end
    error("unknown shell " .. tostring(shell))
end


function _M.execute(args)
    io.stdout:write(_M.script(args.shell))
    return 0
end


return _M
