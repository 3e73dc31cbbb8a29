--- The invocation lifecycle as calls: each transition is one atomic script
-- from relay.scripts, fenced by the attempt's token. Any Redis error —
-- transport or reply (LOADING, BUSY, OOM, READONLY, NOSCRIPT after a failed
-- reload…) — comes back as nil, err: an infrastructure failure that never
-- charges an attempt and never acknowledges or dead-letters anything.
--
-- A call without an answer may still have run (Redis executes what sits in
-- a socket the watchdog gave up on), so the lifecycle remembers the token
-- of each invocation it is claiming: token() hands an unanswered one out
-- again, and the scripts recognise a retry by it. The claims it holds also
-- tell the scripts which of this instance's `running` markers are strays.
local constants = require("relay.constants")
local keys = require("relay.keys")
local redis = require("relay.redis")
local scripts = require("relay.scripts")

local _M = {}
local Lifecycle = {}
Lifecycle.__index = Lifecycle

local unpack = unpack
local MAX_DECLARE_ROUNDS = 3  -- a claim's holder changing between two looks is rare; three in a row, rarer


--- ctx: { client, stream, group, consumer, instance, constants (optional),
-- dlq_maxlen (optional: RELAY_DLQ_MAXLEN, the DLQ's approximate bound) }
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
    self.dlq_maxlen = ctx.dlq_maxlen
    self.seq = 0
    -- "<message id> <label>" -> { token, state = "sent" | "unanswered" | "held" }
    self.claims = {}
    self.unanswered = 0
    return self
end


--- RELAY_CLAIM_WAIT: TryStart goes over client, a connection of its own,
-- and each claim waits for spec.replicas replicas to acknowledge it (WAIT
-- counts the writes of the connection it runs on, and blocks it).
function Lifecycle:use_claim_wait(client, spec)
    self.claim_client = client
    self.claim_wait = spec
end


function Lifecycle:eval(script, key_list, args)
    local value, err, kind = redis.eval(self.client, script, key_list, args)
    if value == nil then
        return nil, err, kind
    end
    return value
end


--- Runs a script that may meet another instance's running claim: only
-- the script knows whose, so it answers {"check", holder} (having written
-- nothing) unless args[holder_arg] names that holder, and runs again with
-- the holder named and its keys (holder_keys(holder)) declared after
-- key_list's own. Returns the script's reply, or nil, err, "changing"
-- when the holder changed on every look.
local function eval_checking_holder(client, script, key_list, args, holder_arg, holder_keys)
    local own_keys = #key_list
    for _ = 1, MAX_DECLARE_ROUNDS do
        local value, err, kind = redis.eval(client, script, key_list, args)
        if type(value) ~= "table" or value[1] ~= "check" then
            return value, err, kind
        end
        args[holder_arg] = value[2]
        for i, key in ipairs(holder_keys(value[2])) do
            key_list[own_keys + i] = key
        end
    end
    return nil, "the claim's holder changed on every look; try again", "changing"
end


local function claim_key(msg, inv)
    return msg.id .. " " .. inv.label
end


--- The fencing token for a TryStart: the token of this invocation's last
-- TryStart if it got no answer (a retry must be recognisable), else a
-- fresh <instance>.<seq>.
function Lifecycle:token(msg, inv)
    local c = msg and inv and self.claims[claim_key(msg, inv)]
    if c and c.state == "unanswered" then
        return c.token
    end
    self.seq = self.seq + 1
    return self.instance .. "." .. self.seq
end


-- Unanswered claims are kept only as a retry's shortcut (a forgotten one
-- is released by the next TryStart or the sweep): they are capped.
local MAX_UNANSWERED = 4096


function Lifecycle:forget_unanswered()
    for k, c in pairs(self.claims) do
        if c.state == "unanswered" then
            self.claims[k] = nil
        end
    end
    self.unanswered = 0
end


--- Records what became of a claim's call: answered with a claim, answered
-- without one, or not answered.
function Lifecycle:note_claim(k, token, state)
    local c = self.claims[k]
    if c and c.token ~= token then
        return  -- another claim on the invocation: not this call's to change
    end
    if c and c.state == "unanswered" then
        self.unanswered = self.unanswered - 1
    end
    if state == "unanswered" then
        if self.unanswered >= MAX_UNANSWERED then
            self:forget_unanswered()
        end
        self.unanswered = self.unanswered + 1
    end
    self.claims[k] = state and { token = token, state = state } or nil
end


--- The tokens of every claim this daemon has in hand, for the sweep.
function Lifecycle:held_tokens()
    local out = {}
    for _, c in pairs(self.claims) do
        out[#out + 1] = c.token
    end
    return out
end


--- DLQ context pairs for a message and an invocation label.
function Lifecycle:dlq_context(msg, app, handler, extra)
    local pairs_list = {
        "original_stream", self.stream, "original_id", msg.id, "group", self.group,
        "consumer", self.consumer, "app", app or "-", "handler", handler or "-",
    }
    if self.dlq_maxlen then
        pairs_list[#pairs_list + 1] = "dlq_maxlen"
        pairs_list[#pairs_list + 1] = self.dlq_maxlen
    end
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
-- max_attempts }; token from token(msg, inv). Returns the script's reply
-- table or nil, err.
function Lifecycle:try_start(msg, inv, token)
    local k = claim_key(msg, inv)
    local c = self.claims[k]
    -- Only with no other claim on the invocation in hand may the script
    -- take a marker of this instance for a stray.
    local own = not c or c.token == token
    if own then
        self:note_claim(k, token, "sent")
    end
    local lease_ms = inv.timeout_ms + self.c.lease_margin_ms + self.c.kill_grace_ms
    local args = append({ inv.label, token, lease_ms, inv.max_attempts, "", self.backoff_csv,
        own and "1" or "0" }, self:dlq_context(msg, inv.app, inv.handler))
    local value, err = self:try_start_call(msg, args)
    if own then
        self:note_claim(k, token, value == nil and "unanswered" or (value[1] == "start" and "held" or nil))
    end
    return value, err
end


--- The TryStart script, the running claim's holder named by ARGV[5] with
-- its instance and dead keys declared.
function Lifecycle:try_start_call(msg, args)
    local value, err, kind = eval_checking_holder(self.claim_client or self.client, scripts.try_start,
        { self.keys.inv(msg.id), self.keys.dlq, self.stream, self.keys.paused }, args, 5,
        function(holder) return { self.keys.instance(holder), self.keys.dead(holder) } end)
    if kind == "changing" then
        return { "skip", "running", 0 }  -- someone else is busy with the invocation
    end
    return value, err
end


--- WAIT for RELAY_CLAIM_WAIT's replicas to acknowledge this daemon's
-- claims so far. Returns ok, why (too few acknowledged, or an error), and
-- whether ok differs from the previous call's.
function Lifecycle:replicated()
    local w = self.claim_wait
    if not w then
        return true
    end
    local n, why = self.claim_client:call_timeout(w.timeout_ms / 1000 + 5, "WAIT", w.replicas, w.timeout_ms)
    if n ~= nil and n < w.replicas then
        why = string.format("%d of %d replicas acknowledged within %d ms", n, w.replicas, w.timeout_ms)
    end
    local ok = n ~= nil and n >= w.replicas
    local changed = ok == (self.claim_wait_failing or false)
    self.claim_wait_failing = not ok
    return ok, why, changed
end


--- Runs an outcome script of a claim and lets the claim go once answered.
function Lifecycle:settle(msg, inv, token, script, key_list, args)
    local value, err = self:eval(script, key_list, args)
    if value ~= nil then
        self:note_claim(claim_key(msg, inv), token, nil)
    end
    return value, err
end


function Lifecycle:succeed(msg, inv, token, attempt)
    return self:settle(msg, inv, token, scripts.succeed, { self.keys.inv(msg.id) }, { inv.label, token, attempt })
end


--- Records a failed attempt; output is the stderr tail for the DLQ entry.
function Lifecycle:fail(msg, inv, token, attempt, reason, output)
    local args = append({ inv.label, token, attempt, inv.max_attempts, self.backoff_csv, reason },
        self:dlq_context(msg, inv.app, inv.handler, output and output ~= "" and { output = output } or nil))
    return self:settle(msg, inv, token, scripts.fail, { self.keys.inv(msg.id), self.keys.dlq, self.stream }, args)
end


--- Gives a claim back uncharged. Unanswered, the claim may still stand:
-- the next TryStart reuses its token and so takes it up again.
function Lifecycle:release(msg, inv, token, attempt, previous)
    local value, err = self:settle(msg, inv, token, scripts.release, { self.keys.inv(msg.id) },
        { inv.label, token, attempt, previous or "" })
    if value == nil then
        self:note_claim(claim_key(msg, inv), token, "unanswered")
    end
    return value, err
end


--- Releases, uncharged, whatever TryStarts without an answer may have
-- claimed: for a clean stop, after which this instance counts as dead and
-- its strays would be charged as lost attempts. Returns how many it could
-- not reach.
function Lifecycle:release_unanswered()
    local failed = 0
    for k, c in pairs(self.claims) do
        if c.state == "unanswered" then
            local id, label = k:match("^(%S+) (.*)$")
            local r = self:eval(scripts.unclaim, { self.keys.inv(id) }, { label, c.token })
            if r == nil then
                failed = failed + 1
            else
                self.claims[k] = nil
            end
        end
    end
    return failed
end


--- Dead-letters a recorded invocation whose handler is gone.
-- @return "exhausted", dlq_id | "terminal" | "running" | nil, err
function Lifecycle:exhaust(msg, label, reason)
    local app, handler = label:match("^(.-)/(.*)$")
    local args = append({ label, reason, "" }, self:dlq_context(msg, app, handler))
    local value, err, kind = eval_checking_holder(self.client, scripts.exhaust,
        { self.keys.inv(msg.id), self.keys.dlq, self.stream }, args, 3,
        function(holder) return { self.keys.instance(holder) } end)
    if kind == "changing" then
        kind = "io"
    end
    if type(value) == "table" then
        return value[1], value[2]
    end
    return value, err, kind
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
    local key_list = { self.stream }
    for i, id in ipairs(ids) do
        key_list[i + 1] = self.keys.inv(id)
    end
    local args = append({ self.group, self.c.terminal_retention_ms }, ids)
    return self:eval(scripts.ack_unmatched, key_list, args)
end


--- Dead-letters a message that has no invocation (malformed, replay target
-- not found), acknowledges and retains it. extra: more DLQ context pairs
-- (keep_event_bytes for an entry too large to keep). Returns the DLQ id.
function Lifecycle:dead_letter_message(msg, reason, extra)
    local args = append({ self.group, msg.id, self.c.terminal_retention_ms, reason },
        self:dlq_context(msg, "-", "-", extra))
    return self:eval(scripts.dead_letter_message, { self.stream, self.keys.inv(msg.id), self.keys.dlq }, args)
end


function Lifecycle:trim(retention_ms)
    return self:eval(scripts.trim, { self.stream }, { retention_ms })
end


-- A consumer is dead once its consumer key is gone (no live daemon's
-- heartbeat holds the name) and it has been idle for this many heartbeat
-- TTLs (docs/lifecycle.md); at most REAP_BATCH of its entries move per call.
local DEAD_AFTER_TTLS = 10
local REAP_BATCH = 100


function Lifecycle:dead_consumer_after_ms()
    return DEAD_AFTER_TTLS * self.c.heartbeat_ttl_ms
end


--- Removes the group's dead consumers, claiming their pending entries for
-- this one first. Returns { {name, "claimed"|"deleted", n claimed}… } or
-- nil, err, kind.
function Lifecycle:reap_dead_consumers()
    local list, err, kind = self.client:call("XINFO", "CONSUMERS", self.stream, self.group)
    if type(list) ~= "table" then
        if tostring(err):find("NOGROUP", 1, true) then
            return {}  -- no group, no consumers: the read loop recreates it
        end
        return nil, err, kind
    end
    local bound, done = self:dead_consumer_after_ms(), {}
    for _, flat in ipairs(list) do
        local c = redis.pairs_to_table(flat)
        if c.name ~= self.consumer and tonumber(c.idle) >= bound then
            local r, rerr, rkind = self:eval(scripts.reap_consumer, { self.stream, self.keys.consumer(c.name) },
                { self.group, c.name, self.consumer, bound, REAP_BATCH, self.c.min_pending_idle_ms })
            if r == nil then
                return nil, rerr, rkind
            elseif r[1] == "claimed" or r[1] == "deleted" then
                done[#done + 1] = { c.name, r[1], r[2] }
            end
        end
    end
    return done
end


-- How many keys one SCAN step of the stranded sweep looks at.
local SWEEP_SCAN_COUNT = 1000


local function glob_escape(text)
    return (text:gsub("[%*%?%[%]\\]", "\\%0"))
end


--- One step over pending entries (scripts.take_pending): mode "own" (this
-- consumer's) or "idle" (any consumer's, idle past limits.min_idle_ms),
-- after cursor. The script finds the entries itself; their invocation
-- hashes and crash marks are declared from an XPENDING just before, and
-- the script stops at an entry that came in between (the next step takes
-- it). limits: { count, event, entry, object_bytes, poison_after,
-- min_idle_ms }. Returns { entries, cursor, done, deleted } or nil, err, kind.
function Lifecycle:take_pending(mode, cursor, limits)
    local start = cursor == "-" and "-" or "(" .. cursor
    local pel, err, kind
    if mode == "own" then
        pel, err, kind = self.client:call("XPENDING", self.stream, self.group, start, "+", limits.count, self.consumer)
    else
        pel, err, kind = self.client:call("XPENDING", self.stream, self.group, "IDLE", limits.min_idle_ms, start, "+",
            limits.count)
    end
    if type(pel) ~= "table" then
        return nil, err, kind
    end
    local key_list = { self.stream, self.keys.stats }
    for _, p in ipairs(pel) do
        key_list[#key_list + 1] = self.keys.inv(p[1])
        key_list[#key_list + 1] = self.keys.handling(p[1])
    end
    local reply
    reply, err, kind = redis.eval(self.client, scripts.take_pending, key_list, {
        self.group, self.consumer, mode, cursor, limits.count, limits.event, limits.entry, limits.object_bytes,
        self.c.terminal_retention_ms, limits.poison_after, limits.min_idle_ms,
    })
    if reply == nil then
        return nil, err, kind
    end
    return { entries = reply[4], cursor = reply[1], done = reply[2] == 1, deleted = reply[3] }
end


--- One step of the stranded-invocation sweep (scripts.sweep): SCAN from
-- cursor over the invocation hashes, then one script over what it found.
-- Returns next_cursor, { released, retained, missing, {id, label, new id}… }
-- or nil, err, kind.
function Lifecycle:sweep_step(cursor)
    local reply, err, kind = self.client:call("SCAN", cursor, "MATCH", glob_escape(self.inv_prefix) .. "*",
        "COUNT", SWEEP_SCAN_COUNT)
    if type(reply) ~= "table" then
        return nil, err, kind
    end
    local ids = {}
    for _, key in ipairs(reply[2]) do
        ids[#ids + 1] = key:sub(#self.inv_prefix + 1)
    end
    if #ids == 0 then
        return reply[1], { 0, 0, 0 }
    end
    local result, serr, skind = self:sweep_ids(ids)
    if result == nil then
        return nil, serr, skind
    end
    return reply[1], result
end


--- scripts.sweep over ids, declaring the keys it asks for (the instance
-- keys of live claims, the hashes of the entries it re-queues).
function Lifecycle:sweep_ids(ids)
    local held = self:held_tokens()
    local args = append({ self.group, self.inv_prefix, self.instance_prefix, self.instance, self.seq,
        self.c.terminal_retention_ms, #held, "0" }, held)
    append(args, ids)
    local key_list = { self.stream, self.keys.trusted, self.keys.stats }
    for _, id in ipairs(ids) do
        key_list[#key_list + 1] = self.keys.inv(id)
    end
    key_list[#key_list + 1] = self.keys.instance(self.instance)
    for _ = 1, MAX_DECLARE_ROUNDS do
        local result, err, kind = self:eval(scripts.sweep, key_list, args)
        if type(result) ~= "table" or result[1] ~= "declare" then
            return result, err, kind
        end
        args[8] = result[2]
        for i = 3, #result do
            key_list[#key_list + 1] = result[i]
        end
    end
    return nil, "the stranded sweep's keys changed on every look; next pass", "io"
end


return _M
