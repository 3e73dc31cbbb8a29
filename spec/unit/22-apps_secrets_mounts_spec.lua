-- runtime.secrets and runtime.mounts: what the validator checks in the
-- template's own text (file:line:col), what RELAY_SECRETS_DIR and
-- RELAY_ALLOWED_MOUNTS accept, and what the host check (relay.runtime.access)
-- says of a missing secret or a source that is not allowed.
local access = require("relay.runtime.access")
local apps = require("relay.apps")
local config = require("relay.config")
local fs = require("relay.fs")
local tmp = require("helpers.tmp")

local PATH = "apps/a/template.yaml"


local function validate(runtime_text)
    return apps.validate("runtime:\n" .. runtime_text, PATH, "a", "/tmp")
end


local function ok(runtime_text)
    local app = validate(runtime_text)
    assert.are.equal("ok", app.state, app.error)
    return app.runtime
end


local function invalid(runtime_text, expected)
    local app = validate(runtime_text)
    assert.are.equal("invalid", app.state)
    assert.are.equal(expected, app.error)
end


describe("runtime.secrets validation", function()
    it("reads names, env:NAME and the map form with as", function()
        local rt = ok("  secrets: [db_password, env:API_TOKEN, {name: env:SMTP, as: env}, {name: tls.pem, as: file}]\n")
        assert.are.same({
            { name = "db_password", from = "file", as = "file", at = PATH .. ":2:13" },
            { name = "API_TOKEN", from = "env", as = "file", at = PATH .. ":2:26" },
            { name = "SMTP", from = "env", as = "env", at = PATH .. ":2:41" },
            { name = "tls.pem", from = "file", as = "file", at = PATH .. ":2:68" },
        }, rt.secrets)
    end)

    it("refuses a name that is neither env:NAME nor a file name", function()
        invalid("  secrets: [../etc/shadow]\n", PATH .. ':2:13: runtime.secrets[1]: "../etc/shadow" is neither ' ..
            "env:NAME (a variable of Relay's environment) nor a file name in RELAY_SECRETS_DIR " ..
            "([A-Za-z0-9_][A-Za-z0-9_.-]*)")
        invalid("  secrets: [.hidden]\n", PATH .. ':2:13: runtime.secrets[1]: ".hidden" is neither ' ..
            "env:NAME (a variable of Relay's environment) nor a file name in RELAY_SECRETS_DIR " ..
            "([A-Za-z0-9_][A-Za-z0-9_.-]*)")
        invalid("  secrets: [env:1X]\n", PATH .. ':2:13: runtime.secrets[1]: "env:1X" is not a variable name: ' ..
            "write env:NAME with NAME matching [A-Za-z_][A-Za-z0-9_]*")
    end)

    it("accepts as: file or env only, and env only for a variable name", function()
        invalid("  secrets: [{name: k, as: environment}]\n", PATH .. ":2:27: runtime.secrets[1].as must be file " ..
            '(the default: /run/secrets/<name>) or env, not "environment"')
        invalid("  secrets: [{name: tls.pem, as: env}]\n", PATH .. ':2:20: runtime.secrets[1]: "tls.pem" cannot ' ..
            "be a variable name ([A-Za-z_][A-Za-z0-9_]*); use as: file")
        invalid("  secrets: [{name: env:RELAY_APP, as: env}]\n", PATH .. ":2:20: runtime.secrets[1]: RELAY_APP " ..
            "is reserved (Relay sets RELAY_* variables itself)")
        invalid("  secrets: [{nam: k}]\n", PATH .. ':2:14: unknown key "nam" in runtime.secrets[1]; did you mean ' ..
            "name? (allowed: name, as)")
    end)

    it("refuses a secret delivered twice and one runtime.env also sets", function()
        invalid("  secrets: [env:K, {name: K}]\n", PATH .. ":2:27: runtime.secrets[2]: /run/secrets/K is " ..
            "delivered twice (first at " .. PATH .. ":2:13)")
        invalid("  env: {K: v}\n  secrets: [{name: env:K, as: env}]\n", PATH .. ":3:13: runtime.secrets: K is " ..
            "also set by runtime.env; remove one of them")
    end)
end)


