--- relay match: which invocations an event would start (docs/patterns.md).
-- Exit 0 on a match, 1 on none, 2 on a usage error.
--   relay match [--apps DIR] --event JSON          one `<app>/<handler>` line per match
--   relay match --pattern FILE --event JSON        `match` / `no match`
--   relay match [--apps DIR | --pattern FILE] --events FILE [--count]
-- --json: {"match":…,"invocations":[…]} for one event, {"line":N,"invocation":…} per match
-- of --events, {"matched":N,"total":M} with --count.
-- Exit 0 if anything matched, 1 if nothing did, 2 on a malformed single event, an invalid
-- pattern file or another usage/environment error. Invalid apps under --apps are reported on
-- stderr (`relay: FILE:LINE:COL: message`) and skipped; the valid ones are still matched.
local apps = require("relay.apps")
local config = require("relay.config")
local exit = require("relay.exit")
local fs = require("relay.fs")
local log = require("relay.log")
local pattern = require("relay.pattern")
local string_buffer = require("string.buffer")

local _M = {}

-- Bytes of C heap a template's load takes per byte of its YAML (nodes, compiled rules,
-- the index), with some room: with 10,000 one-line rules a reserve of 12 per byte already
-- left the load no heap page to fault in, and every byte more is memory cleared for nothing.
local HEAP_PER_TEMPLATE_BYTE = 14


function _M.configure(cmd)
    cmd:mutex(
        cmd:option("--event", "One event: a JSON object."):argname("<json>"),
        cmd:option("--events", "A file with one JSON event per line (- = stdin)."):argname("<file>")
    )
    cmd:option("--pattern", "A YAML file holding one pattern (the value of pattern:)."):argname("<file>")
    cmd:flag("--count", "With --events: print only `matched N of M`.")
    cmd:flag("--json", "JSON: one object for --event or --count, else one per match.")
    config.add_flags(cmd, { "apps" })
end


--- Sets the process up for a bulk load of the apps' rules (relay.core.heap, only for this
-- short-lived command): the C heap it will need populated in one step (faulting it in page
-- by page was a third of a 10,000-rule load), and the rules left to the process's end
-- rather than freed one by one at exit.
local function prepare_bulk_load(apps_dir)
    local bytes = 0
    for _, name in ipairs(fs.names(apps_dir) or {}) do
        bytes = bytes + (fs.size(apps_dir .. "/" .. name .. "/template.yaml") or 0)
    end
    local heap = require("relay.core.heap")
    heap.reserve(bytes * HEAP_PER_TEMPLATE_BYTE)
    heap.leave_at_exit()
end


--- The matcher and its labels: one rule from --pattern, or every valid app's rules.
local function build(args, cfg)
    local matcher = require("relay.core.matcher")
    if args.pattern then
        local json, err = pattern.load_file(args.pattern)
        if not json then
            exit.usage(err)
        end
        local m = matcher.new()
        local _, add_err = m:add(json)
        if add_err then
            exit.usage(args.pattern .. ": " .. add_err)
        end
        return m, { "match" }
    end
    prepare_bulk_load(cfg.apps)
    local list, err = apps.load_all(cfg.apps, { bulk = true })
    if not list then
        exit.env(err)
    end
    for _, app in ipairs(list) do
        if app.state ~= "ok" then
            io.stderr:write("relay: ", app.error, "\n")
        end
    end
    local m, labels = apps.build_matcher(list, matcher)
    if not m then
        exit.env(labels)
    end
    return m, labels
end


