--- The podman driver: docker.lua's command with podman's needs on this kind
-- of host: `--runtime runc` (its default crun
-- refuses cgroup v1 hybrid hosts) and a containers.conf with
-- `default_ulimits = []` (raising rlimits needs CAP_SYS_RESOURCE).
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


return make("podman", {
    global_args = { "--runtime", "runc" },
    engine_env = engine_env,
})
