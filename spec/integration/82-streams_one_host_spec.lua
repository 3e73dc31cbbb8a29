-- Several Relays on one host: one process per stream, with the same
-- consumer name and the same state directory. Each owns its containers
-- (named after its stream and group) and its runtime root: one's start
-- kills nothing of the other, and one restarted after a crash removes its
-- own leftovers although the other still runs.
local fs = require("relay.fs")
local runtime = require("relay.runtime")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil


--- What runc and Relay keep of every container anywhere under the state
-- dir (runc's state, the bundle): { id = true }.
local function containers_kept(state_dir)
    local out = {}
    for _, root in ipairs(fs.list(state_dir) or {}) do
        local base = state_dir .. "/" .. root.name
        for _, e in ipairs(root.dir and fs.list(base .. "/runc") or {}) do
            out[e.name] = e.dir or nil
        end
        for _, app in ipairs(root.dir and fs.list(base .. "/bundles") or {}) do
            for _, e in ipairs(fs.list(base .. "/bundles/" .. app.name) or {}) do
                out[e.name] = e.dir or nil
            end
        end
    end
    return out
end


local function count(set, needle)
    local n = 0
    for id in pairs(set) do
        if id:find(needle, 1, true) then
            n = n + 1
        end
    end
    return n
end


local maybe = usable and describe or pending
maybe("two streams, one consumer name, one state directory", function()
    local w

    before_each(function()
        w = world.new()
    end)

    after_each(function()
        w:close()
    end)

    it("leave each other's containers alone, and each sweeps its own leftovers", function()
        local a = w:daemon("same", { REDIS_STREAM = "alpha" })
        w:ready(a)
        local first = w:publish('{"t":"sleep","s":3}', "alpha")
        a:wait_until(function() return #a:runs("start") == 1 end, 15, "alpha's handler started")
        local running = containers_kept(w.state_dir)
        -- (with the containers its warm pool made meanwhile, named alike)
        assert.is_true(count(running, "alpha") >= 1, "the container is named after its stream")
        assert.are.equal(0, count(running, "beta"))

        -- The second stream's daemon starts while the first one's handler runs: the handler
        -- finishes and succeeds.
        local b = w:daemon("same", { REDIS_STREAM = "beta" })
        w:ready(b)
        a:wait_until(function()
            local inv = w:call("HGET", "relay:alpha:inv:" .. first, "wa/sleep")
            return type(inv) == "string" and inv:match("^succeeded:1:")
        end, 20, "alpha's handler succeeded")

        -- The first daemon crashes with a handler running; its container ends with it, and its
        -- restart removes what was kept of it (the bundle) while the second daemon still runs.
        w:publish('{"t":"sleep","s":30}', "alpha")
        a:wait_until(function() return #a:runs("start") == 2 end, 15, "alpha's second handler started")
        local crashed = tostring(a.pid)
        a:kill9()
        assert.is_true(count(containers_kept(w.state_dir), "-" .. crashed .. "-") >= 1, "nothing kept of the crash")
        local a2 = w:daemon("same", { REDIS_STREAM = "alpha" })
        w:ready(a2)
        -- a2's sweep removes them; a `runc run` the crash caught creating a (warm)
        -- container may still write its state after that sweep, and removes it as
        -- soon as its relay-init sees the crashed daemon's socket closed
        a2:wait_until(function() return count(containers_kept(w.state_dir), "-" .. crashed .. "-") == 0 end, 15,
            "the crashed daemon's leftovers are gone")
        assert.is_true(b:alive())

        -- Both still work.
        local later_b = w:publish('{"t":"ok"}', "beta")
        b:wait_until(function() return type(w:call("HGET", "relay:beta:inv:" .. later_b, "~retained")) == "string" end,
            15, "beta handles an event")
    end)
end)