local function match_one(args, cfg, m, labels, now_ms)
    local ids, reason = m:match(args.event, cfg.max_event_bytes, now_ms)
    if not ids then
        exit.usage("malformed event: " .. reason)
    end
    if args.json then
        local names = {}
        for i, id in ipairs(ids) do
            names[i] = log.json_quote(labels[id + 1])
        end
        io.stdout:write('{"match":', tostring(#ids > 0),
            args.pattern and "" or (',"invocations":[' .. table.concat(names, ",") .. "]"), "}\n")
    elseif args.pattern then
        io.stdout:write(#ids > 0 and "match\n" or "no match\n")
    else
        for _, id in ipairs(ids) do
            io.stdout:write(labels[id + 1], "\n")
        end
    end
    return #ids > 0 and 0 or 1
end


--- What --events prints, from the scan's batches of (line, rule id) pairs: `<line> <label>` per
-- pair, or with --pattern each matching line's number once; with --count nothing (the scan
-- only counts). Each batch is formatted into one string.buffer and written at once: writing
-- numbers piece by piece costs a string per line, ~15 % of the whole command on ours-subset.
local function match_printer(args, labels)
    if args.count then
        return nil
    end
    local out, buf = io.stdout, string_buffer.new()
    if args.json then
        -- Quoted when first printed: labels may be made on first read too (apps.build_matcher).
        local quoted = setmetatable({}, { __index = function(t, id)
            local label = labels[id]
            if label == nil then
                return nil
            end
            t[id] = log.json_quote(label)
            return t[id]
        end })
        return function(lines, ids, n)
            for i = 1, n do
                if args.pattern then
                    buf:put('{"line":', lines[i], "}\n")
                else
                    buf:put('{"line":', lines[i], ',"invocation":', quoted[ids[i] + 1] or ids[i], "}\n")
                end
            end
            out:write(buf:get())
        end
    end
    if args.pattern then
        local last = 0 -- one rule: a line never repeats, but say so rather than rely on it
        return function(lines, _, n)
            for i = 1, n do
                local line = lines[i]
                if line ~= last then
                    buf:put(line, "\n")
                    last = line
                end
            end
            out:write(buf:get())
        end
    end
    return function(lines, ids, n)
        for i = 1, n do
            local id = ids[i]
            buf:put(lines[i], " ", labels[id + 1] or id, "\n")
        end
        out:write(buf:get())
    end
end


--- The --events input, { file, err, ahead }. Early (before the rules load) only a regular
-- file is opened, and a mapping of it started (relay.core.map_ahead): its pages are faulted
-- in on the idle core while the rules load. Anything else (stdin, a FIFO, whose open may
-- block) is opened after them: early, nil. An input that cannot be opened is reported
-- after the load either way.
local function open_events(args, early)
    if args.events == "-" then
        return { file = io.stdin }
    end
    if early and not fs.is_file(args.events) then
        return nil
    end
    local file, err = io.open(args.events, "rb")
    return { file = file, err = err, ahead = file and early and require("relay.core.map_ahead").start(file) or nil }
end


local function match_file(args, cfg, m, labels, now_ms, events)
    local input = events.file
    if not input then
        exit.env("cannot open " .. events.err)
    end
    local matched, total = m:scan(input, {
        ahead = events.ahead,
        max_bytes = cfg.max_event_bytes,
        now_ms = now_ms,
        on_match = match_printer(args, labels),
        on_malformed = function(line, reason)
            io.stdout:flush() -- keep stdout and stderr in line order when both go to one file
            io.stderr:write("relay: ", args.events, ":", line, ": ", reason, "\n")
        end,
        -- A pipe has nothing more for now: what was matched so far is printed before the
        -- wait, so that relay match works as a live filter (tail -f … | relay match).
        on_wait = function()
            local flushed, err = io.stdout:flush()
            if not flushed then
                -- The reader went away (… | head -1): reading on would never end.
                exit.env("cannot write the output: " .. err)
            end
        end,
    })
    if events.ahead then
        events.ahead:close()
    end
    if input ~= io.stdin then
        input:close()
    end
    if not matched then
        exit.env(args.events .. ": " .. total)
    end
    if args.count then
        io.stdout:write(string.format(args.json and '{"matched":%d,"total":%d}\n' or "matched %d of %d\n",
            matched, total))
    end
    return matched > 0 and 0 or 1
end


function _M.execute(args)
    if not args.event and not args.events then
        exit.usage("match needs --event JSON or --events FILE")
    end
    if args.count and not args.events then
        exit.usage("--count works with --events only")
    end
    if args.pattern and args.apps then
        exit.usage("--pattern and --apps cannot be combined")
    end
    local cfg, err = config.load(nil, { apps = args.apps })
    if not cfg then
        exit.env(err)
    end
    local events = args.events and open_events(args, true)
    local m, labels = build(args, cfg)
    local now_ms = require("relay.core.loop").now_ms()
    if args.event then
        return match_one(args, cfg, m, labels, now_ms)
    end
    return match_file(args, cfg, m, labels, now_ms, events or open_events(args, false))
end


return _M
