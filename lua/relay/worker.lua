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
local classify = require("relay.classify")
local constants = require("relay.constants")
local dispatch = require("relay.dispatch")
local exit = require("relay.exit")
local guard = require("relay.guard")
local keys = require("relay.keys")
local lifecycle = require("relay.lifecycle")
local log = require("relay.log")
local loop = require("relay.core.loop")
local matcher_core = require("relay.core.matcher")
local observe = require("relay.observe")
local redis = require("relay.redis")
local registry = require("relay.registry")
local runtime = require("relay.runtime")
local scheduler = require("relay.scheduler")
local scripts = require("relay.scripts")
local shutdown_mod = require("relay.shutdown")
local slots_mod = require("relay.slots")
local sync = require("relay.sync")

local _M = {}
local Worker = {}

local unpack = unpack
Worker.__index = Worker

local SIGINT, SIGTERM, SIGHUP = 2, 15, 1
local READ_BACKOFF_CAP_S = 5
local LOCAL_RETRY_LIMIT = 10000
local INFRA_RETRY_MS = 2000
local SETTLERS = 2  -- batches of unmatched entries being acknowledged while the next read runs


local function random_instance_id()
    local f = io.open("/dev/urandom", "rb")
    local bytes = f and f:read(8) or tostring(os.time() .. loop.getpid())
    if f then
        f:close()
    end
    return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end))
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
        consumer = cfg.consumer })
    local apps = registry.new({ apps_dir = cfg.apps, runtime = self.rt, max_concurrency = cfg.max_concurrency })
    self.registry = apps
    self.slots = slots_mod.new({ max = cfg.max_concurrency,
        limit_of = function(app_name) return apps:effective_concurrency(app_name) end })
    self.message_slots = sync.semaphore(math.max(16, 4 * cfg.max_concurrency))
    self.settlers = sync.semaphore(SETTLERS)
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
        if not ok then
            log.error("message processing failed", { message_id = msg.id, error = result })
            self.inflight[msg.id] = nil
            return
        end
        if result == nil then
            log.warn("redis unavailable while processing a message; it stays pending",
                { message_id = msg.id, error = extra })
            extra = INFRA_RETRY_MS
        end
        self:schedule_local_retry(msg, result ~= "acked" and extra or nil)
    end)
end


--- Runs a pending message again when its earliest retry is due, rather
-- than waiting for the reclaim sweep; reclaim remains the backstop.
function Worker:schedule_local_retry(msg, retry_in_ms)
    if not retry_in_ms or self.shutdown.draining or self.local_retries >= LOCAL_RETRY_LIMIT then
        self.inflight[msg.id] = nil
        return
    end
    self.local_retries = self.local_retries + 1
    loop.spawn(function()
        loop.sleep(retry_in_ms / 1000 + 0.01)
        self.local_retries = self.local_retries - 1
        if self.shutdown.draining then
            self.inflight[msg.id] = nil
            return
        end
        self.message_slots.acquire()
        self:spawn_message(msg)
    end)
end


