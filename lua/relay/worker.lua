--- The daemon (`relay run`): its loops. It reads the stream with the
-- consumer group, classifies every entry and hands matched ones to
-- relay.dispatch, reclaims stuck ones, keeps the apps and the pause set
-- fresh, trims old acknowledged ones, ticks the schedules, and drains on
-- SIGTERM/SIGINT. The parts it wires together, each passed explicitly:
--   shutdown  (relay.shutdown)  draining / forced / exit code
--   obs       (relay.observe)   metrics, hooks, /metrics; obs.report is the funnel
--   slots     (relay.slots)     global and per-app permits, running invocations
--   life      (relay.lifecycle) the invocation scripts
--   guard     (relay.guard)     the consumer name and the heartbeat
--   registry  (relay.registry)  the loaded apps
-- One event walks worker -> classify -> dispatch -> invoke -> proc; dispatch
-- gets a context of these parts and never calls back into the worker.
local backoff = require("relay.backoff")
local classify = require("relay.classify")
local clock = require("relay.clock")
local constants = require("relay.constants")
local dispatch = require("relay.dispatch")
local exit = require("relay.exit")
local guard = require("relay.guard")
local keys = require("relay.keys")
local known_apps = require("relay.known_apps")
local lifecycle = require("relay.lifecycle")
local log = require("relay.log")
local loop = require("relay.core.loop")
local matcher_core = require("relay.core.matcher")
local notify = require("relay.notify")
local observe = require("relay.observe")
local redis = require("relay.redis")
local registry = require("relay.registry")
local runtime = require("relay.runtime")
local scheduler = require("relay.scheduler")
local scripts = require("relay.scripts")
local shutdown_mod = require("relay.shutdown")
local slots_mod = require("relay.slots")
local sync = require("relay.sync")
local warm_pool = require("relay.runtime.warm_pool")

local _M = {}
local Worker = {}

local unpack = unpack
Worker.__index = Worker

local SIGINT, SIGTERM, SIGHUP = 2, 15, 1
local READ_BACKOFF_CAP_S = 5
local LOCAL_RETRY_LIMIT = 10000
local INFRA_RETRY_MS = 2000  -- a message Redis failed: its first retry, doubling up to the cap
local INFRA_RETRY_CAP_MS = 16000
local READ_FAILURE = "stream read"  -- log.failing names
local PROCESS_FAILURE = "message processing"
local RECLAIM_FAILURE, FENCE_FAILURE, TRIMMED_FAILURE = "reclaim sweep", "crash fence", "trimmed check"
local SETTLERS = 2  -- batches of unmatched entries being acknowledged while the next read runs
local KILL_RECORD_TIMEOUT_S = 0.5  -- a forced stop records its death this long at most
local MiB = 1024 * 1024
-- What the daemon holds of events, whatever arrives (docs/operations.md).
-- One task does every read, one at a time, and a reply is capped at
-- READ_BUDGET_BYTES of entries beyond one max-size entry (plus
-- REPLY_SLACK_BYTES of framing and stubs). Messages hold their events'
-- bytes out of a budget of one reply, one max-size event and
-- INFLIGHT_BYTES while they are dispatched (a large event until a
-- collection has freed it), and a read starts only when the budget has
-- room for a whole reply. Events kept for local retries stay under
-- LOCAL_RETRY_BYTES, and before a read the garbage is collected once
-- COLLECT_AFTER_BYTES were read since the last collection.
local READ_BUDGET_BYTES = 8 * MiB
local REPLY_SLACK_BYTES = 1 * MiB
local INFLIGHT_BYTES = 4 * MiB
local LOCAL_RETRY_BYTES = 4 * MiB
local COLLECT_AFTER_BYTES = 4 * MiB
local LARGE_EVENT_BYTES = 1 * MiB
-- After a read whose entries were too large for the wanted batch (or a
-- reply too large), reads that fit before a read asks for it again.
local GROW_AFTER_READS = 100
-- While reads bring nothing but unmatched entries and no message is in
-- flight, each read asks for twice as many as the last, up to this many:
-- per-command costs (two round trips, the wake-ups, the settling task)
-- then spread over more entries. One matched entry brings the wanted
-- batch back, so a replica takes at most one large batch of work that
-- others could have shared.
local UNMATCHED_READ_MAX = 256
local POISON_CRASHES = 5  -- docs/lifecycle.md
local TOO_LARGE = "reply too large"  -- relay.core.redis, a reply over the client's cap


local function random_instance_id()
    local f = io.open("/dev/urandom", "rb")
    local bytes = f and f:read(8) or tostring(os.time() .. loop.getpid())
    if f then
        f:close()
    end
    return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end


--- What one read may return: COUNT entries of at most the entry limit
-- each within the read budget, and the reply cap of the daemon's clients.
-- wanted_count is the batch a read of new entries asks for when the
-- entries seen last are small enough for that many to fit under the same
-- cap (Worker:next_read_count): with the default 1 MiB event limit only 8
-- worst-case entries fit, and halving every batch for events of a few
-- hundred bytes doubled the round trips per event.
local function read_limits(cfg)
    local entry = classify.entry_limit(cfg.max_event_bytes)
    local wanted = math.max(16, 2 * cfg.max_concurrency)
    local count = math.max(1, math.min(wanted, math.floor((READ_BUDGET_BYTES + cfg.max_event_bytes) / entry)))
    return { event = cfg.max_event_bytes, entry = entry, count = count, wanted_count = wanted,
        reply = count * entry + REPLY_SLACK_BYTES }
