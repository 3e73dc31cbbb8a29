-- Every command and sub-command has one shape: a module relay.cmd.<name>
-- (or relay.cmd.<group>_<sub>) with configure and execute; none is a stub.
local cli = require("relay.cli")

local function check_shape(name)
    local mod = require("relay.cmd." .. name)
    assert.is_function(mod.configure, name)
    assert.is_function(mod.execute, name)
    return mod
end

describe("commands", function()
    it("gives every command and sub-command its own module", function()
        local groups = {}
        for _, entry in ipairs(cli.COMMANDS) do
            local mod = check_shape(entry[1])
            for _, sub in ipairs(mod.entries or {}) do
                check_shape(entry[1] .. "_" .. sub[1])
                groups[entry[1]] = true
            end
        end
        assert.are.same({ app = true, consumer = true, dlq = true, schedule = true }, groups)
    end)

    it("exits 70 (EX_SOFTWARE) on an internal error, not 1 (not found)", function()
        local real = package.loaded["relay.cmd.version"]
        package.loaded["relay.cmd.version"] = {
            configure = function() end,
            execute = function() error("a bug") end,
        }
        local real_stderr = io.stderr
        local said = {}
        rawset(io, "stderr", { write = function(_, ...) for _, s in ipairs({ ... }) do said[#said + 1] = s end end })
        local ok, code = pcall(cli.main, { "version" })
        rawset(io, "stderr", real_stderr)
        package.loaded["relay.cmd.version"] = real
        assert.is_true(ok, code)
        assert.are.equal(70, code)
        assert.matches("internal error: .*a bug", table.concat(said))
    end)

    it("runs a command that sets JIT = false in the interpreter, others with the JIT", function()
        local parser = cli.new_parser()
        package.loaded["relay.cmd.spec_no_jit"] = { JIT = false, configure = function() end }
        package.loaded["relay.cmd.spec_jit"] = { configure = function() end }
        local subcommands = require("relay.subcommands")
        local ok, err = pcall(function()
            subcommands.declare(parser, "relay.cmd.", { { "spec_jit", "" }, { "spec_no_jit", "" } }, { "spec_jit" })
            assert.is_true((jit.status()))
            subcommands.declare(cli.new_parser(), "relay.cmd.", { { "spec_no_jit", "" } }, { "spec_no_jit" })
            assert.is_false((jit.status()))
        end)
        jit.on()
        package.loaded["relay.cmd.spec_no_jit"], package.loaded["relay.cmd.spec_jit"] = nil, nil
        assert(ok, err)
        assert.is_false(require("relay.cmd.app_invoke").JIT)
    end)
end)
