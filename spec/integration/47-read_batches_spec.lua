-- The size of reads of new entries. While reads bring only unmatched
-- entries and no message is in flight, each read asks for twice as many as
-- the one before, up to 256 (fewer round trips per event on the unmatched
-- path); a read holding a matched entry brings the batch back to
-- max(16, 2 × MAX_CONCURRENCY), so a replica does not hoard work the others
-- could share. Seen in the COUNT of each XREADGROUP (redis-cli MONITOR).
local world = require("helpers.world")

local maybe = world.usable() and describe or pending

local UNMATCHED = '{"t":"none"}'


--- Appends n events in one script (one round trip).
local function publish_many(w, n, event)
    w:call("EVAL", "for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 'event', ARGV[2]) end", 1,
        "events", n, event)
end


--- The COUNT of every XREADGROUP of new entries MONITOR saw, in order.
local function read_counts(m)
    local counts = {}
    for _, line in ipairs(m.lines) do
        local count = line:match('"XREADGROUP".-"COUNT" "(%d+)".-">"$')
        if count then
            counts[#counts + 1] = tonumber(count)
        end
    end
    return counts
end


--- Index of the first value v in list after index from (or nil).
local function find_after(list, v, from)
    for i = from + 1, #list do
        if list[i] == v then
            return i
        end
    end
    return nil
end


maybe("reads of new entries", function()
    local w

    after_each(function() w = world.close(w) end)

    it("double while only unmatched entries arrive, up to 256, and shrink back when one matches", function()
        w = world.new()
        publish_many(w, 600, UNMATCHED)
        local matched = w:publish('{"t":"ok"}')
        publish_many(w, 600, UNMATCHED)
        local m = w:monitor()
        local d = w:daemon("c1", { MAX_CONCURRENCY = "4" })
        d:wait_until(function() return w:inv(matched)["~retained"] and w:pending() == 0 end, 60,
            "every entry settled")
        local counts = read_counts(m)
        local top = find_after(counts, 256, 0)
        assert.is_truthy(top, "no read asked for 256: " .. table.concat(counts, " "))
        for _, c in ipairs(counts) do
            assert.is_true(c <= 256, "a read asked for " .. c)
        end
        -- the batch of 256 that held the matched entry is followed by one of the wanted 16
        local back = find_after(counts, 16, top)
        assert.is_truthy(back, "no read of 16 after the matched entry: " .. table.concat(counts, " "))
        assert.are.equal(0, d:stop("TERM").code)
    end)
end)
