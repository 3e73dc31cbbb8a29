--- Small text helpers shared by the validators.
local _M = {}


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
