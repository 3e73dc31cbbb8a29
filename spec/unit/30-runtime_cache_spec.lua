-- What a runtime context remembers between invocations (image resolutions,
-- id blocks, searchable directories, passed checks, the seccomp profile's
-- JSON) and when it forgets it: at every reload, and with every new app
-- table a reload makes. Also the private context's cleanup.
local fs = require("relay.fs")
local ids = require("relay.runtime.ids")
local json = require("relay.runtime.json")
local runtime = require("relay.runtime")

local ROOT = os.tmpname()
os.remove(ROOT)
local APPS = ROOT .. "/apps"
local STATE = ROOT .. "/state"

local function app(name, image)
    return {
        name = name,
        dir = APPS .. "/" .. name,
        state = "ok",
        runtime = { image = image or "host", command = { "/bin/true" } },
        events = { { handler = "h", timeout_ms = 1000 } },
        schedules = {},
    }
end

local function ctx(private)
    return runtime.new({ runtime = "runc", state_dir = STATE, consumer = "cache", private = private })
end

-- an app name that sorts before "users" and hashes to its id block: the
-- block of "users" moves when it appears
local function name_taking_slot_of(name, blocks)
    local want = ids.hash(name) % blocks
    for i = 1, 1000000 do
        local candidate = "a" .. i
        if ids.hash(candidate) % blocks == want then
            return candidate
        end
    end
    error("no colliding name found")
end

describe("runtime context cache", function()
    before_each(function()
        assert(fs.mkdir_p(APPS .. "/users/img"))
    end)

    after_each(function()
        fs.rm_rf(ROOT)
    end)

    it("remembers a found image until forget, and not for a new app table", function()
        local rt = ctx()
        local a = app("users", "img")
        local img = assert(rt:image(a))
        assert.are.equal("img", img.rel)
        assert(fs.rmdir(APPS .. "/users/img"))
        assert.are.equal(img, rt:image(a))
        -- a reload's app table is looked up afresh
        local _, err = rt:image(app("users", "img"))
        assert.truthy(err:find("image directory not found", 1, true))
        rt:forget()
        _, err = rt:image(a)
        assert.truthy(err:find("image directory not found", 1, true))
        -- a missing image is not remembered: it is found once it exists
        assert(fs.mkdir_p(APPS .. "/users/img"))
        assert.are.equal("img", assert(rt:image(a)).rel)
    end)

    it("remembers a searchable directory until forget, never an unsearchable one", function()
        local rt = ctx()
        local dir = ROOT .. "/walk/inner"
        assert(fs.mkdir_p(dir, 493))
        assert.is_nil(rt:cached_unsearchable_dir(dir))
        assert(fs.chmod(ROOT .. "/walk", 488)) -- 0750
        assert.is_nil(rt:cached_unsearchable_dir(dir))
        rt:forget()
        assert.are.equal(ROOT .. "/walk", rt:cached_unsearchable_dir(dir))
        assert(fs.chmod(ROOT .. "/walk", 493))
        assert.is_nil(rt:cached_unsearchable_dir(dir))
    end)

    it("reads the id range and the apps directory once until forget", function()
        local saved_uid, saved_gid = ids.SUBUID_FILE, ids.SUBGID_FILE
        ids.SUBUID_FILE, ids.SUBGID_FILE = ROOT .. "/subuid", ROOT .. "/subgid"
        local ok, err = pcall(function()
            local rt = ctx()
            local a = app("users")
            local first = rt:id_block(a)
            assert.are.same(ids.for_app(a), first)
            assert(fs.write_file(ids.SUBUID_FILE, "relay:1000000:6553600\n"))
            assert(fs.write_file(ids.SUBGID_FILE, "relay:2000000:6553600\n"))
            local other = app("users")
            assert.are.equal(first, rt:id_block(a))
            -- the range is the context's until forget, even for a new app table
            assert.are.equal(first.uid, rt:id_block(other).uid)
            rt:forget()
            local moved = rt:id_block(a)
            assert.are.same(ids.for_app(a), moved)
            assert.is_true(moved.uid >= 1000000 and moved.uid < 1000000 + 6553600)
            assert.is_true(moved.gid >= 2000000 and moved.gid < 2000000 + 6553600)
            -- an app added beside it that takes its slot moves it, after forget
            local rival = name_taking_slot_of("users", ids.range().blocks)
            assert(fs.mkdir_p(APPS .. "/" .. rival))
            assert.are.equal(moved, rt:id_block(a))
            rt:forget()
            local after = rt:id_block(a)
            assert.are.same(ids.for_app(a), after)
            assert.are_not.equal(moved.uid, after.uid)
        end)
        ids.SUBUID_FILE, ids.SUBGID_FILE = saved_uid, saved_gid
        assert(ok, err)
    end)

    it("remembers a passed runc check until forget, never a failed one", function()
        local rt = ctx()
        local d = require("relay.runtime.runc").new(rt)
        local answers, asked = { true, true }, 0
        d.check_host_and_app = function()
            asked = asked + 1
            return answers[asked], "no"
        end
        local a = app("users")
        answers = { nil, true, true }
        assert.is_nil(d:check(a))
        assert.is_true(d:check(a))
        assert.is_true(d:check(a))
        assert.are.equal(2, asked)
        rt:forget()
        assert.is_true(d:check(a))
        assert.are.equal(3, asked)
    end)

    it("is forgotten by every registry reload", function()
        local forgot, checked = 0, 0
        local rt = {
            forget = function() forgot = forgot + 1 end,
            check = function()
                checked = checked + 1
                return true
            end,
        }
        assert(fs.write_file(APPS .. "/users/template.yaml",
            "runtime:\n  command: [/bin/true]\nevents:\n  - handler: h\n    pattern: {t: [x]}\n"))
        local reg = require("relay.registry").new({ apps_dir = APPS, runtime = rt, max_concurrency = 1 })
        assert(reg:reload())
        assert(reg:reload())
        assert.are.equal(2, forgot)
        assert.are.equal(2, checked)
    end)

    it("encodes the seccomp profile once per process, the same as a fresh one", function()
        local a = app("users")
        local profile = runtime.seccomp_profile(a)
        assert.are.equal(profile, runtime.seccomp_profile(a))
        local fresh = require("relay.core.seccomp").profile(runtime.SECCOMP_PROFILE)
        assert.are.equal(json.encode(fresh), json.encode(profile))
        assert.are.equal(json.encode({ s = fresh }), json.encode({ s = profile }))
        assert.are.equal(json.encode({ s = fresh }), json.encode({ s = profile }))
    end)

    it("leaves nothing of a private context behind, expected or not", function()
        local rt = ctx(true)
        local d = require("relay.runtime.runc").new(rt)
        local spec = assert(d:prepare(app("users"), { handler = "h", trigger = "invoke", message_id = "m",
            attempt = 1, deadline_ms = 0 }))
        -- a private context's bundles sit in its own base dir
        assert.are.equal(rt.base_dir, spec.dir:match("^(.*)/[^/]+$"))
        assert(fs.write_file(spec.dir .. "/runc.log", ""))
        d:finish(spec, { status = 0 })
        assert.is_false(fs.exists(spec.dir))
        -- what runc makes (its root) and something nobody expected
        assert(fs.mkdir_p(d.root .. "/leftover"))
        assert(fs.write_file(rt.base_dir .. "/stray", "x"))
        rt:close()
        assert.is_false(fs.exists(rt.base_dir))
        assert.is_true(fs.is_dir(rt.shared_dir .. "/rootfs-host"))
    end)
end)
