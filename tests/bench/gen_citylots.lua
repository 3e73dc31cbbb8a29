--- Writes the matcher benchmark's data set: synthetic events shaped like the
-- San Francisco "CityLots" GeoJSON features that public event-matcher
-- benchmarks use (one Feature per line, ~900 bytes, `properties.*` strings
-- and a polygon of [lon, lat, 0] points). Deterministic: the same file,
-- byte for byte, on every run and machine (tests/bench/match_bench.sh
-- checks its md5 and the match counts recorded for it).
--
--   relay x-lua tests/bench/gen_citylots.lua OUT.jsonl [EVENTS]    (default 213068)
--
-- The city is a grid of blocks. Each block gets a street, a number of lots
-- and two tiers of lots (odd addresses on the north side, even on the
-- south); every lot is a rectangle of its block, so neighbours share
-- corners, as real parcels do, and each ring gets extra points along its
-- edges to reach CityLots' size. The grid's north edge is at latitude
-- 37.80780792169409, so lots of the first row carry the coordinate the
-- q-benchmark-citylots workload looks for.
local out_path = arg[1]
local total = tonumber(arg[2] or "213068")
if not out_path or not total then
    io.stderr:write("usage: relay x-lua tests/bench/gen_citylots.lua OUT.jsonl [EVENTS]\n")
    return 2
end

-- Park-Miller "minimal standard" generator (multiplier 48271): exact in
-- doubles (48271 * 2^31 < 2^53), so every platform draws the same numbers.
local MODULUS = 2147483647
local state = 20240613

local function next_int()
    state = (state * 48271) % MODULUS
    return state
end

--- A float in [0, 1).
local function uniform()
    return (next_int() - 1) / (MODULUS - 1)
end

--- An integer in [lo, hi].
local function between(lo, hi)
    return lo + math.floor(uniform() * (hi - lo + 1))
end

-- Streets with their type (nil: the street has none), most frequent first;
-- frequency falls with the rank (weight 1/rank).
local STREETS = {
    { "MISSION", "ST" }, { "UNKNOWN", nil }, { "CALIFORNIA", "ST" }, { "19TH", "AVE" },
    { "GEARY", "BLVD" }, { "HYDE", "ST" }, { "JEFFERSON", "ST" }, { "BEACH", "ST" },
    { "FULTON", "ST" }, { "CHESTNUT", "ST" }, { "17TH", "ST" }, { "FOLSOM", "ST" },
    { "CLEMENT", "ST" }, { "JUDAH", "ST" }, { "BROADWAY", nil }, { "DIAMOND", "ST" },
    { "FUNSTON", "AVE" }, { "BLAKE", "ST" }, { "CHURCH", "ST" }, { "DOLORES", "ST" },
    { "RHODE ISLAND", "ST" }, { "ACTON", "ST" }, { "DRUMM", "ST" }, { "CRANLEIGH", "DR" },
    { "WASHINGTON", "ST" }, { "HARRISON", "ST" }, { "BRYANT", "ST" }, { "24TH", "ST" },
    { "TARAVAL", "ST" }, { "NORIEGA", "ST" }, { "IRVING", "ST" }, { "LINCOLN", "WAY" },
    { "ARGUELLO", "BLVD" }, { "CHENERY", "ST" }, { "BLYTHDALE", "AVE" }, { "DUBOCE", "AVE" },
    { "FILLMORE", "ST" }, { "STOCKTON", "ST" }, { "GRANT", "AVE" }, { "KEARNY", "ST" },
    { "MONTGOMERY", "ST" }, { "SANSOME", "ST" }, { "BATTERY", "ST" }, { "FRONT", "ST" },
    { "GUERRERO", "ST" }, { "VALENCIA", "ST" }, { "ALABAMA", "ST" }, { "POTRERO", "AVE" },
    { "CORTLAND", "AVE" }, { "PORTOLA", "DR" }, { "CLIPPER", "ST" }, { "SLOAT", "BLVD" },
    { "OCEAN", "AVE" }, { "GENEVA", "AVE" }, { "SILVER", "AVE" }, { "BAYSHORE", "BLVD" },
    { "ALEMANY", "BLVD" }, { "HOLLOWAY", "AVE" }, { "BROTHERHOOD", "WAY" }, { "CABRILLO", "ST" },
    { "BALBOA", "ST" }, { "ANZA", "ST" }, { "EDDY", "ST" }, { "TURK", "BLVD" },
    { "PAGE", "ST" }, { "HAIGHT", "ST" }, { "WALLER", "ST" }, { "FREDERICK", "ST" },
    { "KIRKHAM", "ST" }, { "ORTEGA", "ST" }, { "SANTIAGO", "ST" }, { "WAWONA", "ST" },
    { "MORAGA", "ST" }, { "LAWTON", "ST" }, { "QUINTARA", "ST" }, { "ULLOA", "ST" },
    { "VICENTE", "ST" }, { "PACHECO", "ST" }, { "RIVERA", "ST" }, { "YORK", "ST" },
    { "HAMPSHIRE", "ST" }, { "BOSWORTH", "ST" }, { "MONTEREY", "BLVD" }, { "GOLDEN GATE", "AVE" },
    { "NORTH POINT", "ST" }, { "BAY", "ST" }, { "COLUMBUS", "AVE" }, { "LARKIN", "ST" },
    { "TAYLOR", "ST" }, { "MASON", "ST" }, { "GREENWICH", "ST" }, { "26TH", "ST" },
    { "ARMY", "ST" }, { "CESAR CHAVEZ", "ST" }, { "HOWARD", "ST" }, { "MINNA", "ST" },
    { "NATOMA", "ST" }, { "TEHAMA", "ST" }, { "CLEMENTINA", "ST" }, { "18TH", "ST" },
    { "20TH", "ST" }, { "22ND", "ST" }, { "23RD", "ST" }, { "25TH", "ST" },
}

