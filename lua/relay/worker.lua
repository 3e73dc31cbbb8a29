--- The daemon (`relay run`): reads the stream with the consumer group,
-- classifies every entry, dispatches matched ones, reclaims stuck ones,
-- trims old acknowledged ones, and drains on SIGTERM/SIGINT.
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
local metrics = require("relay.metrics")
local observe = require("relay.observe")
local redis = require("relay.redis")
local registry = require("relay.registry")
local runtime = require("relay.runtime")
local scheduler = require("relay.scheduler")
local scripts = require("relay.scripts")
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


local function new_worker(cfg, c)
    local self = setmetatable({}, Worker)
    self.cfg = cfg
    self.constants = c
    self.keys = keys.for_stream(cfg.stream)
    self.instance = random_instance_id()
    self.metrics_registry = metrics.new()
    self.slots = sync.semaphore(cfg.max_concurrency)
    self.per_app_slots = {}
    self.message_slots = sync.semaphore(math.max(16, 4 * cfg.max_concurrency))
    self.settlers = sync.semaphore(SETTLERS)
    self.inflight = {}
    self.local_retries = 0
    self.running = {}
    self.active = 0
    self.busy = 0
    self.stopping = false
    self.killed = false
    self.stopped = sync.event()
    self.idle_event = function() end
    self:init_metric_helpers()
    return self
end


--- w.metrics: counts every outcome and feeds the hooks (relay.observe).
function Worker:init_metric_helpers()
    self.metrics = observe.helpers(self)
end


