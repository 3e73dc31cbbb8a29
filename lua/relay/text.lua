--- Small text helpers shared by the validators and the CLI.
local _M = {}


local function hex_byte(c)
    return string.format("\\x%02x", c:byte())
end


--- s for display on one line of a terminal: control bytes other than TAB,
-- and DEL, become \xNN (lowercase hex), so no value can end its line,
-- forge another one or drive the terminal. It is the mapping the text log
-- uses (src/log.c). Backslash stays as it is: this is for reading, and
-- JSON output keeps the exact bytes.
function _M.escape(s)
    return (s:gsub("[%z\1-\8\10-\31\127]", hex_byte))
end


--- Levenshtein distance between two short strings (typo suggestions).
function _M.edit_distance(a, b)
    local prev = {}
    for j = 0, #b do
        prev[j] = j
    end
    for i = 1, #a do
        local cur = { [0] = i }
        for j = 1, #b do
            local cost = a:byte(i) == b:byte(j) and 0 or 1
            cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        end
        prev = cur
    end
    return prev[#b]
end


return _M
