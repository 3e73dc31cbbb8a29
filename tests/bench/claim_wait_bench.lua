-- The cost of RELAY_CLAIM_WAIT, run inside the host against a primary with
-- one replica (tests/bench/claim_wait_bench.sh starts them):
--   relay x-lua tests/bench/claim_wait_bench.lua REDIS_URL N ROUNDS
-- Times claims made the way dispatch makes them (relay.lifecycle: TryStart,
-- then with RELAY_CLAIM_WAIT=1 a WAIT 1 on the claims' own connection),
-- one after another and from 4 tasks at once, with and without the WAIT,
-- rounds alternating which goes first. Prints per-claim latency (median,
-- p99) and claims per second; figures only, nothing is asserted.
local config = require("relay.config")
local lifecycle = require("relay.lifecycle")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local sync = require("relay.sync")

local URL, N, ROUNDS = arg[1], tonumber(arg[2]) or 2000, tonumber(arg[3]) or 3
assert(URL, "usage: claim_wait_bench.lua REDIS_URL [N] [ROUNDS]")
local TASKS = 4
local INV = { label = "bench/h", app = "bench", handler = "h", timeout_ms = 60000, max_attempts = 5 }

local function connect()
    return assert(redis.connect(assert(config.load({ REDIS_URL = URL }))))
end

local function call(c, ...)
    local v, err = c:call(...)
    assert(v ~= nil, err)
    return v
end

--- N delivered messages on a fresh stream; returns its lifecycle.
local function prepare(c, stream, wait)
    call(c, "XGROUP", "CREATE", stream, "g", "0", "MKSTREAM")
    call(c, "EVAL", "for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 'event', '{}') end return 1",
        1, stream, N)
    local ids = {}
    for _, e in ipairs(call(c, "XREADGROUP", "GROUP", "g", "bench", "COUNT", N, "STREAMS", stream, ">")[1][2]) do
        ids[#ids + 1] = e[1]
    end
    local life = lifecycle.new({ client = c, stream = stream, group = "g", consumer = "bench", instance = "b" })
    if wait then
        life:use_claim_wait(connect(), { replicas = 1, timeout_ms = 1000 })
    end
    return life, ids
end

--- Claims ids[first], ids[first + step]…; appends each claim's ms to out.
local function claim_all(life, ids, first, step, out)
    for i = first, #ids, step do
        local msg = { id = ids[i] }
        local t0 = loop.monotonic()
        local r = assert(life:try_start(msg, INV, life:token(msg, INV)))
        assert(r[1] == "start", r[2])
        assert(life:replicated())
        out[#out + 1] = (loop.monotonic() - t0) * 1000
    end
end

local function percentile(sorted, p)
    return sorted[math.max(1, math.ceil(#sorted * p))]
end

--- One measurement: { median, p99, per_second }.
local function measure(c, tag, wait, tasks)
    local life, ids = prepare(c, "bench-" .. tag, wait)
    local lat = {}
    local t0 = loop.monotonic()
    local running = {}
    for t = 1, tasks do
        running[t] = sync.spawn(function() claim_all(life, ids, t, tasks, lat) end)
    end
    for t = 1, tasks do
        assert(running[t].join(600))
    end
    local elapsed = loop.monotonic() - t0
    table.sort(lat)
    return { percentile(lat, 0.5), percentile(lat, 0.99), #lat / elapsed }
end

local function median(list, k)
    local v = {}
    for i, m in ipairs(list) do
        v[i] = m[k]
    end
    table.sort(v)
    return v[math.ceil(#v / 2)]
end

local c = connect()
call(c, "FLUSHALL")
local replicas = call(c, "WAIT", 1, 2000)
assert(replicas >= 1, "no replica acknowledges writes")
for _, tasks in ipairs({ 1, TASKS }) do
    local plain, waited = {}, {}
    for round = 1, ROUNDS do
        local order = round % 2 == 1 and { false, true } or { true, false }
        for _, wait in ipairs(order) do
            local m = measure(c, string.format("%d-%d-%s", tasks, round, tostring(wait)), wait, tasks)
            local list = wait and waited or plain
            list[#list + 1] = m
        end
        call(c, "FLUSHALL")
    end
    print(string.format("%d task(s), %d claims x %d rounds (medians of rounds):", tasks, N, ROUNDS))
    print(string.format("  TryStart            median %.3f ms  p99 %.3f ms  %.0f claims/s",
        median(plain, 1), median(plain, 2), median(plain, 3)))
    print(string.format("  TryStart + WAIT 1   median %.3f ms  p99 %.3f ms  %.0f claims/s",
        median(waited, 1), median(waited, 2), median(waited, 3)))
    print(string.format("  added per claim: %.3f ms (median)", median(waited, 1) - median(plain, 1)))
end
