-- The daemon's permits (relay.slots): MAX_CONCURRENCY over every app, each
-- app's own limit, a release bound to what was taken, resizing in place on
-- a reload, the running count and the running containers' handles.
local slots_mod = require("relay.slots")
local sync = require("relay.sync")

local NOW = 0          -- a wait that must fail at once
local LONG = 5         -- a wait that must succeed: generous, never reached


--- Slots over apps whose limits live in `limits` (changed by the specs).
local function new_slots(max, limits)
    return slots_mod.new({ max = max, limit_of = function(name) return limits[name] or max end })
end


--- Takes n permits of app, asserting each one came.
local function take(slots, app, n)
    local releases = {}
    for i = 1, n do
        releases[i] = assert(slots:acquire(app, NOW), "permit " .. i .. " of " .. app)
    end
    return releases
end


--- Starts a task waiting up to LONG for a permit of app.
local function waiter(slots, app)
    return sync.spawn(function() return slots:acquire(app, LONG) end)
end


describe("slots", function()
    it("hold an app to its limit and every app to the global one", function()
        local slots = new_slots(3, { a = 2 })
        take(slots, "a", 2)
        assert.is_nil(slots:acquire("a", NOW))
        take(slots, "b", 1)
        assert.is_nil(slots:acquire("b", NOW))  -- global: 3 taken
    end)

    it("give the global permit back when the app has none left", function()
        local slots = new_slots(2, { a = 1 })
        take(slots, "a", 1)
        assert.is_nil(slots:acquire("a", NOW))
        take(slots, "b", 1)  -- the failed acquire kept no global permit
    end)

    it("release exactly what was taken, once", function()
        local slots = new_slots(2, { a = 1 })
        local release = take(slots, "a", 1)[1]
        release()
        release()
        take(slots, "a", 1)
        take(slots, "b", 1)
        assert.is_nil(slots:acquire("b", NOW))  -- a second release added no permit
    end)

    it("count the permits held under a raised limit", function()
        local limits = { a = 1 }
        local slots = new_slots(8, limits)
        local old = take(slots, "a", 1)[1]
        limits.a = 2
        slots:resize()
        local new = take(slots, "a", 1)[1]
        assert.is_nil(slots:acquire("a", NOW))
        old()
        new()
        take(slots, "a", 2)
        assert.is_nil(slots:acquire("a", NOW))  -- the releases did not add up to more than 2
    end)

    it("hold new starts after a lowered limit until enough old holders are gone", function()
        local limits = { a = 2 }
        local slots = new_slots(8, limits)
        local held = take(slots, "a", 2)
        limits.a = 1
        slots:resize()
        local next_one = waiter(slots, "a")
        held[1]()
        assert.is_nil(slots:acquire("a", NOW))  -- one still runs: the limit is reached
        held[2]()
        local ok, release = next_one.join(LONG)
        assert.is_true(ok)
        assert.is_function(release)
        assert.is_nil(slots:acquire("a", NOW))
    end)

    it("wake a waiter when a reload raises the limit", function()
        local limits = { a = 1 }
        local slots = new_slots(8, limits)
        take(slots, "a", 1)
        local next_one = waiter(slots, "a")
        limits.a = 2
        slots:resize()
        local ok, release = next_one.join(LONG)
        assert.is_true(ok)
        assert.is_function(release)
    end)

    it("make an app's pool with its limit at the time of its first start", function()
        local limits = { a = 1 }
        local slots = new_slots(8, limits)
        slots:resize()  -- no pool yet: nothing to resize
        limits.a = 3
        take(slots, "a", 3)
        assert.is_nil(slots:acquire("a", NOW))
    end)

    it("count running invocations and terminate their containers", function()
        local slots = new_slots(2, {})
        local leave = slots:enter()
        assert.are.equal(1, slots.running)
        leave()
        leave()
        assert.are.equal(0, slots.running)
        assert.is_false(slots:terminate_all())
        local terminated = 0
        local handle = { terminate = function() terminated = terminated + 1 end }
        local untrack = slots:track(handle)
        assert.is_true(slots:terminate_all())
        untrack()
        assert.is_false(slots:terminate_all())
        assert.are.equal(1, terminated)
    end)
end)