describe("runtime.mounts validation", function()
    it("reads source, target and writable (false by default)", function()
        local rt = ok("  mounts:\n    - {source: /srv/out, target: /results, writable: true}\n" ..
            "    - {source: /srv/ref, target: /data/ref}\n")
        assert.are.same({
            { source = "/srv/out", target = "/results", writable = true, at = PATH .. ":3:16" },
            { source = "/srv/ref", target = "/data/ref", writable = false, at = PATH .. ":4:16" },
        }, rt.mounts)
    end)

    it("refuses a relative source or one with ..", function()
        invalid("  mounts: [{source: /srv/../etc, target: /r}]\n", PATH .. ":2:21: runtime.mounts[1].source must be " ..
            'an absolute host path under RELAY_ALLOWED_MOUNTS (no ., .. or //), not "/srv/../etc"')
        invalid("  mounts: [{source: srv, target: /r}]\n", PATH .. ":2:21: runtime.mounts[1].source must be " ..
            'an absolute host path under RELAY_ALLOWED_MOUNTS (no ., .. or //), not "srv"')
    end)

    it("refuses a target that is relative or shadows what Relay mounts", function()
        invalid("  mounts: [{source: /srv, target: results}]\n", PATH .. ":2:35: runtime.mounts[1].target must be " ..
            'an absolute path like /results (no ., .. or //), not "results"')
        for _, target in ipairs({ "/app", "/app/out", "/proc", "/dev/x", "/sys", "/run", "/run/secrets",
            "/.relay-init", "/", "/usr/local/x" }) do
            local app = validate("  mounts: [{source: /srv, target: " .. target .. "}]\n")
            assert.are.equal("invalid", app.state, target)
            assert.truthy(app.error:find(target == "/" and "must be an absolute path" or "would shadow", 1, true),
                app.error)
        end
    end)

    it("refuses overlapping targets, a non-boolean writable and a missing key", function()
        invalid("  mounts:\n    - {source: /a, target: /r}\n    - {source: /b, target: /r/s}\n", PATH ..
            ":4:28: runtime.mounts[2].target /r/s overlaps the mount at /r (" .. PATH .. ":3:16)")
        invalid("  mounts: [{source: /a, target: /r, writable: yes}]\n", PATH .. ":2:47: runtime.mounts[1].writable " ..
            'must be true or false, not the string "yes"')
        invalid("  mounts: [{source: /a}]\n", PATH .. ":2:12: runtime.mounts[1]: missing target")
    end)
end)


describe("RELAY_SECRETS_DIR and RELAY_ALLOWED_MOUNTS", function()
    it("parse as an absolute path and a colon-separated list", function()
        local cfg = assert(config.load({ RELAY_SECRETS_DIR = "/etc/relay/secrets",
            RELAY_ALLOWED_MOUNTS = "/srv/a:/srv/b" }))
        assert.are.equal("/etc/relay/secrets", cfg.secrets_dir)
        assert.are.same({ "/srv/a", "/srv/b" }, cfg.allowed_mounts)
        assert.is_nil(assert(config.load({})).allowed_mounts)
    end)

    it("refuse relative paths and /", function()
        assert.are.equal("invalid RELAY_SECRETS_DIR=s: must be an absolute path",
            select(2, config.load({ RELAY_SECRETS_DIR = "s" })))
        assert.are.equal("invalid RELAY_ALLOWED_MOUNTS=/srv:x: each directory must be an absolute path " ..
            "(colon-separated list)", select(2, config.load({ RELAY_ALLOWED_MOUNTS = "/srv:x" })))
        assert.are.equal("invalid RELAY_ALLOWED_MOUNTS=/: / cannot be allowed: name the directories templates " ..
            "may mount", select(2, config.load({ RELAY_ALLOWED_MOUNTS = "/" })))
    end)
end)


describe("the host check of secrets and mounts", function()
    local root

    before_each(function()
        root = tmp.mkdtemp("relay-access-")
        assert(fs.mkdir_p(root .. "/secrets", 448))
        assert(fs.write_file(root .. "/secrets/key", "value"))
        assert(fs.mkdir_p(root .. "/allowed/out"))
    end)

    after_each(function()
        fs.rm_rf(root)
    end)

    local function rt_with(secrets_dir, allowed)
        return { secrets_dir = secrets_dir, allowed_mounts = allowed }
    end

    it("reads a file secret and passes an allowed source", function()
        local app = validate("  secrets: [key]\n  mounts: [{source: " .. root .. "/allowed/out, target: /o}]\n")
        local rt = rt_with(root .. "/secrets", { root .. "/allowed" })
        assert.is_true(access.check(rt, app))
        assert.are.same({ { name = "key", as = "file", value = "value" } }, access.read_secrets(rt, app))
        assert.are.same({ { source = root .. "/allowed/out", target = "/o", writable = false } },
            access.resolve_mounts(rt, app))
    end)

    it("says why, with the entry's place and without the value", function()
        local app = validate("  secrets: [key]\n")
        assert.are.same({ nil, PATH .. ":2:13: secret key is missing: RELAY_SECRETS_DIR is not set" },
            { access.check(rt_with(nil), app) })
        assert(fs.chmod(root .. "/secrets", 511))
        local _, why = access.check(rt_with(root .. "/secrets"), app)
        assert.truthy(why:find("is writable by its group or others", 1, true), why)
        assert(fs.chmod(root .. "/secrets", 448))
        assert(fs.symlink(root .. "/secrets/key", root .. "/secrets/link"))
        _, why = access.check(rt_with(root .. "/secrets"), validate("  secrets: [link]\n"))
        assert.truthy(why:find("is not a regular file (a symlink is refused)", 1, true), why)
        _, why = access.check(rt_with(nil), validate("  mounts: [{source: /srv, target: /o}]\n"))
        assert.are.equal(PATH .. ":2:21: runtime.mounts needs RELAY_ALLOWED_MOUNTS, the host directories " ..
            "templates may mount; it is not set", why)
    end)

    it("refuses a source reached through a symlink, even one inside the allowed directory", function()
        assert(fs.symlink(root .. "/allowed/out", root .. "/allowed/link"))
        local _, why = access.check(rt_with(nil, { root .. "/allowed" }),
            validate("  mounts: [{source: " .. root .. "/allowed/link, target: /o}]\n"))
        assert.truthy(why:find("goes through a symlink (it resolves to " .. root .. "/allowed/out)", 1, true), why)
    end)
end)
