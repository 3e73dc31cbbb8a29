--- Where a container's program (runtime.command[1]) would be found, seen
-- from the host before any container exists: `relay app validate` reports a
-- program that is missing or not executable instead of a handler failing
-- with status 127 at its first event.
--
-- Paths resolve as the container's kernel would: symlinks inside a rootfs
-- image are followed within that rootfs (an absolute target starts again at
-- its root, `..` stops at it); /app is the app directory; under `image: host`
-- only /usr and /etc (and the symlinks the host has into them, such as
-- /bin -> usr/bin) are visible.
local fs = require("relay.fs")
local runtime = require("relay.runtime")

local _M = {}

-- Symlinks followed before giving up, as the kernel's own bound.
local MAX_LINKS = 40
local HOST_VISIBLE = { "/usr/", "/etc/" }


local function split(path)
    local parts = {}
    for part in path:gmatch("[^/]+") do
        parts[#parts + 1] = part
    end
    return parts
end


--- path resolved inside root ("" for the host): the container path it ends
-- at, or nil, why.
function _M.resolve(root, path)
    local pending, done, links = split(path), {}, 0
    while #pending > 0 do
        local part = table.remove(pending, 1)
        if part == ".." then
            done[#done] = nil
        elseif part ~= "." then
            local here = "/" .. table.concat(done, "/") .. (#done > 0 and "/" or "") .. part
            local kind = fs.kind(root .. here)
            if not kind then
                return nil, here .. " does not exist"
            end
            if kind == "link" then
                links = links + 1
                if links > MAX_LINKS then
                    return nil, "too many symlinks under " .. path
                end
                local target = fs.readlink(root .. here) or ""
                if target:sub(1, 1) == "/" then
                    done = {}
                end
                local rest = split(target)
                for i = #rest, 1, -1 do
                    table.insert(pending, 1, rest[i])
                end
            else
                done[#done + 1] = part
            end
        end
    end
    return "/" .. table.concat(done, "/")
end


local function host_visible(path)
    for _, prefix in ipairs(HOST_VISIBLE) do
        if path:sub(1, #prefix) == prefix then
            return true
        end
    end
    return false
end


--- The host path of the container path `path` (absolute), or nil, why.
local function locate(app, root, path)
    if path == "/app" or path:sub(1, 5) == "/app/" then
        local real, why = _M.resolve(app.dir, path:sub(5))
        return real and (app.dir .. real), why
    end
    local real, why = _M.resolve(root or "", path)
    if not real then
        return nil, why
    end
    if not root and not host_visible(real) then
        return nil, real .. " is not visible under image: host (only /usr and /etc are)"
    end
    return (root or "") .. real
end


local function check_file(host_path, shown)
    if fs.kind(host_path) ~= "file" then
        return nil, shown .. " is not a regular file"
    end
    if not fs.is_executable(host_path) then
        return nil, shown .. " is not executable (chmod +x)"
    end
    return true
end


--- true when the app's program exists and is executable in its image, or
-- nil, why. images_dir is RELAY_IMAGES (or nil).
function _M.check(app, images_dir)
    local program = (app.runtime.command or {})[1]
    if not program then
        return true  -- docker/podman images bring their own entrypoint
    end
    local root
    if (app.runtime.image or "host") ~= "host" then
        local image, err = runtime.image({ images_dir = images_dir }, app)
        if not image then
            return nil, err
        end
        root = image.path
    end
    if program:find("/", 1, true) then
        local host_path, why = locate(app, root, program)
        if not host_path then
            return nil, why
        end
        return check_file(host_path, program)
    end
    for dir in runtime.CONTAINER_PATH:gmatch("[^:]+") do
        local host_path = locate(app, root, dir .. "/" .. program)
        if host_path and check_file(host_path, program) then
            return true
        end
    end
    return nil, program .. " is not found in the container's PATH (" .. runtime.CONTAINER_PATH .. ")"
end


return _M