--- The per-app semaphore, sized to the app's effective concurrency.
function Worker:app_slots(app)
    local sem = self.per_app_slots[app.name]
    local size = self.registry:effective_concurrency(app)
    if not sem or sem.size ~= size then
        sem = sync.semaphore(size)
        sem.size = size
        self.per_app_slots[app.name] = sem
    end
    return sem
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
        local ok, result, extra = xpcall(dispatch.process, debug.traceback, self, msg)
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
    if not retry_in_ms or self.stopping or self.local_retries >= LOCAL_RETRY_LIMIT then
        self.inflight[msg.id] = nil
        return
    end
    self.local_retries = self.local_retries + 1
    loop.spawn(function()
        loop.sleep(retry_in_ms / 1000 + 0.01)
        self.local_retries = self.local_retries - 1
        if self.stopping then
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
    self.metrics.dlq({ app = "-", handler = "-" }, msg, msg.reason, 0, id)
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
                self.metrics.event(msg.kind, msg)
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
    if #missing == 0 and #unmatched == 0 then
        return
    end
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
    self.metrics.inc("relay_missing_payload_total", nil, counted)
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
    if self.stopping then
        return delay  -- the read was cut short by the shutdown itself
    end
    if kind == "reply" and tostring(err):find("NOGROUP", 1, true) then
        log.warn("consumer group is gone; recreating it at 0", { error = err })
        self.metrics.inc("relay_group_recreated_total")
        self.group_recreated = true
        self:ensure_group()
        return 0.1
    end
    log.warn("reading the stream failed; backing off", { error = err, kind = kind })
    loop.sleep(delay)
    return math.min(delay * 2, READ_BACKOFF_CAP_S)
end


--- Re-reads this consumer's own pending entries (a restart's unfinished
-- work), then reads new entries until stopping.
function Worker:read_loop()
    local delay = 0.1
    local cursor = "0"
    while not self.stopping and cursor do
        local reply, err, kind = self:read(cursor)
        if reply == nil then
            delay = self:recover_read_error(err, kind, delay)
        else
            local entries = reply ~= redis.null and reply[1] and reply[1][2] or {}
            if #entries == 0 then
                cursor = nil
            else
                cursor = entries[#entries][1]
                self:handle_batch(entries)
            end
        end
    end
    while not self.stopping do
        local reply, err, kind = self:read(">")
        if reply == nil then
            delay = self:recover_read_error(err, kind, delay)
        else
            delay = 0.1
            if reply ~= redis.null and not self.stopping then
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
            self.metrics.inc("relay_missing_payload_total", nil, deleted)
            log.error("reclaimed entries have no body (trimmed or deleted outside relay): data loss",
                { count = deleted })
        end
        if #entries > 0 then
            self.metrics.inc("relay_reclaimed_total", nil, #entries)
            self:handle_batch(entries)
        end
        cursor = next_cursor
    until cursor == "0-0" or self.stopping
end


function Worker:every(interval_ms, fn)
    loop.spawn(function()
        while not self.stopping do
            loop.sleep(interval_ms / 1000)
            if not self.stopping then
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
    self.metrics_registry:set("relay_running_invocations", self.active)
    local reconnects = self.client:info().reconnects + self.reader:info().reconnects
    self.metrics_registry:set("relay_redis_reconnects_total", reconnects)
end


function Worker:reload(why)
    local ok, err = self.registry:reload()
    if not ok then
        log.error("reloading apps failed; keeping the loaded ones", { reason = why, error = err })
    else
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
    local any = false
    for _, handle in pairs(self.running) do
        any = true
        pcall(function() handle:terminate() end)
    end
    if any then
        loop.sleep(self.constants.kill_grace_ms / 1000 + 0.5)
    end
end


function Worker:install_signals()
    local function on_stop(signum)
        if self.stopping then
            log.warn("second signal: killing containers and exiting; state stays for recovery", { signal = signum })
            self.killed = true
            -- drain() may finish while kill_containers() sleeps; it must then
            -- exit with this code too (spec-worker fix: it used to exit 0)
            self.exit_code = 128 + signum
            self:kill_containers()
            io.stdout:flush()
            loop.exit(128 + signum)
        end
        log.info("draining: no new reads or starts; running invocations finish", { signal = signum })
        self.stopping = true
        self.stopped.set()
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
end


function Worker:start_runtime()
    self.rt = runtime.new({ runtime = self.cfg.runtime, state_dir = self.cfg.state_dir, images = self.cfg.images,
        consumer = self.cfg.consumer })
    local ok, swept = pcall(runtime.sweep, self.rt)
    if not ok then
        log.warn("orphan cleanup failed", { error = swept })
    elseif swept and swept > 0 then
        log.info("removed orphaned containers of this consumer", { count = swept })
    end
    self.registry = registry.new({ apps_dir = self.cfg.apps, runtime = self.rt,
        max_concurrency = self.cfg.max_concurrency })
    local loaded, err = self.registry:reload()
    if not loaded then
        exit.env(err)
    end
end


function Worker:drain()
    self.stopped.wait()
    while self.busy > 0 or self.active > 0 do
        loop.sleep(0.05)
    end
    if self.exit_code then
        -- forced stop (second signal): the killed containers were reaped (no
        -- invocation is active), their state stays for recovery; exit
        -- 128+signal rather than returning 0 (spec-worker fix)
        io.stdout:flush()
        loop.exit(self.exit_code)
    end
    guard.release(self)
    log.info("stopped")
end


--- Runs the daemon until drained. opts.on_ready(worker) runs once ready.
function _M.run(cfg, opts)
    opts = opts or {}
    log.configure(cfg.log_level, cfg.log_format)
    local w = new_worker(cfg, opts.constants or constants)
    observe.attach(w)
    w:connect()
    guard.claim(w)
    w:install_signals()
    local ok, err = w:ensure_group()
    if not ok then
        exit.env("cannot create consumer group " .. cfg.group .. " on " .. cfg.stream .. ": " .. tostring(err))
    end
    w:start_runtime()
    guard.start_heartbeat(w)
    log.info("relay started", { stream = cfg.stream, group = cfg.group, consumer = cfg.consumer,
        instance = w.instance, apps = #w.registry.list, max_concurrency = cfg.max_concurrency })
    w:housekeeping()
    observe.start(w)
    loop.spawn(function() w:read_loop() end)
    w:every(w.constants.reclaim_every_ms, Worker.reclaim_once)
    w:every(w.constants.housekeeping_every_ms, Worker.housekeeping)
    w:every(w.constants.trim_every_ms, Worker.trim)
    local schedule_state = {}
    w:every(w.constants.schedule_tick_ms, function(self) scheduler.tick(self, schedule_state) end)
    if opts.on_ready then
        opts.on_ready(w)
    end
    w:drain()
    return 0
end


return _M
