--- The log records of attempt outcomes and dead letters (docs/operations.md,
-- "handler failing"): an operator learns from the log alone what a handler
-- did and what Relay does next.
--   attempt_log.attempt(inv, outcome, result, msg, attempt, retry_in_ms)
--       one record per finished attempt: INFO when it succeeded, WARN when
--       it failed, timed out or was lost; next_attempt_at when a retry is
--       scheduled (retry_in_ms from the outcome script)
--   attempt_log.dead_letter(inv, msg, reason, attempts, dlq_id)
--       one WARN per dead letter
local log = require("relay.log")
local loop = require("relay.core.loop")
local rfc3339 = require("relay.rfc3339")

local _M = {}

local MESSAGES = {
    succeeded = "attempt succeeded",
    failed = "attempt failed",
    timeout = "attempt timed out",
    lost = "attempt lost",
}


local function identity(inv, msg)
    return { app = inv.app, handler = inv.handler, message_id = msg and msg.id }
end


function _M.attempt(inv, outcome, result, msg, attempt, retry_in_ms)
    result = result or {}
    local fields = identity(inv, msg)
    fields.attempt = attempt
    fields.max_attempts = inv.max_attempts
    fields.outcome = outcome
    fields.duration_ms = result.duration_ms
    fields.exit_code = result.status
    fields.signal = result.signal
    -- started in a container of the app's warm pool
    fields.warm = result.warm or nil
    if outcome ~= "succeeded" then
        fields.reason = result.reason
        -- what the runtime saw beyond the status (an exec error, say)
        fields.detail = result.detail
    end
    if retry_in_ms then
        fields.next_attempt_at = rfc3339.millis(loop.now_ms() + retry_in_ms)
    end
    local write = outcome == "succeeded" and log.info or log.warn
    write(MESSAGES[outcome] or ("attempt " .. tostring(outcome)), fields)
end


function _M.dead_letter(inv, msg, reason, attempts, dlq_id)
    local fields = identity(inv, msg)
    fields.reason = reason
    fields.attempts = attempts
    fields.dlq_id = type(dlq_id) == "string" and dlq_id or nil
    log.warn("dead-lettered", fields)
end


return _M
