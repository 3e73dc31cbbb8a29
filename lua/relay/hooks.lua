--- User hooks (docs/hooks.md): RELAY_HOOKS names a Lua file returning a
-- table of optional functions on_start, on_event, on_attempt, on_dlq, on_log.
--
-- The file runs in a sandbox: an allow-list
-- of the standard library (no io, no os.execute/exit/remove, no os.getenv:
-- the environment holds the Redis password; no require, package, debug,
-- coroutine, getfenv/setfenv, string.dump, load of bytecode), an
-- error-raising metatable on its globals, and `relay.log(level, msg,
-- fields)`, `relay.now()` (wall clock, ms) and `relay.udp(host, port)`
-- (`:send(data)` never blocks; a datagram the kernel cannot take is dropped
-- and counted). Names resolve only while the file loads; at run time
-- relay.udp takes numeric addresses, because a lookup would block the loop.
-- Strings share one metatable, whose __index is the real string table, so
-- ("").dump would reach string.dump whatever the sandbox's own string table
-- holds: loading a hooks file removes string.dump from the whole Lua state
-- (nothing in Relay uses it).
--
-- Every call runs on a fresh coroutine that is not a relay task, so
-- anything that waits (loop.sleep, redis) raises "can only run inside a
-- relay task (not in a hook …)" instead of parking the daemon; a hook that
-- yields is an error too. A hook error is logged at most once per hook per
-- ERROR_LOG_INTERVAL_S with the count of suppressed ones, and never changes
-- an outcome. Hooks do not nest: logging from a hook never reaches on_log.
--
-- Runaway hooks: LuaJIT checks count hooks only in the
-- interpreter, never in compiled traces. So every function of the hooks
-- file (and any it builds with loadstring) is excluded from the JIT
-- (jit.off(fn, true)), and each call runs under a LUA_MASKCOUNT hook that
-- raises once the call exceeds INSTRUCTION_BUDGET VM instructions; the
-- sandbox's pcall/xpcall re-raise that error, so it cannot be swallowed.
-- LuaJIT runs an xpcall message handler before unwinding, that is still
-- inside the count hook that raised the budget error, and calls no hook
-- while one is active: a handler run then would never be cut off. So the
-- sandbox's xpcall hands the user's handler only errors raised before the
-- budget ran out.
-- No hook code runs outside the budget: Relay never calls tostring (so
-- never __tostring) on what a hook raised, a non-string error is reported
-- as its type; and on_log gets copies of a record's tables, so a hook
-- cannot set a metatable on one Relay keeps using.
-- What the budget cannot cut off is a single long C call (a huge
-- string.rep, a pathological pattern in string.find): hooks must stay small.
--
-- Absent hooks cost nothing: the returned object only has fields for the
-- hooks that exist, so call sites test a plain nil.
local log = require("relay.log")
local loop = require("relay.core.loop")

local _M = {}

local HOOK_NAMES = { on_start = true, on_event = true, on_attempt = true, on_dlq = true, on_log = true }
local LEVELS = { debug = true, info = true, warn = true, error = true }
local ERROR_LOG_INTERVAL_S = 10
local BUDGET_STEP = 1000
_M.INSTRUCTION_BUDGET = 10 * 1000 * 1000
local BUDGET_ERROR = "hook exceeded its instruction budget (runaway loop?)"

local active = false         -- a hook (or the hooks file) is running now
local exceeded = false       -- the running call hit its budget


local function copy(t)
    local c = {}
    for k, v in pairs(t) do
        c[k] = v
    end
    return c
end


--- A hook's error as text, without calling any of its metamethods (a
-- __tostring would run hook code outside the budget).
local function describe_error(err)
    local kind = type(err)
    if kind == "string" or kind == "number" then
        return tostring(err)
    end
    return "(error object is a " .. kind .. " value)"
end


--- Runs fn(arg) on a fresh non-task coroutine under the instruction budget.
-- @return true, result | false, error message
local function run_budgeted(fn, arg)
    local budget = _M.INSTRUCTION_BUDGET
    local steps = 0
    local co = coroutine.create(fn)
    local prev_fn, prev_mask, prev_count = debug.gethook()
    exceeded = false
    debug.sethook(function()
        steps = steps + BUDGET_STEP
        if steps > budget then
            exceeded = true
            error(BUDGET_ERROR, 0)
        end
    end, "", BUDGET_STEP)
    local ok, result = coroutine.resume(co, arg)
    if prev_fn then
        debug.sethook(prev_fn, prev_mask, prev_count)
    else
        debug.sethook()
    end
    if exceeded then
        return false, BUDGET_ERROR
    end
    if ok and coroutine.status(co) ~= "dead" then
        return false, "a hook must not yield (hooks cannot wait)"
    end
    if not ok then
        return false, debug.traceback(co, describe_error(result))
    end
    return true, result
end
_M.run_budgeted = run_budgeted


-- pcall/xpcall for the sandbox: they cannot swallow the budget error.
local function guard_budget(ok, ...)
    if not ok and exceeded then
        error(BUDGET_ERROR, 0)
    end
    return ok, ...
end


-- Once the budget ran out, the user's message handler is not called: it
-- would run inside the count hook, where no count hook fires.
local function sandbox_xpcall(f, handler, ...)
    return guard_budget(xpcall(f, function(err)
        if exceeded then
            return BUDGET_ERROR
        end
        return handler(err)
    end, ...))