function Worker:classifier(trusted)
    return {
        matcher = self.registry.matcher, labels = self.registry.labels, max_bytes = self.cfg.max_event_bytes,
        now_ms = loop.now_ms, validate = matcher_core.validate_object, trusted = trusted,
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
        log.warn("cannot check entries with reserved fields; they stay pending", { error = err, count = #ids })
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
    local id, err = self.life:dead_letter_message(msg, msg.reason)
    if not id then
        log.warn("cannot dead-letter a malformed message; it stays pending", { message_id = msg.id, error = err })
        return
    end
    self.report.dlq({ app = "-", handler = "-" }, msg, msg.reason, 0, id)
    log.warn("malformed message dead-lettered", { message_id = msg.id, reason = msg.reason, dlq_id = id })
end


--- Classifies a batch: malformed entries are dead-lettered, matched ones
-- dispatched, and unmatched and missing ones settled together by one task
-- while the reader goes on (at most SETTLERS batches in flight). first =
-- the entries come from a ">" read: never delivered before.
function Worker:handle_batch(entries, first)
    local classifier = self:classifier(self:trusted_ids(entries))
    local missing, unmatched, by_id = {}, {}, {}
    for _, entry in ipairs(entries) do
        if not self.inflight[entry[1]] then
            local msg = classify.classify(entry, classifier)
            if msg.kind == "missing" then
                missing[#missing + 1] = msg.id
            elseif msg.kind ~= "schedule" and msg.kind ~= "unverified" then  -- schedule: decided by dispatch
                self.report.event(msg.kind, msg)
            end
            if msg.kind == "unmatched" then
                unmatched[#unmatched + 1] = msg.id
                by_id[msg.id] = msg
            elseif msg.kind == "malformed" then
                self:dead_letter_malformed(msg)
            elseif msg.kind == "matched" or msg.kind == "targeted" or msg.kind == "schedule" then
                self.message_slots.acquire()
                self:spawn_message(msg)
            end
        end
    end
    if #missing > 0 or #unmatched > 0 then
        self:settle_in_background(missing, unmatched, by_id, first)
    end
end


--- Settles a batch's missing and unmatched entries in a task of its own,
-- waiting first while SETTLERS batches are being settled.
function Worker:settle_in_background(missing, unmatched, by_id, first)
    self.settlers.acquire()
    self.busy = self.busy + 1
    loop.spawn(function()
        local ok, err = xpcall(function()
            self:settle_missing(missing)
            self:settle_unmatched(unmatched, by_id, first)
        end, debug.traceback)
        self.busy = self.busy - 1
        self.settlers.release()
        if not ok then
            log.error("settling a batch failed", { error = err })
        end
    end)
end


function Worker:settle_missing(ids)
    if #ids == 0 then
        return
    end
    local counted, err = self.life:clear_missing(ids)
    if counted == nil then
        log.warn("cannot clear entries without a body", { error = err })
        return
    end
    self.report.inc("relay_missing_payload_total", nil, counted)
    log.error("pending entries have no body (trimmed or deleted outside relay): data loss",
        { count = counted, ids = table.concat(ids, ",") })
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
        log.warn("cannot acknowledge unmatched messages; they stay pending", { error = err })
        return
    end
    for _, id in ipairs(kept) do
        self.message_slots.acquire()
        self:spawn_message(by_id[id])
    end
end


--- One XREADGROUP: ">" blocks on the reader connection; an explicit id
-- re-reads this consumer's own pending entries.
function Worker:read(from)
    local c, cfg = self.constants, self.cfg
    local count = math.max(16, 2 * cfg.max_concurrency)
    if from == ">" then
        return self.reader:call_timeout(c.read_block_ms / 1000 + 5, "XREADGROUP", "GROUP", cfg.group, cfg.consumer,
            "COUNT", count, "BLOCK", c.read_block_ms, "STREAMS", cfg.stream, ">")
    end
    return self.reader:call_timeout(10, "XREADGROUP", "GROUP", cfg.group, cfg.consumer, "COUNT", count,
        "STREAMS", cfg.stream, from)
end


function Worker:recover_read_error(err, kind, delay)
    if self.shutdown.draining then
        return delay  -- the read was cut short by the shutdown itself
    end
    if kind == "reply" and tostring(err):find("NOGROUP", 1, true) then
        log.warn("consumer group is gone; recreating it at 0", { error = err })
        self.report.inc("relay_group_recreated_total")
        self.group_recreated = true
        self:ensure_group()
        return 0.1
    end
    log.warn("reading the stream failed; backing off", { error = err, kind = kind })
    loop.sleep(delay)
    return math.min(delay * 2, READ_BACKOFF_CAP_S)
end


--- Re-reads this consumer's own pending entries: a restart's unfinished
-- work. Returns the read backoff it ended with.
function Worker:read_own_pending(delay)
    local cursor = "0"
    while not self.shutdown.draining and cursor do
        local reply, err, kind = self:read(cursor)
        if reply == nil then
            delay = self:recover_read_error(err, kind, delay)
        else
            local entries = reply ~= redis.null and reply[1] and reply[1][2] or {}
            cursor = entries[#entries] and entries[#entries][1]
            if cursor then
                self:handle_batch(entries)
            end
        end
    end
    return delay
end


--- Own pending entries first, then new entries until draining.
function Worker:read_loop()
    local delay = self:read_own_pending(0.1)
    while not self.shutdown.draining do
        local reply, err, kind = self:read(">")
        if reply == nil then
            delay = self:recover_read_error(err, kind, delay)
        else
            delay = 0.1
            if reply ~= redis.null and not self.shutdown.draining then
                self:handle_batch(reply[1][2], true)
            end
        end
    end
end


--- XAUTOCLAIM sweep: claims entries idle past MinPendingIdle (a dead
-- replica's, or messages waiting for their retry) and runs them here.
function Worker:reclaim_once()
    local cursor = "0-0"
    repeat
        local next_cursor, entries, deleted = self.life:reclaim_step(cursor, 100)
        if next_cursor == nil then
            log.warn("reclaim sweep failed", { error = entries })
            return
        end
        if deleted > 0 then
            self.report.inc("relay_missing_payload_total", nil, deleted)
            log.error("reclaimed entries have no body (trimmed or deleted outside relay): data loss",
                { count = deleted })
        end
        if #entries > 0 then
            self.report.inc("relay_reclaimed_total", nil, #entries)
            self:handle_batch(entries)
        end
        cursor = next_cursor
    until cursor == "0-0" or self.shutdown.draining
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


function Worker:housekeeping()
    local paused = self.client:call("SMEMBERS", self.keys.paused)
    if type(paused) == "table" then
        self.registry:set_paused(paused)
    end
    if self.registry:changed() then
        self:reload("template change")
    end
end


function Worker:reload(why)
    local ok, err = self.registry:reload()
    if not ok then
        log.error("reloading apps failed; keeping the loaded ones", { reason = why, error = err })
    else
        self.slots:resize()
        log.info("apps reloaded", { reason = why, apps = #self.registry.list })
    end
end


--- Trims old acknowledged entries (unless RELAY_RETENTION=0), then forgets
-- the trusted records of every entry no longer in the stream, whoever
-- removed it: the record set never outgrows the stream.
function Worker:trim()
    if self.cfg.retention_ms > 0 then
        local removed, err = self.life:trim(self.cfg.retention_ms)
        if removed == nil then
            log.warn("trimming the stream failed", { error = err })
        elseif removed > 0 then
            log.debug("trimmed acknowledged entries", { count = removed })
        end
    end
    local forgotten, err = redis.eval(self.client, scripts.forget_trusted, { self.cfg.stream, self.keys.trusted }, {})
    if forgotten == nil then
        log.warn("forgetting trusted records failed", { error = err })
    end
end


--- Forced stop: runs every container's kill sequence (TERM, the driver's
-- kill hooks, KILL) and gives it a moment; their state stays for recovery.
function Worker:kill_containers()
    if self.slots:terminate_all() then
        loop.sleep(self.constants.kill_grace_ms / 1000 + 0.5)
    end
end


function Worker:install_signals()
    local function on_stop(signum)
        if self.shutdown.draining then
            log.warn("second signal: killing containers and exiting; state stays for recovery", { signal = signum })
            -- set before the kill: drain() may finish while kill_containers()
            -- sleeps, and must then exit with this code too
            self.shutdown:force(signum)
            self:kill_containers()
            io.stdout:flush()
            loop.exit(self.shutdown.exit_code)
        end
        log.info("draining: no new reads or starts; running invocations finish", { signal = signum })
        self.shutdown:drain()
    end
    loop.on_signal(SIGTERM, on_stop)
    loop.on_signal(SIGINT, on_stop)
    loop.on_signal(SIGHUP, function() self:reload("SIGHUP") end)
end


function Worker:connect()
    local client, err = redis.connect(self.cfg)
    if not client then
        exit.env(err)
    end
    self.client = client
    self.reader, err = redis.connect(self.cfg)
    if not self.reader then
        exit.env(err)
    end
    self.life = lifecycle.new({
        client = client, stream = self.cfg.stream, group = self.cfg.group,
        consumer = self.cfg.consumer, instance = self.instance, constants = self.constants,
    })
    self.guard = guard.new({ client = client, stream = self.cfg.stream, consumer = self.cfg.consumer,
        instance = self.instance, constants = self.constants, shutdown = self.shutdown })
    observe.watch(self.obs, { client = client, reader = self.reader, slots = self.slots })
end


--- Removes this consumer's orphaned containers, then loads the apps.
function Worker:start_runtime()
    local ok, swept = pcall(runtime.sweep, self.rt)
    if not ok then
        log.warn("orphan cleanup failed", { error = swept })
    elseif swept and swept > 0 then
        log.info("removed orphaned containers of this consumer", { count = swept })
    end
    local loaded, err = self.registry:reload()
    if not loaded then
        exit.env(err)
    end
    self.dispatch_ctx = {
        lifecycle = self.life, runtime = self.rt, registry = self.registry, slots = self.slots,
        reporter = self.report, shutdown = self.shutdown, constants = self.constants,
    }
end


function Worker:drain()
    self.shutdown:wait()
    while self.busy > 0 or self.slots.running > 0 do
        loop.sleep(0.05)
    end
    if self.shutdown.exit_code then
        -- forced stop (second signal): the killed containers were reaped (no
        -- invocation is running), their state stays for recovery; the
        -- process exits 128+signal, not 0
        io.stdout:flush()
        loop.exit(self.shutdown.exit_code)
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
    self:every(c.reclaim_every_ms, Worker.reclaim_once)
    self:every(c.housekeeping_every_ms, Worker.housekeeping)
    self:every(c.trim_every_ms, Worker.trim)
    self:every(c.schedule_tick_ms, scheduler.ticker({ client = self.client, stream = self.cfg.stream,
        registry = self.registry }))
end


--- Runs the daemon until drained. opts.on_ready(worker) runs once ready.
function _M.run(cfg, opts)
    opts = opts or {}
    log.configure(cfg.log_level, cfg.log_format)
    local w = new_worker(cfg, opts.constants or constants)
    w:connect()
    w.guard:claim()
    w:install_signals()
    local ok, err = w:ensure_group()
    if not ok then
        exit.env("cannot create consumer group " .. cfg.group .. " on " .. cfg.stream .. ": " .. tostring(err))
    end
    w:start_runtime()
    w.guard:start_heartbeat()
    log.info("relay started", { stream = cfg.stream, group = cfg.group, consumer = cfg.consumer,
        instance = w.instance, apps = #w.registry.list, max_concurrency = cfg.max_concurrency })
    w:housekeeping()
    observe.start(w.obs, w:started_info())
    w:start_loops()
    if opts.on_ready then
        opts.on_ready(w)
    end
    w:drain()
    return 0
end


return _M