end


--- The parts that need no Redis, before anything is loaded; the observer
-- first, so a bad RELAY_HOOKS or RELAY_METRICS_ADDR fails the start at once.
local function new_worker(cfg, c)
    local self = setmetatable({}, Worker)
    self.cfg = cfg
    self.constants = c
    self.keys = keys.for_stream(cfg.stream)
    self.instance = random_instance_id()
    self.shutdown = shutdown_mod.new()
    self.obs = observe.new(cfg)
    self.report = self.obs.report
    self.rt = runtime.new({ runtime = cfg.runtime, state_dir = cfg.state_dir, images = cfg.images,
        consumer = cfg.consumer, stream = cfg.stream, group = cfg.group, secrets_dir = cfg.secrets_dir,
        allowed_mounts = cfg.allowed_mounts })
    local apps = registry.new({ apps_dir = cfg.apps, runtime = self.rt, max_concurrency = cfg.max_concurrency })
    self.registry = apps
    self.slots = slots_mod.new({ max = cfg.max_concurrency,
        limit_of = function(app_name) return apps:effective_concurrency(app_name) end })
    self.message_slots = sync.semaphore(math.max(16, 4 * cfg.max_concurrency))
    self.rt.warm = warm_pool.new(self.rt, { size_of = function(app)
        if self.shutdown.draining or apps:blocked(app.name) then
            return 0
        end
        return warm_pool.size(app, apps:effective_concurrency(app.name))
    end })
    self.settlers = sync.semaphore(SETTLERS)
    self.limits = read_limits(cfg)
    self.read_count = self.limits.count  -- nothing seen yet: the count that always fits
    self.fitting_reads = GROW_AFTER_READS  -- no overflow yet: the first small read earns the wanted batch
    self.event_bytes = sync.budget(self.limits.reply + INFLIGHT_BYTES + cfg.max_event_bytes)
    self.local_retry_bytes = 0
    self.read_bytes = 0
    self.inflight = {}
    self.local_retries = 0
    self.busy = 0
    return self
end


function Worker:ensure_group()
    local ok, err = self.client:call("XGROUP", "CREATE", self.cfg.stream, self.cfg.group, "0", "MKSTREAM")
    if ok == nil and not tostring(err):find("BUSYGROUP", 1, true) then
        return nil, err
    end
    return true
end


function Worker:spawn_message(msg)
    self.inflight[msg.id] = true
    loop.spawn(function()
        self.busy = self.busy + 1
        local ok, result, extra = xpcall(dispatch.process, debug.traceback, self.dispatch_ctx, msg)
        self.busy = self.busy - 1
        self.message_slots.release()
        self:release_event(msg)
        if not ok then
            log.error("message processing failed", { message_id = msg.id, error = result })
            self.inflight[msg.id] = nil
            return
        end
        if result == nil then
            log.failing(PROCESS_FAILURE, "redis unavailable while processing a message; it stays pending",
                { message_id = msg.id, error = extra })
            msg.infra_retry_ms = msg.infra_retry_ms and backoff.grow(msg.infra_retry_ms, INFRA_RETRY_CAP_MS)
                or INFRA_RETRY_MS
            extra = backoff.jitter(msg.infra_retry_ms)
        else
            msg.infra_retry_ms = nil
            log.recovered(PROCESS_FAILURE, "processing messages again")
        end
        self:schedule_local_retry(msg, result ~= "acked" and extra or nil)
    end)
end


