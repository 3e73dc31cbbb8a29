--- The daemon's view of its apps: the last good version of each, the one
-- matcher compiled over all of them, which apps can run on this host and
-- which are paused fleet-wide. Reloads keep the last good version of an app
-- whose new template is invalid.
local apps = require("relay.apps")
local fs = require("relay.fs")
local log = require("relay.log")

local _M = {}
local Registry = {}
Registry.__index = Registry


--- opts: { apps_dir, runtime (relay.runtime context), max_concurrency }
function _M.new(opts)
    local self = setmetatable({}, Registry)
    self.apps_dir = opts.apps_dir
    self.rt = opts.runtime
    self.max_concurrency = opts.max_concurrency
    self.list = {}
    self.by_name = {}
    self.paused = {}
    self.unavailable = {}
    self.sources = {}
    return self
end


local function report_changes(changes)
    for _, c in ipairs(changes) do
        if c.change == "kept_last_good" then
            log.error("app template is invalid; keeping the last good version", { app = c.name, error = c.error })
        elseif c.change == "invalid" then
            log.error("app is invalid and not loaded", { app = c.name, error = c.error })
        elseif c.change ~= "unchanged" then
            log.info("app " .. c.change, { app = c.name })
        end
    end
end


function Registry:check_availability()
    self.unavailable = {}
    if self.rt then
        -- what the runtime remembers of the previous apps and host paths
        -- (checks, images, id blocks) is checked afresh against the disk
        self.rt:forget()
    end
    for _, app in ipairs(self.list) do
        if app.state == "ok" and self.rt then
            local ok, why = self.rt:check(app)
            if not ok then
                self.unavailable[app.name] = why or "unavailable"
                log.warn("app unavailable on this host", { app = app.name, reason = why })
            end
        end
    end
end


--- Loads (or reloads) every app and recompiles the matcher.
-- @return true | nil, err (the previous state stays in force on error)
function Registry:reload()
    local fingerprint = self:fingerprint()
    local fresh, err = apps.load_all(self.apps_dir)
    if not fresh then
        return nil, err
    end
    local merged, changes = apps.merge(self.list, fresh)
    local matcher, labels_or_err = apps.build_matcher(merged)
    if not matcher then
        return nil, labels_or_err
    end
    report_changes(changes)
    if #merged == 0 and (not self.loaded_fingerprint or #self.list > 0) then
        -- most often a wrong --apps/RELAY_APPS: said once, not at every reload
        log.warn("no apps: every event is acknowledged unmatched until one is added",
            { apps_dir = self.apps_dir })
    end
    self.loaded_fingerprint = fingerprint
    self.list, self.matcher, self.labels = merged, matcher, labels_or_err
    self.by_name = {}
    self.sources = {}
    for _, app in ipairs(merged) do
        self.by_name[app.name] = app
        self.sources[app.name] = app.source
    end
    self:check_availability()
    return true
end


--- A cheap fingerprint of the apps directory: every template's text.
function Registry:fingerprint()
    local parts = {}
    for _, entry in ipairs(fs.list(self.apps_dir) or {}) do
        local text = fs.read_file(self.apps_dir .. "/" .. entry.name .. "/template.yaml") or ""
        parts[#parts + 1] = entry.name .. "\0" .. text
    end
    return table.concat(parts, "\0")
end


--- True when some template.yaml changed since the last reload.
function Registry:changed()
    return self:fingerprint() ~= self.loaded_fingerprint
end


--- Takes the fleet-wide paused set; returns the names paused before and
-- not any more (their held messages can run now), then the newly paused.
function Registry:set_paused(names)
    local paused, resumed, newly = {}, {}, {}
    for _, name in ipairs(names) do
        paused[name] = true
        if not self.paused[name] then
            newly[#newly + 1] = name
        end
    end
    for name in pairs(self.paused) do
        if not paused[name] then
            resumed[#resumed + 1] = name
        end
    end
    self.paused = paused
    table.sort(resumed)
    table.sort(newly)
    return resumed, newly
end


--- The names of the valid apps.
function Registry:valid_names()
    local names = {}
    for _, app in ipairs(self.list) do
        if app.state == "ok" then
            names[#names + 1] = app.name
        end
    end
    return names
end


--- The event entry of a handler, or the schedule entry, or nil.
function Registry:handler(app_name, handler)
    local app = self.by_name[app_name]
    if not app or app.state ~= "ok" then
        return nil, app
    end
    for _, ev in ipairs(app.events or {}) do
        if ev.handler == handler then
            return ev, app
        end
    end
    for _, s in ipairs(app.schedules or {}) do
        if s.handler == handler then
            return s, app
        end
    end
    return nil, app
end


--- Why an app cannot run now (paused, unavailable), or nil if it can.
function Registry:blocked(app_name)
    if self.paused[app_name] then
        return "paused"
    end
    return self.unavailable[app_name]
end


--- min(app concurrency, MAX_CONCURRENCY) of a loaded app; MAX_CONCURRENCY
-- for a name no longer loaded (its running invocations may still finish).
function Registry:effective_concurrency(app_name)
    local app = self.by_name[app_name] or {}
    return math.min(app.concurrency or self.max_concurrency, self.max_concurrency)
end


return _M
