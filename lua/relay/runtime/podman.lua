--- The podman driver: docker.lua's command with podman's needs on this kind
-- of host: `--runtime runc` (its default crun
-- refuses cgroup v1 hybrid hosts), a containers.conf with
-- `default_ulimits = []` (raising rlimits needs CAP_SYS_RESOURCE), and
-- `--timeout`, which bounds a container's life when the daemon is gone.
local fs = require("relay.fs")
local make = require("relay.runtime.docker").make

local CONF = "[containers]\ndefault_ulimits = []\n"


local function engine_env(driver, env)
    local path = driver.rt.base_dir .. "/containers.conf"
    if not driver.conf_written then
        fs.mkdir_p(driver.rt.base_dir, 457)
        fs.unlink(path)
        driver.conf_written = require("relay.core.safefs").write_new(path, CONF, 420) and true or false
    end
    env.CONTAINERS_CONF = path
end


--- conmon kills the container at relay-init's deadline even when the daemon
-- is gone (`--timeout`, whole seconds, counted from the container's start).
local function run_args(inv, add)
    if inv.kill_at_ms then
        local left = inv.kill_at_ms - require("relay.core.loop").monotonic() * 1000
        add("--timeout", tostring(math.max(1, math.ceil(left / 1000))))
    end
end


return make("podman", {
    global_args = { "--runtime", "runc" },
    engine_env = engine_env,
    run_args = run_args,
})
