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
        assert.are.same({ app = true, dlq = true, schedule = true }, groups)
    end)
end)