local cumulative, weight_sum = {}, 0
for rank = 1, #STREETS do
    weight_sum = weight_sum + 1 / rank
    cumulative[rank] = weight_sum
end

local function pick_street()
    local r = uniform() * weight_sum
    local lo, hi = 1, #STREETS
    while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if cumulative[mid] < r then
            lo = mid + 1
        else
            hi = mid
        end
    end
    return STREETS[lo]
end

-- The grid: 100 blocks per row from the north-west corner; a block is
-- BLOCK_W degrees of longitude by BLOCK_H of latitude.
local COLUMNS = 100
local WEST, NORTH = -122.51487372361257, 37.80780792169409
local BLOCK_W, BLOCK_H = 0.00098611730981, 0.00071274912143

local function num(x)
    return string.format("%.14f", x)
end

local function point(lon, lat)
    return "[" .. num(lon) .. "," .. num(lat) .. ",0]"
end

--- The ring of a lot: its rectangle's corners, closed, with `extra` points
-- spread along its four edges (the real data traces every bend of a fence).
local function ring(west, east, north, south, extra)
    local corners = { { west, north }, { east, north }, { east, south }, { west, south } }
    local per_edge = { 0, 0, 0, 0 }
    for _ = 1, extra do
        local e = between(1, 4)
        per_edge[e] = per_edge[e] + 1
    end
    local parts = {}
    for e = 1, 4 do
        local a, b = corners[e], corners[e % 4 + 1]
        parts[#parts + 1] = point(a[1], a[2])
        local n = per_edge[e]
        for k = 1, n do
            local t = k / (n + 1)
            parts[#parts + 1] = point(a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)
        end
    end
    parts[#parts + 1] = point(west, north)
    return "[" .. table.concat(parts, ",") .. "]"
end

local function json_string(s)
    return s and ('"' .. s .. '"') or "null"
end

local f = assert(io.open(out_path, "wb"))
local buffer = {}
local written = 0

local function emit(line)
    buffer[#buffer + 1] = line
    written = written + 1
    if #buffer == 2000 then
        f:write(table.concat(buffer, "\n"), "\n")
        buffer = {}
    end
end

local block = 0
while written < total do
    block = block + 1
    local row, col = math.floor((block - 1) / COLUMNS), (block - 1) % COLUMNS
    local west = WEST + col * BLOCK_W
    local north = NORTH - row * BLOCK_H
    local middle, south = north - BLOCK_H / 2, north - BLOCK_H
    local street = pick_street()
    local lots = between(4, 40)
    local north_lots = math.ceil(lots / 2)
    local block_num = string.format("%04d", block % 10000)
    local first_address = street[1] == "UNKNOWN" and 0 or 100 * between(0, 40)
    for lot = 1, lots do
        if written >= total then
            break
        end
        -- Lots 1..north_lots run west to east along the north side (odd
        -- numbers), the rest east to west along the south side (even).
        local tier_lots = lot <= north_lots and north_lots or lots - north_lots
        local slot = lot <= north_lots and lot - 1 or lots - lot
        local lot_w = BLOCK_W / tier_lots
        local lot_west = west + slot * lot_w
        local top, bottom = north, middle
        local address = first_address + 2 * slot + 1
        if lot > north_lots then
            top, bottom = middle, south
            address = first_address + 2 * slot
        end
        if first_address == 0 then
            address = 0
        end
        local span = ({ 0, 0, 0, 2, 4, 10, 48 })[between(1, 7)]
        local mapblklot = block_num .. string.format("%03d", lot)
        -- A few parcels are vacated streets, named after the street.
        if uniform() < 0.0004 then
            mapblklot = "VACST" .. street[1]:sub(1, 3)
        end
        local blklot = uniform() < 0.03 and (mapblklot .. "A") or mapblklot
        local shape = ring(lot_west, lot_west + lot_w, top, bottom, between(0, 21))
        local geometry
        if uniform() < 0.0008 then
            geometry = '{"type":"MultiPolygon","coordinates":[[' .. shape .. ']]}'
        else
            geometry = '{"type":"Polygon","coordinates":[' .. shape .. ']}'
        end
        emit('{"type":"Feature","properties":{"MAPBLKLOT":' .. json_string(mapblklot) ..
            ',"BLKLOT":' .. json_string(blklot) ..
            ',"BLOCK_NUM":' .. json_string(block_num) ..
            ',"LOT_NUM":' .. json_string(string.format("%03d", lot)) ..
            ',"FROM_ST":' .. json_string(tostring(address)) ..
            ',"TO_ST":' .. json_string(tostring(address + (address > 0 and span or 0))) ..
            ',"STREET":' .. json_string(street[1]) ..
            ',"ST_TYPE":' .. json_string(street[2]) ..
            ',"ODD_EVEN":' .. json_string(address % 2 == 0 and "E" or "O") ..
            '},"geometry":' .. geometry .. '}')
    end
end
if #buffer > 0 then
    f:write(table.concat(buffer, "\n"), "\n")
end
assert(f:close())
return 0
