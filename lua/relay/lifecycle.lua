--- The invocation lifecycle as calls: each transition is one atomic script
-- from relay.scripts, fenced by the attempt's token. Any Redis error —
-- transport or reply (LOADING, BUSY, OOM, READONLY, NOSCRIPT after a failed
-- reload…) — comes back as nil, err: an infrastructure failure that never
-- charges an attempt and never acknowledges or dead-letters anything.
local constants = require("relay.constants")
local keys = require("relay.keys")
local redis = require("relay.redis")
local scripts = require("relay.scripts")

local _M = {}
local Lifecycle = {}
Lifecycle.__index = Lifecycle

local unpack = unpack


--- ctx: { client, stream, group, consumer, instance, constants (optional) }
function _M.new(ctx)
    local self = setmetatable({}, Lifecycle)
    self.client = ctx.client
    self.stream = ctx.stream
    self.group = ctx.group
    self.consumer = ctx.consumer
    self.instance = ctx.instance
    self.c = ctx.constants or constants
    self.keys = keys.for_stream(ctx.stream)
    self.inv_prefix = self.keys.inv_prefix
    self.instance_prefix = self.keys.instance_prefix
    self.backoff_csv = table.concat(self.c.backoff_ms, ",")
    self.seq = 0
    return self
end


function Lifecycle:eval(script, key_list, args)
    local value, err = redis.eval(self.client, script, key_list, args)
    if value == nil then
        return nil, err
    end
    return value
end


--- A fresh fencing token: <instance>.<seq>.
function Lifecycle:token()
    self.seq = self.seq + 1
    return self.instance .. "." .. self.seq
end


--- DLQ context pairs for a message and an invocation label.
function Lifecycle:dlq_context(msg, app, handler, extra)
    local pairs_list = {
        "original_stream", self.stream, "original_id", msg.id, "group", self.group,
        "consumer", self.consumer, "app", app or "-", "handler", handler or "-",
    }
    if msg.stdin then
        -- A schedule's payload is not in the stream; the scripts read
        -- every other event from the stream entry itself.
        pairs_list[#pairs_list + 1] = "event"
        pairs_list[#pairs_list + 1] = msg.stdin
    end
    for k, v in pairs(msg.lineage or {}) do
        pairs_list[#pairs_list + 1] = k
        pairs_list[#pairs_list + 1] = v
    end
    for k, v in pairs(extra or {}) do
        pairs_list[#pairs_list + 1] = k
        pairs_list[#pairs_list + 1] = v
    end
    return pairs_list
end


local function append(list, more)
    for _, v in ipairs(more) do
        list[#list + 1] = v
    end
    return list
end


--- TryStart for one invocation. inv = { label, app, handler, timeout_ms,
-- max_attempts }. Returns the script's reply table or nil, err.
function Lifecycle:try_start(msg, inv, token)
    local lease_ms = inv.timeout_ms + self.c.lease_margin_ms + self.c.kill_grace_ms
    local args = append({ inv.label, token, lease_ms, inv.max_attempts, self.instance_prefix, self.backoff_csv },
        self:dlq_context(msg, inv.app, inv.handler))
    return self:eval(scripts.try_start, { self.keys.inv(msg.id), self.keys.dlq, self.stream }, args)
end


function Lifecycle:succeed(msg, inv, token, attempt)
    return self:eval(scripts.succeed, { self.keys.inv(msg.id) }, { inv.label, token, attempt })
end


--- Records a failed attempt; output is the stderr tail for the DLQ entry.
function Lifecycle:fail(msg, inv, token, attempt, reason, output)
    local args = append({ inv.label, token, attempt, inv.max_attempts, self.backoff_csv, reason },
        self:dlq_context(msg, inv.app, inv.handler, output and output ~= "" and { output = output } or nil))
    return self:eval(scripts.fail, { self.keys.inv(msg.id), self.keys.dlq, self.stream }, args)
end


function Lifecycle:release(msg, inv, token, attempt, previous)
    return self:eval(scripts.release, { self.keys.inv(msg.id) }, { inv.label, token, attempt, previous or "" })
end


function Lifecycle:exhaust(msg, label, reason)
    local app, handler = label:match("^(.-)/(.*)$")
    local args = append({ label, reason, self.instance_prefix }, self:dlq_context(msg, app, handler))
    return self:eval(scripts.exhaust, { self.keys.inv(msg.id), self.keys.dlq, self.stream }, args)
end


--- Acknowledges when every invocation is terminal.
-- @return true | false, {non-terminal labels} | nil, err
function Lifecycle:ack_if_terminal(msg, labels)
    local args = append({ self.group, msg.id, self.c.terminal_retention_ms }, labels)
    local reply, err = self:eval(scripts.ack_if_terminal, { self.stream, self.keys.inv(msg.id) }, args)
    if not reply then
        return nil, err
    end
    if reply[1] == "acked" then
        return true
    end
    return false, { unpack(reply, 2) }
end


--- Acknowledges an obsolete schedule occurrence and retains its state.
function Lifecycle:ack_obsolete(msg)
    return self:eval(scripts.ack_obsolete, { self.stream, self.keys.inv(msg.id) },
        { self.group, msg.id, self.c.terminal_retention_ms })
end


--- Acknowledges unmatched ids; returns the ids kept (recorded invocations).
function Lifecycle:ack_unmatched(ids)
    local args = append({ self.group, self.inv_prefix, self.c.terminal_retention_ms }, ids)
    return self:eval(scripts.ack_unmatched, { self.stream }, args)
end


--- Dead-letters a message that has no invocation (malformed, replay target
-- not found), acknowledges and retains it. Returns the DLQ id.
function Lifecycle:dead_letter_message(msg, reason)
    local args = append({ self.group, msg.id, self.c.terminal_retention_ms, reason },
        self:dlq_context(msg, "-", "-"))
    return self:eval(scripts.dead_letter_message, { self.stream, self.keys.inv(msg.id), self.keys.dlq }, args)
end


function Lifecycle:clear_missing(ids)
    local args = append({ self.group, self.inv_prefix, self.c.terminal_retention_ms }, ids)
    return self:eval(scripts.clear_missing, { self.stream, self.keys.stats }, args)
end


--- One XAUTOCLAIM step. Returns next_cursor, entries, deleted_count.
function Lifecycle:reclaim_step(cursor, count)
    local reply, err = self:eval(scripts.reclaim, { self.stream, self.keys.stats }, {
        self.group, self.consumer, self.c.min_pending_idle_ms, cursor, count, self.inv_prefix,
        self.c.terminal_retention_ms,
    })
    if not reply then
        return nil, err
    end
    return reply[1], reply[2], reply[3]
end


function Lifecycle:trim(retention_ms)
    return self:eval(scripts.trim, { self.stream }, { retention_ms })
end


return _M
