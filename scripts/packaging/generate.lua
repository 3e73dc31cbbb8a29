--- Writes Relay's manual pages and completion scripts at build time
-- (CMakeLists.txt runs it with the freshly built binary, `relay x-lua`, so
-- it sees this tree's commands):
--   relay x-lua generate.lua relay VERSION TEMPLATE OUT
--       relay(1): TEMPLATE (hand-written roff) with its `.\" @COMMANDS@`
--       line replaced by a reference generated from the command parser,
--       so every command, argument and flag the binary accepts is listed.
--   relay x-lua generate.lua markdown VERSION OUT NAME SECTION SUMMARY FILE.md...
--       a page made from docs/*.md (relay-templates(5) from templates.md and
--       patterns.md): the documents stay the one source of their facts.
--   relay x-lua generate.lua completions DIR
--       DIR/relay.bash, DIR/_relay (zsh), DIR/relay.fish: what
--       `relay completion SHELL` prints.
-- The markdown is the subset docs/ uses: headings, paragraphs, "- " lists,
-- pipe tables, fenced code, `code`, **bold** and [links](...).
local _M = {}


-- Roff escapes --------------------------------------------------------------

--- Every non-ASCII character as a groff \[uXXXX] escape: the page then
-- renders the same whatever input encoding the formatter assumes.
local function unicode_escapes(s)
    return (s:gsub("[\xC2-\xF4][\x80-\xBF]*", function(ch)
        local b1 = ch:byte(1)
        local cp, n
        if b1 >= 0xF0 then
            cp, n = b1 % 0x08, 4
        elseif b1 >= 0xE0 then
            cp, n = b1 % 0x10, 3
        else
            cp, n = b1 % 0x20, 2
        end
        if #ch ~= n then
            return "?"
        end
        for i = 2, n do
            cp = cp * 64 + ch:byte(i) % 64
        end
        return string.format("\\[u%04X]", cp)
    end))
end


--- Plain text for roff: backslashes, then non-ASCII.
local function text(s)
    return unicode_escapes((s:gsub("\\", "\\e")))
end


--- Literal text (code, flags, commands): hyphens as \- so that a copied
-- `--redis-url` is still ASCII minus signs.
local function literal(s)
    return (text(s):gsub("%-", "\\-"))
end


--- A line ready for output: one starting with . or ' would be a request.
local function line_safe(s)
    if s:match("^[.']") then
        return "\\&" .. s
    end
    return s
end


--- Inline markdown: `code` bold and literal, **bold**, [text](url) as text.
local function inline(s)
    local out, pos = {}, 1
    while true do
        local a, b, code = s:find("`([^`]*)`", pos)
        local plain = s:sub(pos, (a or #s + 1) - 1)
        plain = plain:gsub("%[([^%]]+)%]%([^)]*%)", "%1")
        plain = text(plain):gsub("%*%*(.-)%*%*", "\\fB%1\\fR")
        out[#out + 1] = plain
        if not a then
            break
        end
        out[#out + 1] = "\\fB" .. literal(code) .. "\\fR"
        pos = b + 1
    end
    return table.concat(out)
end


local function quote_arg(s)
    return '"' .. s:gsub('"', '\\(dq') .. '"'
end


-- Markdown ------------------------------------------------------------------

local function split_row(line)
    local cells, cur, in_code = {}, {}, false
    local body = line:gsub("^%s*|", ""):gsub("|%s*$", "")
    local i = 1
    while i <= #body do
        local c = body:sub(i, i)
        if c == "\\" and body:sub(i + 1, i + 1) == "|" then
            cur[#cur + 1] = "|"
            i = i + 1
        elseif c == "`" then
            in_code = not in_code
            cur[#cur + 1] = c
        elseif c == "|" and not in_code then
            cells[#cells + 1] = table.concat(cur):match("^%s*(.-)%s*$")
            cur = {}
        else
            cur[#cur + 1] = c
        end
        i = i + 1
    end
    cells[#cells + 1] = table.concat(cur):match("^%s*(.-)%s*$")
    return cells
end


--- A table as a tagged list: the first column is the tag, the middle
-- columns "header: value" on one line, the last column as the text (a
-- five-column table does not fit a terminal as a grid).
local function emit_table(out, rows)
    local header = rows[1]
    for r = 2, #rows do
        local row = rows[r]
        out[#out + 1] = ".TP"
        out[#out + 1] = line_safe(inline(row[1] or ""))
        local facts = {}
        for c = 2, #header - 1 do
            if row[c] and row[c] ~= "" then
                facts[#facts + 1] = "\\fI" .. text(header[c]) .. "\\fR: " .. inline(row[c])
            end
        end
        if #header == 2 then
            out[#out + 1] = line_safe(inline(row[2] or ""))
        else
            if #facts > 0 then
                out[#out + 1] = line_safe(table.concat(facts, "; ") .. ".")
                out[#out + 1] = ".br"
            end
            out[#out + 1] = line_safe(inline(row[#header] or ""))
        end
    end
end


local function heading_text(s)
    -- Upper case for the words, not for `code` (key names keep their case).
    local parts, pos = {}, 1
    while true do
        local a, b, code = s:find("`([^`]*)`", pos)
        parts[#parts + 1] = text(s:sub(pos, (a or #s + 1) - 1):upper())
        if not a then
            break
        end
        parts[#parts + 1] = literal(code)
        pos = b + 1
    end
    return table.concat(parts)
end


--- Converts one markdown document; level_offset 0: "##" is a section
-- (.SH), and the "#" title is dropped (the NAME line replaces it); 1: "#"
-- is a section and "##" a subsection (.SS).
function _M.markdown(src, out, level_offset)
    local lines = {}
    for l in (src .. "\n"):gmatch("([^\n]*)\n") do
        lines[#lines + 1] = l
    end
    local i, para = 1, {}
    local function flush()
        if #para > 0 then
            out[#out + 1] = ".PP"
            out[#out + 1] = line_safe(inline(table.concat(para, " ")))
            para = {}
        end
    end
    local started = false  -- before the first heading of a level_offset 0 document: DESCRIPTION
    while i <= #lines do
        local l = lines[i]
        local hashes, title = l:match("^(#+)%s+(.*)$")
        if hashes then
            flush()
            local level = #hashes + level_offset
            if level == 1 then
                if level_offset > 0 then
                    out[#out + 1] = ".SH " .. quote_arg(heading_text(title))
                    started = true
                end
            elseif level == 2 then
                out[#out + 1] = ".SH " .. quote_arg(heading_text(title))
            else
                out[#out + 1] = ".SS " .. quote_arg(inline(title))
            end
            started = started or level > 1
            i = i + 1
        elseif l:match("^```") then
            flush()
            out[#out + 1] = ".PP"
            out[#out + 1] = ".RS 4"
            out[#out + 1] = ".nf"
            i = i + 1
            while i <= #lines and not lines[i]:match("^```") do
                out[#out + 1] = line_safe(literal(lines[i]))
                i = i + 1
            end
            out[#out + 1] = ".fi"
            out[#out + 1] = ".RE"
            i = i + 1
        elseif l:match("^%s*|") and (lines[i + 1] or ""):match("^%s*|[%s:|-]+$") then
            flush()
            local rows = { split_row(l) }
            i = i + 2
            while i <= #lines and lines[i]:match("^%s*|") do
                rows[#rows + 1] = split_row(lines[i])
                i = i + 1
            end
            emit_table(out, rows)
        elseif l:match("^%s*[-*] ") or l:match("^%s*%d+%. ") then
            flush()
            if not started and level_offset == 0 then
                out[#out + 1] = ".SH DESCRIPTION"
                started = true
            end
            local mark, first = l:match("^%s*(%d+%.) (.*)$")
            if not mark then
                first = l:match("^%s*[-*] (.*)$")
            end
            local item = { first }
            i = i + 1
            -- continuation lines are indented and are not a new item
            while i <= #lines and lines[i]:match("^%s%s+%S") and not lines[i]:match("^%s*[-*] ")
                and not lines[i]:match("^%s*%d+%. ") do
                item[#item + 1] = lines[i]:match("^%s*(.-)$")
                i = i + 1
            end
            out[#out + 1] = mark and (".IP " .. mark .. " 4") or ".IP \\(bu 2"
            out[#out + 1] = line_safe(inline(table.concat(item, " ")))
        elseif l:match("^%s*$") then
            flush()
            i = i + 1
        else
            if not started and level_offset == 0 then
                out[#out + 1] = ".SH DESCRIPTION"
                started = true
            end
            para[#para + 1] = l:match("^%s*(.-)%s*$")
            i = i + 1
        end
    end
    flush()
    return out
end


-- relay(1): the command reference from the parser ---------------------------

local function usage_of(cmd)
    local usage = cmd:get_usage():gsub("^Usage:%s*", ""):gsub("%s+", " ")
    return usage
end


local function command_path(cmd)
    return cmd:_get_fullname()
end


--- One leaf command: usage, description, arguments, its own flags, and the
-- configuration flags (descriptions "overrides VAR") in one sentence.
local function emit_command(out, cmd)
    out[#out + 1] = ".SS " .. quote_arg(literal(command_path(cmd)))
    out[#out + 1] = ".B " .. literal(usage_of(cmd))
    out[#out + 1] = ".PP"
    out[#out + 1] = line_safe(inline(cmd._description or cmd._summary or ""))
    for _, a in ipairs(cmd._arguments) do
        if not a._hidden then
            out[#out + 1] = ".TP"
            out[#out + 1] = "\\fI" .. literal(table.concat(a:_get_label_lines(), " ")) .. "\\fR"
            out[#out + 1] = line_safe(inline(a:_get_description()))
        end
    end
    local settings = {}
    for _, o in ipairs(cmd._options) do
        local desc = o:_get_description()
        local var = desc:match("^overrides ([%w_]+)")
        if o._hidden or o._name == "-h" or o._name == "--help" then  -- luacheck: ignore 542
            -- every command takes -h/--help; the page says so once
        elseif var then
            settings[#settings + 1] = "\\fB" .. literal(o._name) .. "\\fR (" .. text(var) .. ")"
        else
            out[#out + 1] = ".TP"
            out[#out + 1] = "\\fB" .. literal(table.concat(o:_get_label_lines(), " ")) .. "\\fR"
            out[#out + 1] = line_safe(inline(desc))
        end
    end
    if #settings > 0 then
        out[#out + 1] = ".PP"
        out[#out + 1] = "Settings (each overrides the variable named; see \\fBENVIRONMENT\\fR): "
            .. table.concat(settings, ", ") .. "."
    end
end


local function walk(out, parser)
    for _, cmd in ipairs(parser._commands) do
        if #cmd._commands > 0 then
            walk(out, cmd)
        else
            emit_command(out, cmd)
        end
    end
end


function _M.command_reference()
    local parser = require("relay.cmd.completion").full_parser()
    local out = {}
    walk(out, parser)
    return out
end


local function read(path)
    local f = assert(io.open(path, "rb"))
    local data = f:read("*a")
    f:close()
    return data
end


local function write(path, lines)
    local f = assert(io.open(path .. ".tmp", "wb"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
    assert(os.rename(path .. ".tmp", path))
end


local function main(mode, ...)
    if mode == "relay" then
        local version, template, out_path = ...
        local out = {}
        for l in (read(template) .. "\n"):gmatch("([^\n]*)\n") do
            if l == ".\\\" @COMMANDS@" then
                for _, g in ipairs(_M.command_reference()) do
                    out[#out + 1] = g
                end
            else
                out[#out + 1] = (l:gsub("@VERSION@", version))
            end
        end
        while out[#out] == "" do
            out[#out] = nil
        end
        write(out_path, out)
        return 0
    elseif mode == "markdown" then
        local version, out_path, name, section, summary = ...
        local files = { select(6, ...) }
        local out = {
            ".\\\" Generated from " .. table.concat(files, " and "):gsub("[^ ]*/docs/", "docs/")
                .. " by scripts/packaging/generate.lua; edit those.",
            ".TH " .. quote_arg(name:upper()) .. " " .. section .. ' "" ' .. quote_arg("relay " .. version)
                .. ' "Relay Manual"',
            ".nh",
            ".ad l",
            ".SH NAME",
            literal(name) .. " \\- " .. text(summary),
        }
        for n, path in ipairs(files) do
            _M.markdown(read(path), out, n == 1 and 0 or 1)
        end
        out[#out + 1] = '.SH "SEE ALSO"'
        out[#out + 1] = ".BR relay (1)"
        write(out_path, out)
        return 0
    end
    if mode == "completions" then
        local dir = ...
        local completion = require("relay.cmd.completion")
        for shell, name in pairs({ bash = "relay.bash", zsh = "_relay", fish = "relay.fish" }) do
            write(dir .. "/" .. name, { (completion.script(shell):gsub("\n$", "")) })
        end
        return 0
    end
    io.stderr:write("usage: generate.lua relay VERSION TEMPLATE OUT | completions DIR",
        " | markdown VERSION OUT NAME SECTION SUMMARY MD...\n")
    return 2
end


if arg and arg[0] and arg[0]:match("generate%.lua$") then
    return main(...)
end
return _M
