-- The daemon's per-event matching cost as rules grow, run inside the host:
--   relay x-lua tests/bench/match_rules_bench.lua [ROUNDS] [EVENTS]
-- Matchers of 1, 100 and 10,000 rules of two shapes — `exact` (one literal on
-- properties.MAPBLKLOT, as many-exact-10k) and `mixed` (literal ∧ prefix ∧
-- literal, as many-mixed-1k) — match the same CityLots-shaped events with
-- m:match(), the call the daemon makes per event (binding and result table
-- included). Per round the sizes are interleaved, so drift hits them alike;
-- the figure is the median over the rounds of CPU ns/event, with its ratio to
-- the 1-rule matcher of the same shape measured in the same run. Prints only;
-- nothing is asserted (timings are too noisy for that on a shared machine).
local matcher = require("relay.core.matcher")

local ROUNDS = tonumber(arg and arg[1]) or 7
local EVENTS = tonumber(arg and arg[2]) or 20000
local SIZES = { 1, 100, 10000 }
local MAX_BYTES = 1048576
local NOW_MS = 1767225600000
local STREETS = { "MISSION", "JEFFERSON", "BEACH", "HYDE", "LARKIN", "POLK", "CHESTNUT", "17TH" }

local fmt = string.format


local function median(t)
    table.sort(t)
    local n = #t
    return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end


local function blklot(i)
    return fmt("%04d%03d", i % 10000, i % 997)
end


--- One CityLots-shaped event (a lot with a 12-point polygon); i varies its fields.
local function event(i)
    local points = {}
    for p = 1, 12 do
        points[p] = fmt("[%.14f,%.14f,0]", -122.51 + p * 1e-5 + i * 1e-7, 37.80 - p * 1e-5)
    end
    return fmt('{"type":"Feature","properties":{"MAPBLKLOT":"%s","BLKLOT":"%s","BLOCK_NUM":"%04d",'
        .. '"LOT_NUM":"%03d","FROM_ST":"%d","TO_ST":"%d","STREET":"%s","ST_TYPE":"ST","ODD_EVEN":"%s"},'
        .. '"geometry":{"type":"Polygon","coordinates":[[%s]]}}',
        blklot(i), blklot(i), i % 10000, i % 997, 1400 + i % 50, 1410 + i % 50, STREETS[i % #STREETS + 1],
        i % 2 == 0 and "E" or "O", table.concat(points, ","))
end


local SHAPES = {
    exact = function(i)
        return fmt('{"properties":[{"group":{"MAPBLKLOT":[{"eq":"%s"}]}}]}', blklot(i * 7919))
    end,
    mixed = function(i)
        return fmt('{"properties":[{"group":{"STREET":[{"eq":"%s"}],"MAPBLKLOT":[{"prefix":"%03d"}],'
            .. '"ODD_EVEN":[{"eq":"%s"}]}}]}', STREETS[i % #STREETS + 1], i % 1000, i % 2 == 0 and "E" or "O")
    end,
}


local function build(shape, n)
    local m = matcher.new()
    local rules = {}
    for i = 1, n do
        rules[i] = SHAPES[shape](i - 1)
    end
    assert(m:add_many(rules))
    assert(m:compile())
    return m
end


--- CPU ns per event for one pass over the events; also the matches seen.
local function pass(m, events)
    local matches = 0
    local t0 = os.clock()
    for i = 1, #events do
        matches = matches + #m:match(events[i], MAX_BYTES, NOW_MS)
    end
    return (os.clock() - t0) * 1e9 / #events, matches
end


local function main()
    local events = {}
    for i = 1, 1000 do
        events[i] = event(i * 37)
    end
    local passes = math.max(1, math.floor(EVENTS / #events))
    print(fmt("per-event matching cost (m:match, CPU ns/event), %d rounds x %d events, median", ROUNDS,
        passes * #events))
    print(fmt("%-6s %8s %12s %10s %10s", "shape", "rules", "ns/event", "vs 1 rule", "matches"))
    for _, shape in ipairs({ "exact", "mixed" }) do
        local matchers, times, matches = {}, {}, {}
        for _, n in ipairs(SIZES) do
            matchers[n], times[n] = build(shape, n), {}
            pass(matchers[n], events) -- warm-up: JIT traces, scratch memory
        end
        for _ = 1, ROUNDS do
            for _, n in ipairs(SIZES) do
                local total = 0
                for _ = 1, passes do
                    local ns, seen = pass(matchers[n], events)
                    total = total + ns
                    matches[n] = seen
                end
                times[n][#times[n] + 1] = total / passes
            end
        end
        local base = median(times[1])
        for _, n in ipairs(SIZES) do
            local ns = median(times[n])
            print(fmt("%-6s %8d %12.0f %10.2f %10d", shape, n, ns, ns / base, matches[n]))
        end
    end
end

main()