--- Admits a message to dispatch: a message permit, and its event's bytes
-- out of the in-flight budget (both wait while others hold them).
function Worker:admit(msg)
    self.message_slots.acquire()
    msg.held = self.event_bytes.acquire(#(msg.event or ""))
end


--- Gives a dispatched message's event bytes back. A large event's come
-- back once a collection has freed it, in a task of its own that runs after
-- this one has let go of the message: until then it still takes memory.
function Worker:release_event(msg)
    local held = msg.held or 0
    msg.held = 0
    if held < LARGE_EVENT_BYTES then
        self.event_bytes.release(held)
        return
    end
    loop.spawn(function()
        collectgarbage()
        self.event_bytes.release(held)
    end)
end


--- Runs a pending message again when its earliest retry is due, rather
-- than waiting for the reclaim sweep; reclaim remains the backstop, and
-- the only way back for a message whose event would take the events kept
-- waiting in memory past LOCAL_RETRY_BYTES.
function Worker:schedule_local_retry(msg, retry_in_ms)
    local bytes = #(msg.event or "")
    if not retry_in_ms or self.shutdown.draining or self.local_retries >= LOCAL_RETRY_LIMIT
        or self.local_retry_bytes + bytes > LOCAL_RETRY_BYTES then
        self.inflight[msg.id] = nil
        return
    end
    self.local_retries = self.local_retries + 1
    self.local_retry_bytes = self.local_retry_bytes + bytes
    loop.spawn(function()
        loop.sleep(retry_in_ms / 1000 + 0.01)
        self.local_retries = self.local_retries - 1
        self.local_retry_bytes = self.local_retry_bytes - bytes
        if self.shutdown.draining then
            self.inflight[msg.id] = nil
            return
        end
        self:admit(msg)
        self:spawn_message(msg)
    end)
end


--- What classify needs for one batch. Its entries came in one reply, so
-- time-relative patterns see them all at the moment it was handled (now,
-- default the clock's): one clock read per batch, not one per entry.
function Worker:classifier(trusted, now)
    now = now or clock.now_ms()
    return {
        matcher = self.registry.matcher, labels = self.registry.labels, max_bytes = self.cfg.max_event_bytes,
        now_ms = function() return now end, validate = matcher_core.validate_object, trusted = trusted,
    }
end


--- Which of a batch's entries carrying reserved fields Relay's own
-- publishers recorded as trusted: a set of ids. One ZMSCORE for the batch,
-- none when no entry carries a reserved field. false when Redis cannot
-- tell: those entries then stay pending for the reclaim sweep, as on any
-- infrastructure failure (never dead-lettered on a guess).
function Worker:trusted_ids(entries)
    local ids = {}
    for _, entry in ipairs(entries) do
        if not self.inflight[entry[1]] and classify.reserved(entry[2]) then
            ids[#ids + 1] = entry[1]
        end
    end
    if #ids == 0 then
        return {}
    end
    local scores, err = self.client:call("ZMSCORE", self.keys.trusted, unpack(ids))
    if type(scores) ~= "table" then
        log.failing("settle", "cannot check entries with reserved fields; they stay pending",
            { error = err, count = #ids })
        return false
    end
    local set = {}
    for i, id in ipairs(ids) do
        if scores[i] ~= redis.null then
            set[id] = true
        end
    end
    return set
end


function Worker:dead_letter_malformed(msg)
    local id, err = self.life:dead_letter_message(msg, msg.reason,
        msg.truncated and { keep_event_bytes = classify.KEPT_EVENT_BYTES } or nil)
    if not id then
        log.failing("settle", "cannot dead-letter a malformed message; it stays pending",
            { message_id = msg.id, error = err })
        return
    end
    self.report.dlq({ app = "-", handler = "-" }, msg, msg.reason, 0, id)  -- logs the dead letter too
end


--- Waits, before a read, until the event budget has room for a whole
-- reply, then collects the garbage once COLLECT_AFTER_BYTES were read since
-- the last collection: large events die in bursts, and the incremental
-- collector lets as much garbage as the heap holds pile up first.
function Worker:await_room()
    self.event_bytes.release(self.event_bytes.acquire(self.limits.reply))
    if self.read_bytes >= COLLECT_AFTER_BYTES then
        self.read_bytes = 0
        collectgarbage()
    end
end


--- Counts a batch's bytes towards the next collection; returns the cost
-- of its largest entry.
function Worker:count_read(entries)
    local largest = 0
    for _, entry in ipairs(entries) do
        if type(entry[2]) == "table" then
            local _, cost = classify.measure(entry[2])
            self.read_bytes = self.read_bytes + cost
            largest = math.max(largest, cost)
        end
    end
    return largest
end


--- The COUNT of the next read of new entries: the wanted batch once
-- GROW_AFTER_READS reads in a row had a largest entry small enough for
-- that many such entries to fit under the reply cap, the count that always
-- fits otherwise. A guess, not a promise: larger entries arriving after
-- small ones make a reply too large, which read_new survives (the entries
-- are taken from the pending list) and which restarts the count of reads;
-- so a stream mixing sizes pays that reset rarely, not every other read.
-- idle: the last read held only unmatched entries and nothing is in flight;
-- the batch then doubles up to UNMATCHED_READ_MAX as long as that many of
-- the largest entry seen last still fit under the cap.
function Worker:next_read_count(largest_entry_cost, idle)
    local l = self.limits
    local room = l.reply - REPLY_SLACK_BYTES
    if largest_entry_cost * l.wanted_count <= room then
        self.fitting_reads = self.fitting_reads + 1
    else
        self.fitting_reads = 0
    end
    if self.fitting_reads < GROW_AFTER_READS then
        return l.count
    elseif not idle then
        return l.wanted_count
    end
    local fitting = math.floor(room / math.max(1, largest_entry_cost))
    return math.max(l.wanted_count, math.min(2 * self.read_count, UNMATCHED_READ_MAX, fitting))
end


--- Classifies a batch, then acts on it. first = the entries come from a ">"
-- read: never delivered before. The others come from take_pending, whose
-- crash fence is lifted once all of them are classified, before anything
-- waits: a crash after that is not theirs.
function Worker:handle_batch(entries, first)
    local largest = self:count_read(entries)
    local msgs, unmatched = self:classify_entries(entries)
    if first then
        self.read_count = self:next_read_count(largest, unmatched == #entries and next(self.inflight) == nil)
    else
        self:lift_fence(entries)
    end
    self:act(msgs, first)
end


--- The messages of the entries not in flight, and how many are unmatched.
function Worker:classify_entries(entries, now)
    local classifier = self:classifier(self:trusted_ids(entries), now)
    local msgs, unmatched = {}, 0
    for _, entry in ipairs(entries) do
        if not self.inflight[entry[1]] then
            local msg = classify.classify(entry, classifier)
            msgs[#msgs + 1] = msg
            unmatched = unmatched + (msg.kind == "unmatched" and 1 or 0)
        end
    end
    return msgs, unmatched
end


--- A read of new entries: a stream batch (relay.core.redis), taken by
-- Worker:handle_stream_batch unless the Lua path must see every entry: a
-- recreated group (a ">" read may bring entries in flight, whose
-- settlement goes through the script), an on_event hook, a test build's
-- crash marker. A reply of another shape is handled as a list of entries.
function Worker:handle_new(reply)
    if type(reply) == "table" then
        local entries = reply[1][2]
        self.last_read = entries[#entries][1]
        return self:handle_batch(entries, true)
    end
    self.last_read = reply:last_id()
    if self.group_recreated or classify.TEST_CRASH or self.report.event_hook() then
        return self:handle_batch(reply:entries(), true)
    end
    self:handle_stream_batch(reply)
end


--- The entries holding just an event are matched in C, and the unmatched
-- ones counted at once and acknowledged by one XACK of ids taken from the
-- reply: no Lua value per entry on the unmatched path. The other entries
-- are classified and acted on here as always.
function Worker:handle_stream_batch(batch)
    local now = clock.now_ms()
    local unmatched, largest, bytes, rest = batch:match(self.registry.matcher, self.cfg.max_event_bytes, now,
        classify.OBJECT_BYTES, self.limits.entry)
    self.read_bytes = self.read_bytes + bytes
    for i, index in ipairs(rest) do
        rest[i] = batch:entry(index)
    end
    local msgs, more = self:classify_entries(rest, now)
    self.read_count = self:next_read_count(largest,
        unmatched + more == batch:count() and next(self.inflight) == nil)
    self:act(msgs, true)
    if unmatched == 0 then
        batch:free()
        return
    end
    self.report.events("unmatched", unmatched)
    self:settle_in_background(function() self:ack_batch(batch) end)
end


--- Malformed entries are dead-lettered, matched ones dispatched, and
-- unmatched ones settled by one task while the reader goes on (at most
-- SETTLERS batches in flight). take_pending counts an entry without a body
-- itself, so "missing" needs nothing here.
function Worker:act(msgs, first)
    local unmatched, by_id = {}, {}
    for _, msg in ipairs(msgs) do
        if msg.kind ~= "schedule" and msg.kind ~= "unverified" and msg.kind ~= "missing" then
            self.report.event(msg.kind, msg)  -- schedule: decided by dispatch
        end
        if msg.kind == "unmatched" then
            unmatched[#unmatched + 1] = msg.id
            by_id[msg.id] = msg
        elseif msg.kind == "malformed" then
            self:dead_letter_malformed(msg)
        elseif msg.kind == "matched" or msg.kind == "targeted" or msg.kind == "schedule" then
            self:admit(msg)
            self:spawn_message(msg)
        end
    end
    if #unmatched > 0 then
        self:settle_in_background(function() self:settle_unmatched(unmatched, by_id, first) end)
    end
end


--- Lifts take_pending's crash fence from entries now classified. A stub's
-- stays: a poison entry whose dead letter fails is poison again at its
-- next read (the mark expires with the retention).
function Worker:lift_fence(entries)
    local marks = {}
    for _, entry in ipairs(entries) do
        if entry[3] == nil then
            marks[#marks + 1] = self.keys.handling(entry[1])
        end
    end
    if #marks == 0 then
        return
    end
    local ok, err = self.client:call("DEL", unpack(marks))
    if ok == nil then
        log.failing(FENCE_FAILURE, "cannot lift the crash fence of classified entries; a later read counts "
            .. "them once more", { error = err, count = #marks })
    else
        log.recovered(FENCE_FAILURE, "lifting crash fences again")
    end
end


--- Settles a batch's unmatched entries (settle()) in a task of its own,
-- waiting first while SETTLERS batches are being settled.
function Worker:settle_in_background(settle)
    self.settlers.acquire()
    self.busy = self.busy + 1
    loop.spawn(function()
        local ok, err = xpcall(settle, debug.traceback)
        self.busy = self.busy - 1
        self.settlers.release()
        if not ok then
            log.error("settling a batch failed", { error = err })
        end
    end)
end


--- Acknowledges unmatched entries. A first delivery has no recorded
-- invocations, so one plain XACK does; redeliveries (own PEL, reclaim, or
-- everything after this process recreated the group) go through the script
-- that keeps those whose state still records invocations.
function Worker:settle_unmatched(ids, by_id, first)
    if #ids == 0 then
        return
    end
    local kept, err
    if first and not self.group_recreated then
        local acked, xerr = self.client:call("XACK", self.cfg.stream, self.cfg.group, unpack(ids))
        kept, err = acked and {} or nil, xerr
    else
        kept, err = self.life:ack_unmatched(ids)
    end
    if kept == nil then
        log.failing("settle", "cannot acknowledge unmatched messages; they stay pending", { error = err })
        return
    end
    for _, id in ipairs(kept) do
        self:admit(by_id[id])
        self:spawn_message(by_id[id])
    end
end


--- Acknowledges a stream batch's unmatched entries: first deliveries of a
-- group this process did not recreate (Worker:handle_new), so one plain
-- XACK does; the batch stands for their ids.
function Worker:ack_batch(batch)
    local acked, err = self.client:call("XACK", self.cfg.stream, self.cfg.group, batch)
    batch:free()
    if acked == nil then
        log.failing("settle", "cannot acknowledge unmatched messages; they stay pending", { error = err })
    end
end


--- One XREADGROUP of new entries, blocking on the reader connection, as a
-- stream batch (Worker:handle_new). Its reply is capped (read_limits): one
-- too large fails with TOO_LARGE.
function Worker:read()
    local c, cfg = self.constants, self.cfg
    return self.reader:call_timeout(c.read_block_ms / 1000 + 5, redis.stream_batch, "XREADGROUP", "GROUP",
        cfg.group, cfg.consumer, "COUNT", self.read_count, "BLOCK", c.read_block_ms, "STREAMS", cfg.stream, ">")
end


--- One take_pending step (relay.scripts): mode "own" or "idle", after
-- cursor ("-": from the start). Returns { entries, cursor, done }, or nil,
-- err, kind.
function Worker:take_pending(mode, cursor)
    local l = self.limits
    self:await_room()
    local step, err, kind = self.life:take_pending(mode, cursor, {
        count = l.count, event = l.event, entry = l.entry, object_bytes = classify.OBJECT_BYTES,
        poison_after = POISON_CRASHES, min_idle_ms = self.constants.min_pending_idle_ms,
    })
    if step == nil then
        return nil, err, kind
    end
    if step.deleted > 0 then
        self.report.inc("relay_missing_payload_total", nil, step.deleted)
        log.error("pending entries have no body (trimmed or deleted outside relay): data loss",
            { count = step.deleted })
    end
    return step
end


--- After a failed read: recreates a lost group, logs the failure once
-- per change (log.failing), and waits the jittered delay. Returns the next
-- delay (doubled, capped): every way a read fails backs off, so a group
-- that cannot be recreated, a stream key of another type or a reader that
-- reconnected before the command client never make a hot loop.
function Worker:recover_read_error(err, kind, delay)
    if self.shutdown.draining then
        return delay  -- the read was cut short by the shutdown itself
    end
    if kind == "reply" and tostring(err):find("NOGROUP", 1, true) then
        if self:recreate_group(err) then
            return 0.1  -- the group is back: read at once, whatever the backoff had grown to
        end
    else
        log.failing(READ_FAILURE, "reading the stream failed; backing off", { error = err, kind = kind })
        -- An error reply (READONLY, MOVED, NOAUTH…) stops all progress until Redis changes: /healthz
        -- says so. A lost connection is told by the clients' own state.
        self.read_blocker = kind == "reply" and ("cannot read the stream: " .. tostring(err)) or nil
    end
    loop.sleep(backoff.jitter(delay))
    return backoff.grow(delay, READ_BACKOFF_CAP_S)
end


--- The group is gone (deleted, or a restart lost the data set): recreates
-- it at 0, and counts it when that worked. Returns true to read again at
-- once: recreated, and no group recreated before is still waiting for a
-- read to work (a group that vanishes again at once, or a reader that sees
-- another server, is backed off and logged like any repeated failure).
function Worker:recreate_group(err)
    local ok, cerr = self:ensure_group()
    if not ok then
        log.failing(READ_FAILURE, "consumer group is gone and cannot be recreated; backing off",
            { error = cerr, read_error = err })
        self.read_blocker = "consumer group is gone and cannot be recreated: " .. tostring(cerr)
        return false
    end
    self.report.inc("relay_group_recreated_total")
    self.group_recreated = true
    if self.recreated_unread then
        log.failing(READ_FAILURE, "consumer group is gone again before a read worked; recreated it, backing off",
            { error = err })
        return false
    end
    log.warn("consumer group is gone; recreating it at 0", { error = err })
    self.recreated_unread = true
    return true
end


--- A read worked: a read failure (if any) ends with one INFO line.
function Worker:read_succeeded()
    self.recreated_unread = false
    self.read_blocker = nil
    log.recovered(READ_FAILURE, "reading the stream again")
end


--- Reads this consumer's own pending entries after cursor (default: all):
-- a restart's unfinished work, or what a read too large to take delivered.
-- Returns the read backoff it ended with.
function Worker:read_own_pending(delay, cursor)
    cursor = cursor or "-"
    local done = false
    while not (self.shutdown.draining or done) do
        local step, err, kind = self:take_pending("own", cursor)
        if step == nil then
            delay = self:recover_read_error(err, kind, delay)
        else
            self:read_succeeded()
            cursor, done = step.cursor, step.done
            self.last_read = cursor ~= "-" and cursor or self.last_read
            if #step.entries > 0 then
                self:handle_batch(step.entries)
            end
        end
    end
    return delay
end


--- One read of new entries and its batch; returns the read backoff. A read
-- whose reply was too large to take still delivered its entries to this
-- consumer: they are taken from its pending list then, large ones as stubs.
-- (A function of its own, so that no frame keeps the reply once handled.)
function Worker:read_new(delay)
    self:await_room()
    local reply, err, kind = self:read()
    if reply == nil and tostring(err):find(TOO_LARGE, 1, true) then
        self.read_count, self.fitting_reads = self.limits.count, 0
        log.warn("new entries too large to read at once; taking them from the pending list",
            { error = err, after = self.last_read })
        return self:read_own_pending(delay, self.last_read)
    elseif reply == nil then
        return self:recover_read_error(err, kind, delay)
    end
    self:read_succeeded()
    if reply ~= redis.null and not self.shutdown.draining then
        self:handle_new(reply)
    elseif type(reply) == "userdata" and reply ~= redis.null then
        reply:free()  -- draining: its entries stay pending
    end
    return 0.1
end


--- Every read, one at a time: own pending entries first, then new entries
-- until draining, and the reclaim sweep whenever it is due.
function Worker:read_loop()
    local delay = self:read_own_pending(0.1)
    local every_s = self.constants.reclaim_every_ms / 1000
    local reclaim_at = loop.monotonic() + every_s
    while not self.shutdown.draining do
        if self.reread_own_pending then
            self.reread_own_pending = false
            delay = self:read_own_pending(delay)
        end
        delay = self:read_new(delay)
        if loop.monotonic() >= reclaim_at and not self.shutdown.draining then
            local ok, err = xpcall(self.reclaim_once, debug.traceback, self)
            if not ok then
                log.error("background task failed", { error = err })
            end
            reclaim_at = loop.monotonic() + every_s
        end
    end
end


--- The reclaim sweep: claims entries idle past MinPendingIdle (a dead
-- replica's, or messages waiting for their retry) and runs them here.
function Worker:reclaim_once()
    local cursor, done = "-"
    repeat
        local step, err = self:take_pending("idle", cursor)
        if step == nil then
            log.failing(RECLAIM_FAILURE, "reclaim sweep failed", { error = err })
            return
        end
        log.recovered(RECLAIM_FAILURE, "reclaim sweep works again")
        cursor, done = step.cursor, step.done
        if #step.entries > 0 then
            self.report.inc("relay_reclaimed_total", nil, #step.entries)
            self:handle_batch(step.entries)
        end
    until done or self.shutdown.draining
end


--- Counts entries trimmed before the group read them (relay.scripts): they
-- would otherwise stay in the lag for ever, unseen.
function Worker:count_trimmed()
    local gone, err = redis.eval(self.client, scripts.count_trimmed, { self.cfg.stream, self.keys.stats },
        { self.cfg.group, "count" })
    if gone == nil then
        log.failing(TRIMMED_FAILURE, "cannot check for entries trimmed before delivery", { error = err })
        return
    end
    log.recovered(TRIMMED_FAILURE, "checking for entries trimmed before delivery again")
    if gone > 0 then
        self.report.inc("relay_trimmed_undelivered_total", nil, gone)
        log.error("entries were trimmed from the stream before any consumer read them: data loss",
            { count = gone })
    end
end


function Worker:every(interval_ms, fn)
    loop.spawn(function()
        while not self.shutdown.draining do
            loop.sleep(interval_ms / 1000)
            if not self.shutdown.draining then
                local ok, err = xpcall(fn, debug.traceback, self)
                if not ok then
                    log.error("background task failed", { error = err })
                end
            end
        end
    end)
end


--- Every housekeeping period: the pause set and the apps kept fresh, dead
-- consumers removed, and one bounded step of the stranded-invocation sweep.
-- The first call (before the loops start) also opens RELAY_CLAIM_WAIT's
-- connection.
function Worker:housekeeping()
    self:connect_claim_client()
    local paused = self.client:call("SMEMBERS", self.keys.paused)
    if type(paused) == "table" then
        local resumed, newly = self.registry:set_paused(paused)
        if #newly > 0 then
            log.info("apps paused; their messages are held", { apps = table.concat(newly, ",") })
            for _, name in ipairs(newly) do
                self.rt.warm:clear(name)
            end
        end
        if #resumed > 0 then
            -- their held messages wait in this consumer's pending list
            log.info("apps resumed; running their held messages", { apps = table.concat(resumed, ",") })
            self.reread_own_pending = true
        end
    end
    if self.registry:changed() then
        self:reload("template change")
    end
    self.rt.warm:tidy()
    self:record_known_apps()
    self:reap_dead_consumers()
    self:sweep_stranded()
end


--- RELAY_CLAIM_WAIT: claims and their WAIT get a connection of their own,
-- because WAIT blocks the connection it runs on and the heartbeat must
-- never queue behind it.
function Worker:connect_claim_client()
    if not self.cfg.claim_wait or self.claim_client then
        return
    end
    local client, err = redis.connect(self.cfg)
    if not client then
        exit.env(err)
    end
    self.claim_client = client
    self.life:use_claim_wait(client, self.cfg.claim_wait)
    log.info("claims wait for replica acknowledgement", { replicas = self.cfg.claim_wait.replicas,
        timeout_ms = self.cfg.claim_wait.timeout_ms })
end


--- Logs a failing housekeeping step once until it works again. Lost
-- connections are left to the connection's own reporting: an outage must
-- not cost a line per step and tick.
function Worker:step_failed(what, err, kind)
    self.failing_steps = self.failing_steps or {}
    local failing = err ~= nil and kind ~= "io"
    if failing and not self.failing_steps[what] then
        log.warn(what .. " failed; retried every housekeeping period", { error = err })
    end
    self.failing_steps[what] = failing or nil
end


--- Removes consumers whose holder has been gone for longer than the bound
-- (relay.lifecycle), after claiming their pending entries for this one.
function Worker:reap_dead_consumers()
    local done, err, kind = self.life:reap_dead_consumers()
    self:step_failed("removing dead consumers", done == nil and err or nil, kind)
    if done == nil then
        return
    end
    for _, d in ipairs(done) do
        log.info(d[2] == "deleted" and "removed a dead consumer" or "claimed entries of a dead consumer",
            { consumer = d[1], claimed = d[3] })
    end
end


--- One step of the stranded-invocation sweep; the cursor carries over to
-- the next housekeeping tick, so each tick costs one bounded SCAN.
function Worker:sweep_stranded()
    local cursor, r, kind = self.life:sweep_step(self.sweep_cursor or "0")
    self:step_failed("the stranded-invocation sweep", cursor == nil and r or nil, kind)
    if cursor == nil then
        return
    end
    self.sweep_cursor = cursor
    if r[1] > 0 then
        log.info("released this daemon's claims on attempts it is not running (not charged)", { count = r[1] })
    end
    if r[3] > 0 then
        self.report.inc("relay_missing_payload_total", nil, r[3])
        log.error("invocations left no pending entry and their entry is gone: data loss", { count = r[3] })
    end
    for i = 4, #r do
        log.warn("re-queued an invocation whose message was in no pending list", { message_id = r[i][1],
            invocation = r[i][2], new_id = r[i][3] })
    end
end


function Worker:reload(why)
    local ok, err = self.registry:reload()
    if not ok then
        log.error("reloading apps failed; keeping the loaded ones", { reason = why, error = err })
    else
        self.slots:resize()
        self.known_apps_at = nil
        log.info("apps reloaded", { reason = why, apps = #self.registry.list })
    end
end


-- How often a daemon says again which apps it runs (relay.known_apps).
local KNOWN_APPS_EVERY_MS = 60 * 1000

--- Tells the fleet's hash of known apps which apps this daemon runs: after
-- a reload, then once a minute.
function Worker:record_known_apps()
    local now = clock.now_ms()
    if self.known_apps_at and now - self.known_apps_at < KNOWN_APPS_EVERY_MS then
        return
    end
    local ok, err = known_apps.record(self.client, self.keys.apps, self.registry:valid_names(), now)
    if ok then
        self.known_apps_at = now
    else
        log.failing("known_apps", "recording the known apps failed", { error = err })
    end
end


--- Trims old acknowledged entries (unless RELAY_RETENTION=0), then forgets
-- the trusted records of every entry no longer in the stream, whoever
-- removed it: the record set never outgrows the stream.
function Worker:trim()
    if self.cfg.retention_ms > 0 then
        local removed, err = self.life:trim(self.cfg.retention_ms)
        if removed == nil then
            log.failing("trim", "trimming the stream failed", { error = err })
        elseif removed > 0 then
            log.debug("trimmed acknowledged entries", { count = removed })
        end
    end
    local forgotten, err = redis.eval(self.client, scripts.forget_trusted, { self.cfg.stream, self.keys.trusted }, {})
    if forgotten == nil then
        log.failing("trim", "forgetting trusted records failed", { error = err })
    else
        log.recovered("trim", "trimming works again")
    end
end


--- Forced stop: runs every container's kill sequence (TERM, the driver's
-- kill hooks, KILL) and gives it a moment; their state stays for recovery.
function Worker:kill_containers()
    if self.slots:terminate_all() then
        local deadline = loop.monotonic() + self.constants.kill_grace_ms / 1000 + 0.5
        while self.slots.running > 0 and loop.monotonic() < deadline do
            loop.sleep(0.02)
        end
    end
    -- Only once every killed container is confirmed gone: one still running
    -- must keep its lease.
    if self.slots.running == 0 and self.guard:declare_self_dead(KILL_RECORD_TIMEOUT_S) then
        log.info("declared this instance dead: its running attempts are charged at once",
            { instance = self.instance })
    end
end


--- Ends the process at once (a forced stop); the embedder's before_exit
-- (relay dev: stop its private Redis) runs first, since nothing after
-- loop.exit does.
function Worker:exit_now(code)
    if self.before_exit then
        local ok, err = pcall(self.before_exit)
        if not ok then
            log.error("before_exit failed", { error = tostring(err) })
        end
    end
    io.stdout:flush()
    loop.exit(code)
end


function Worker:install_signals()
    local function on_stop(signum)
        if self.shutdown.draining then
            log.warn("second signal: killing containers and exiting; state stays for recovery", { signal = signum })
            self.shutdown:stop_forced(signum, function() self:kill_containers() end,
                function(code) self:exit_now(code) end)
            return
        end
        log.info("draining: no new reads or starts; running invocations finish", { signal = signum })
        self.shutdown:drain()
    end
    loop.on_signal(SIGTERM, on_stop)
    loop.on_signal(SIGINT, on_stop)
    loop.on_signal(SIGHUP, function() self:reload("SIGHUP") end)
end


function Worker:connect()
    local client, err = redis.connect(self.cfg, self.limits.reply)
    if not client then
        exit.env(err)
    end
    self.client = client
    self.reader, err = redis.connect(self.cfg, self.limits.reply)
    if not self.reader then
        exit.env(err)
    end
    self.life = lifecycle.new({
        client = client, stream = self.cfg.stream, group = self.cfg.group,
        consumer = self.cfg.consumer, instance = self.instance, constants = self.constants,
        dlq_maxlen = self.cfg.dlq_maxlen or nil,
    })
    self.guard = guard.new({ client = client, stream = self.cfg.stream, consumer = self.cfg.consumer,
        instance = self.instance, constants = self.constants, shutdown = self.shutdown })
    observe.watch(self.obs, { client = client, reader = self.reader, slots = self.slots,
        blocker = function() return self.read_blocker end })
end


--- The start-up sweep, then the apps: this consumer's orphans (its runtime
-- root is named after its consumer, stream and group; left alone while a
-- live process still holds it), then those of consumers on this host whose
-- holder is dead (runtime.sweep_dead_consumers). The daemon then holds its
-- root for its whole life.
function Worker:start_runtime()
    self:sweep_own_root()
    self:sweep_dead_consumers()
    local loaded, err = self.registry:reload()
    if not loaded then
        exit.env(err)
    end
    self.dispatch_ctx = {
        lifecycle = self.life, runtime = self.rt, registry = self.registry, slots = self.slots,
        reporter = self.report, shutdown = self.shutdown, constants = self.constants,
    }
end


--- This consumer's orphans. Its root's previous holders are then dead with
-- their containers gone, so they are declared dead; this daemon records
-- itself as the root's holder.
function Worker:sweep_own_root()
    local ok, swept, owned, dead = pcall(runtime.sweep, self.rt, { hold = true })
    if not ok then
        log.warn("orphan cleanup failed", { error = swept })
    elseif owned then
        log.info("runtime root held by a live process: its orphans are left to it",
            { consumer = self.cfg.consumer, root = self.rt.name })
    else
        if swept > 0 then
            log.info("removed orphaned containers of this consumer", { count = swept })
        end
        if self.guard.taken_from then  -- the name's previous holder ran its containers in this very root
            dead[#dead + 1] = { stream = self.cfg.stream, instance = self.guard.taken_from }
        end
        self:declare_dead(dead)
    end
    local recorded, err = runtime.record_holder(self.rt, self.cfg.stream, self.instance)
    if not recorded then
        log.warn("cannot record this daemon in its runtime root; replicas will wait out its leases after a crash",
            { error = err })
    end
end


--- The leftovers of consumers on this host whose holder is dead (their
-- consumer key gone, or a dead pid on this host).
function Worker:sweep_dead_consumers()
    local fs, host = require("relay.fs"), require("relay.config").hostname()
    local function holder_dead(name, stream)
        local value = self.client:call("GET", keys.for_stream(stream).consumer(name))
        if type(value) ~= "string" then
            return value ~= nil  -- no key: no holder; no reply: leave it be
        end
        local h_host, pid = value:match("^(.*):(%d+):[^:]*$")
        return h_host == host and not fs.exists("/proc/" .. pid)
    end
    local ok, removed, dead = pcall(runtime.sweep_dead_consumers, self.rt, holder_dead)
    if not ok then
        log.warn("cleanup of dead consumers failed", { error = removed })
        return
    end
    if removed > 0 then
        log.info("removed orphaned containers of dead consumers on this host", { count = removed })
    end
    self:declare_dead(dead)
end


--- Declares the swept roots' dead daemons of this stream dead in Redis
-- (relay.guard), so their attempts are charged without waiting out leases.
function Worker:declare_dead(holders)
    local instances = {}
    for _, h in ipairs(holders) do
        if h.stream == self.cfg.stream then
            instances[#instances + 1] = h.instance
        end
    end
    if #instances == 0 then
        return
    end
    local failed = self.guard:declare_dead(instances)
    log.info("declared the dead daemons of swept runtime roots dead", { count = #instances - failed })
    if failed > 0 then
        log.warn("could not declare dead daemons dead; their attempts are charged when their leases end",
            { count = failed })
    end
end


function Worker:drain()
    self.shutdown:wait()
    notify.stopping(string.format("draining: %d running", self.slots.running))
    self.rt.warm:close()  -- idle containers hold no work: they go first
    while self.busy > 0 or self.slots.running > 0 do
        loop.sleep(0.05)
    end
    -- A forced stop (second signal) exits 128+signal itself once its
    -- death record is answered; the drain must not exit under it.
    self.shutdown:drained()
    local unanswered = self.life:release_unanswered()
    if unanswered > 0 then
        log.warn("could not release claims of unanswered TryStarts; they count as lost", { count = unanswered })
    end
    self.guard:release()
    log.info("stopped")
end


--- What the on_start hook is told.
function Worker:started_info()
    local apps = {}
    for i, app in ipairs(self.registry.list) do
        apps[i] = app.name
    end
    return { stream = self.cfg.stream, group = self.cfg.group, consumer = self.cfg.consumer,
        instance = self.instance, apps = apps }
end


--- The loops that run until the drain: read, reclaim, housekeeping, trim
-- and the schedule tick.
function Worker:start_loops()
    local c = self.constants
    loop.spawn(function() self:read_loop() end)
    self:every(c.housekeeping_every_ms, Worker.housekeeping)
    self:every(c.trim_every_ms, Worker.trim)
    self:every(c.trim_every_ms, Worker.count_trimmed)
    self:every(c.schedule_tick_ms, scheduler.ticker({ client = self.client, stream = self.cfg.stream,
        registry = self.registry }))
end


--- Runs the daemon until drained. opts.on_ready(worker) runs once ready;
-- opts.before_exit() before a forced stop ends the process.
function _M.run(cfg, opts)
    opts = opts or {}
    log.configure(cfg.log_level, cfg.log_format)
    log.start_async()  -- from now on the loop never waits for the reader of stderr
    local w = new_worker(cfg, opts.constants or constants)
    w.before_exit = opts.before_exit
    w:connect()
    w.guard:claim()
    w:install_signals()
    local ok, err = w:ensure_group()
    if not ok then
        exit.env("cannot create consumer group " .. cfg.group .. " on " .. cfg.stream .. ": " .. tostring(err))
    end
    w:start_runtime()
    w.guard:start_heartbeat()
    clock.start(w.client, w.constants.heartbeat_every_ms)
    log.info("relay started", { stream = cfg.stream, group = cfg.group, consumer = cfg.consumer,
        instance = w.instance, apps = #w.registry.list, max_concurrency = cfg.max_concurrency })
    if w.constants.compressed then
        log.warn("test build: lifecycle waits are compressed (seconds for minutes); not for production")
    end
    w:housekeeping()
    observe.start(w.obs, w:started_info())
    w:start_loops()
    notify.ready(string.format("consuming %s as %s", cfg.stream, cfg.consumer))
    notify.start_watchdog()
    if opts.on_ready then
        opts.on_ready(w)
    end
    w:drain()
    return 0
end


return _M
