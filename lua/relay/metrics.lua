--- This process's metrics (README, Observability), kept in memory and rendered
-- in the Prometheus text format. Counters only grow; fleet-wide totals live
-- in relay:<stream>:stats.
local _M = {}

local Registry = {}
Registry.__index = Registry

local DURATION_BUCKETS = { 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900 }

-- name → { kind, help, labelled }: a labelled family with no series yet
-- renders no sample, an unlabelled one renders 0.
local FAMILIES = {
    relay_events_total = { "counter", "Stream entries classified by this process, by outcome.", true },
    relay_attempts_total = { "counter", "Handler attempts by app, handler and outcome.", true },
    relay_attempt_duration_seconds = { "histogram", "Duration of handler attempts.", true },
    relay_dlq_entries_total = { "counter", "Dead letters written by this process.", true },
    relay_missing_payload_total = { "counter", "Pending entries found without a body (data loss)." },
    relay_trimmed_undelivered_total = { "counter", "Entries trimmed from the stream before the group read them "
        .. "(data loss)." },
    relay_reclaimed_total = { "counter", "Entries claimed from idle consumers by XAUTOCLAIM." },
    relay_running_invocations = { "gauge", "Handler containers running now." },
    relay_redis_reconnects_total = { "counter", "Redis reconnections." },
    relay_start_failures_total = { "counter", "Containers the host failed to start (not attempts).", true },
    relay_warm_starts_total = { "counter", "Attempts started in a pre-created (warm) container.", true },
    relay_stale_token_writes_total = { "counter", "Outcome writes rejected because the token was fenced off." },
    relay_group_recreated_total = { "counter", "Consumer group recreated after NOGROUP." },
    relay_log_dropped_total = { "counter", "Log records dropped because the reader of stderr was too slow." },
    relay_build_info = { "gauge", "Always 1; the labels say which Relay, LuaJIT and hiredis this binary has.", true },
    -- the Prometheus clients' standard process metrics (relay.process_stats)
    process_cpu_seconds_total = { "counter", "Total user and system CPU time spent in seconds." },
    process_resident_memory_bytes = { "gauge", "Resident memory size in bytes." },
    process_open_fds = { "gauge", "Number of open file descriptors." },
    process_start_time_seconds = { "gauge", "Start time of the process since unix epoch in seconds." },
}


local function escape(value)
    return (tostring(value):gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"'))
end


local function label_key(labels)
    if not labels then
        return ""
    end
    local names = {}
    for name in pairs(labels) do
        names[#names + 1] = name
    end
    table.sort(names)
    local parts = {}
    for i, name in ipairs(names) do
        parts[i] = name .. '="' .. escape(labels[name]) .. '"'
    end
    return table.concat(parts, ",")
end


_M.label_key = label_key


function _M.new()
    return setmetatable({ series = {} }, Registry)
end


function Registry:family(name)
    local f = self.series[name]
    if not f then
        assert(FAMILIES[name], "unknown metric " .. name)
        f = {}
        self.series[name] = f
    end
    return f
end


function Registry:inc(name, labels, by)
    local f = self:family(name)
    local key = label_key(labels)
    f[key] = (f[key] or 0) + (by or 1)
end


--- inc with a label key made once by label_key (for per-event counters).
function Registry:inc_key(name, key, by)
    local f = self:family(name)
    f[key] = (f[key] or 0) + (by or 1)
end


function Registry:set(name, value, labels)
    self:family(name)[label_key(labels)] = value
end


function Registry:observe(name, value, labels)
    local f = self:family(name)
    local key = label_key(labels)
    local h = f[key]
    if not h then
        h = { count = 0, sum = 0, buckets = {} }
        for i = 1, #DURATION_BUCKETS do
            h.buckets[i] = 0
        end
        f[key] = h
    end
    h.count = h.count + 1
    h.sum = h.sum + value
    for i, bound in ipairs(DURATION_BUCKETS) do
        if value <= bound then
            h.buckets[i] = h.buckets[i] + 1
        end
    end
end


function Registry:get(name, labels)
    local f = self.series[name]
    return f and f[label_key(labels)] or 0
end


--- A sample value: integers without exponent, others exactly.
local function format_value(v)
    if v ~= v then
        return "NaN"
    elseif v == math.huge or v == -math.huge then
        return v > 0 and "+Inf" or "-Inf"
    elseif v % 1 == 0 and math.abs(v) < 2 ^ 53 then
        return string.format("%d", v)
    end
    return string.format("%.17g", v)
end


local function with_label(key, extra)
    if key == "" then
        return "{" .. extra .. "}"
    end
    return "{" .. key .. "," .. extra .. "}"
end


local function render_histogram(out, name, key, h)
    for i, bound in ipairs(DURATION_BUCKETS) do
        out[#out + 1] = string.format("%s_bucket%s %d", name, with_label(key, 'le="' .. bound .. '"'), h.buckets[i])
    end
    out[#out + 1] = string.format("%s_bucket%s %d", name, with_label(key, 'le="+Inf"'), h.count)
    local suffix = key == "" and "" or "{" .. key .. "}"
    out[#out + 1] = string.format("%s_sum%s %.6f", name, suffix, h.sum)
    out[#out + 1] = string.format("%s_count%s %d", name, suffix, h.count)
end


--- The Prometheus text exposition of every family.
function Registry:render()
    local names = {}
    for name in pairs(FAMILIES) do
        names[#names + 1] = name
    end
    table.sort(names)
    local out = {}
    for _, name in ipairs(names) do
        local kind, help = FAMILIES[name][1], FAMILIES[name][2]
        out[#out + 1] = "# HELP " .. name .. " " .. help
        out[#out + 1] = "# TYPE " .. name .. " " .. kind
        local series = self.series[name] or {}
        local keys = {}
        for key in pairs(series) do
            keys[#keys + 1] = key
        end
        table.sort(keys)
        if #keys == 0 and not FAMILIES[name][3] then
            out[#out + 1] = name .. " 0"
        end
        for _, key in ipairs(keys) do
            if kind == "histogram" then
                render_histogram(out, name, key, series[key])
            else
                out[#out + 1] = string.format("%s%s %s", name, key == "" and "" or "{" .. key .. "}",
                    format_value(series[key]))
            end
        end
    end
    return table.concat(out, "\n") .. "\n"
end


return _M
