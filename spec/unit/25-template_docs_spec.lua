-- docs/templates.md is the template reference: every key the validator
-- accepts must be documented there. The accepted keys are read from the
-- validator itself (its "allowed: ..." list for an unknown key), so a new key
-- without documentation fails here.
local apps = require("relay.apps")
local fs = require("relay.fs")

local HERE = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$")
local DOC = fs.read_file(HERE .. "/../../docs/templates.md")

-- Templates with one unknown key in each map the validator checks.
local PROBES = {
    top = "zz_unknown: 1\n",
    runtime = "runtime: {zz_unknown: 1}\n",
    events = "events:\n  - {handler: h, pattern: {a: [1]}, zz_unknown: 1}\n",
    schedules = "schedules:\n  - {name: s, handler: h, every: 1m, zz_unknown: 1}\n",
    secrets = "runtime:\n  secrets: [{name: a, zz_unknown: 1}]\n",
    mounts = "runtime:\n  mounts: [{source: /a, target: /b, zz_unknown: 1}]\n",
}


local function allowed_keys(text)
    local app = apps.validate(text, "t.yaml", "probe", "/tmp")
    assert.are.equal("invalid", app.state)
    local list = app.error:match("%(allowed: ([^)]*)%)")
    assert.is_not_nil(list, app.error)
    local keys = {}
    for key in list:gmatch("[%w_]+") do
        keys[#keys + 1] = key
    end
    return keys
end


describe("docs/templates.md", function()
    it("exists", function()
        assert.is_not_nil(DOC)
    end)

    for section, text in pairs(PROBES) do
        it("documents every " .. section .. " key the validator accepts", function()
            local keys = allowed_keys(text)
            assert.is_true(#keys >= 2, section)
            for _, key in ipairs(keys) do
                assert.truthy(DOC:find("| `" .. key .. "` |", 1, true), "docs/templates.md lacks `" .. key .. "`")
            end
        end)
    end
end)