end


local function make_udp(loading)
    local udp = require("relay.core.udp")
    return function(host, port)
        assert(type(host) == "string", "relay.udp: host must be a string")
        assert(type(port) == "number", "relay.udp: port must be a number")
        local sock, err = udp.open(host, port, loading())
        if not sock then
            return nil, err
        end
        local obj = {}
        --- send(data) or :send(data): true if sent, false if dropped.
        obj.send = function(a, b)
            local data = (a == obj) and b or a
            return sock:send(tostring(data))
        end
        obj.counts = function() return sock:counts() end
        obj.close = function() sock:close() end
        return obj
    end
end


local function relay_api(loading)
    return {
        log = function(level, msg, fields)
            if not LEVELS[level] then
                error("relay.log: level must be debug, info, warn or error", 2)
            end
            log[level](tostring(msg), type(fields) == "table" and copy(fields) or nil)
        end,
        now = function() return loop.now_ms() end,
        udp = make_udp(loading),
    }
end


local function safe_loadstring(env)
    return function(text, name)
        if type(text) ~= "string" then
            return nil, "loadstring: only source text is allowed in hooks"
        end
        if text:byte(1) == 27 then
            return nil, "loadstring: bytecode is not allowed in hooks"
        end
        local fn, err = loadstring(text, name)
        if not fn then
            return nil, err
        end
        jit.off(fn, true)
        return setfenv(fn, env)
    end
end


--- The sandbox environment for a hooks file.
local function sandbox(loading)
    local env = {
        assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs, select = select,
        tonumber = tonumber, tostring = tostring, type = type, unpack = unpack, rawequal = rawequal,
        rawget = rawget, rawset = rawset, setmetatable = setmetatable, _VERSION = _VERSION,
        getmetatable = function(v)
            -- Strings share one metatable with Relay: do not hand it out.
            return type(v) == "table" and getmetatable(v) or nil
        end,
        pcall = function(f, ...) return guard_budget(pcall(f, ...)) end,
        xpcall = sandbox_xpcall,
        string = copy(string), table = copy(table), math = copy(math), bit = copy(bit),
        os = { clock = os.clock, date = os.date, difftime = os.difftime, time = os.time },
        relay = relay_api(loading),
    }
    env.string.dump = nil
    env.loadstring = safe_loadstring(env)
    env.load = function(chunk, name)
        return env.loadstring(chunk, name)
    end
    env._G = env
    return setmetatable(env, {
        __index = function(_, key)
            error("'" .. tostring(key) .. "' is not available in the hook sandbox", 2)
        end,
        __newindex = function(_, key)
            error("assignment to undeclared global '" .. tostring(key) .. "' in the hooks file (use local)", 2)
        end,
    })
end


local function read_file(path)
    local f, err = io.open(path, "rb")
    if not f then
        return nil, err
    end
    local text = f:read("*a")
    f:close()
    return text
end


--- Logs a hook failure at most once per interval per hook.
local function reporter()
    local last, suppressed = {}, {}
    return function(name, err)
        local now = loop.monotonic()
        if last[name] and now - last[name] < ERROR_LOG_INTERVAL_S then
            suppressed[name] = (suppressed[name] or 0) + 1
            return
        end
        last[name] = now
        local fields = { hook = name, error = err }
        if (suppressed[name] or 0) > 0 then
            fields.suppressed = suppressed[name]
        end
        suppressed[name] = 0
        active = true  -- keep on_log out of it
        log.error("hook failed; outcome unchanged", fields)
        active = false
    end
end


local function wrap(name, fn, report)
    return function(arg)
        if active then
            return nil  -- no nesting: a hook's own log lines skip on_log
        end
        active = true
        local ok, result = run_budgeted(fn, arg)
        active = false
        if not ok then
            report(name, result)
            return nil
        end
        return result
    end
end


--- Loads a hooks file. Returns an object with a field per defined hook
-- (each a protected caller), or nil, err.
function _M.load(path)
    local text, err = read_file(path)
    if not text then
        return nil, err
    end
    if text:byte(1) == 27 then
        return nil, path .. ": bytecode is not allowed"
    end
    local loading = true
    rawset(string, "dump", nil)  -- see the header: ("").dump reaches the real string table
    local chunk, cerr = loadstring(text, "@" .. path)
    if not chunk then
        return nil, cerr
    end
    jit.off(chunk, true)
    setfenv(chunk, sandbox(function() return loading end))
    active = true
    local ok, result = run_budgeted(chunk)
    active = false
    loading = false
    if not ok then
        return nil, path .. ": " .. result
    end
    if type(result) ~= "table" then
        return nil, path .. ": must return a table of hook functions"
    end
    local report = reporter()
    local hooks = { path = path, names = {} }
    for name, fn in pairs(result) do
        if not HOOK_NAMES[name] then
            return nil, path .. ": unknown hook '" .. tostring(name) ..
                "' (expected on_start, on_event, on_attempt, on_dlq or on_log)"
        end
        if type(fn) ~= "function" then
            return nil, path .. ": " .. name .. " must be a function"
        end
        hooks[name] = wrap(name, fn, report)
        hooks.names[#hooks.names + 1] = name
    end
    table.sort(hooks.names)
    return hooks
end


--- Installs on_log (if any) as the log module's hook.
function _M.install_log_hook(hooks)
    log.set_hook(hooks.on_log)
end


return _M
