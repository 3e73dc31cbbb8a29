-- Entry point of scripts/busted inside the host: spec code runs in the main
-- task, so specs can call the yielding APIs directly.
package.path = "spec/?.lua;spec/?/init.lua;" .. package.path
-- busted reports failures on Lua 5.1 by raising from its exit(); turn that
-- into the exit status it meant.
local ok = pcall(require("busted.runner"), { standalone = false })
os.exit(ok and 0 or 1)
