--- The fixed lifecycle internals (docs/lifecycle.md), defined
-- here and only here. They are never read from the environment: a test build
-- (cmake -DRELAY_TEST_CONSTANTS=ON) compiles compressed values so integration
-- suites finish in minutes; release builds have these.
local build = require("relay.core.build")

local _M = {}

local SECOND = 1000
local MINUTE = 60 * SECOND

local RELEASE = {
    default_retries = 4,
    backoff_ms = { 1 * MINUTE, 2 * MINUTE, 5 * MINUTE, 10 * MINUTE },
    min_pending_idle_ms = 1 * MINUTE,
    reclaim_every_ms = 15 * SECOND,
    slot_wait_ms = 30 * SECOND,
    lease_margin_ms = 30 * SECOND,
    kill_grace_ms = 2 * SECOND,
    read_block_ms = 5 * SECOND,
    heartbeat_every_ms = 5 * SECOND,
    heartbeat_ttl_ms = 15 * SECOND,
    terminal_retention_ms = 7 * 24 * 60 * MINUTE,
    housekeeping_every_ms = 2 * SECOND,
    trim_every_ms = 1 * MINUTE,
    schedule_tick_ms = 1 * SECOND,
    still_failing_log_ms = 1 * MINUTE,  -- a failure that lasts is logged again this often
    warm_idle_ms = 1 * MINUTE,  -- an app's warm pool no one took from for this long goes
    warm_wait_ms = 10 * MINUTE,  -- relay-init's bound on waiting for its start record
}

-- Every wait divided by 60 (minutes become seconds); the shape is unchanged.
local COMPRESSED = {
    default_retries = 4,
    backoff_ms = { 1 * SECOND, 2 * SECOND, 5 * SECOND, 10 * SECOND },
    min_pending_idle_ms = 1 * SECOND,
    reclaim_every_ms = 250,
    slot_wait_ms = 500,
    lease_margin_ms = 500,
    kill_grace_ms = 500,
    read_block_ms = 200,
    heartbeat_every_ms = 250,
    heartbeat_ttl_ms = 1 * SECOND,
    terminal_retention_ms = 7 * 24 * MINUTE,
    housekeeping_every_ms = 250,
    trim_every_ms = 1 * SECOND,
    schedule_tick_ms = 250,
    still_failing_log_ms = 1 * SECOND,
    warm_idle_ms = 5 * SECOND,  -- not 1 s: specs take from a pool they saw filled
    warm_wait_ms = 30 * SECOND,
}

-- The lease of an attempt is timeout + kill_grace_ms + lease_margin_ms from
-- its claim; relay-init ends the container at timeout + kill_grace_ms + half
-- the margin from the claim (runtime/invoke.lua), whether or not its daemon
-- lives. The other half is the slack for its teardown: another replica may
-- only charge the attempt as lost by its lease once the container is gone.
-- Keep lease_margin_ms well above a container's teardown (milliseconds).
local chosen = build.test_constants and COMPRESSED or RELEASE
for key, value in pairs(chosen) do
    _M[key] = value
end
_M.compressed = build.test_constants and true or false


return _M
