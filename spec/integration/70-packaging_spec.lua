-- What an operator installs: `cmake --install` into a scratch prefix and the
-- .deb that `cpack -G DEB` builds from the same build directory (the one of
-- the binary under test). The .deb is inspected, not installed (installing
-- it would need its dependencies in a scratch root); the scratch install is
-- where the units are verified by systemd-analyze, the pages rendered by
-- man and the completion scripts loaded by bash.
local cli = require("helpers.cli")
local completion = require("relay.cmd.completion")
local fs = require("relay.fs")
local tmp = require("helpers.tmp")

local HERE = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$")
local ROOT = HERE .. "/../.."


--- Runs a shell command line; returns its exit code, stdout and stderr.
local function sh(cmd)
    local dir = tmp.mkdtemp("relay-pkg-sh-")
    local rc = os.execute(string.format("(%s) >%s/out 2>%s/err", cmd, dir, dir))
    local code = (rc == true or rc == 0) and 0 or (type(rc) == "number" and rc / 256 or 1)
    local out, err = fs.read_file(dir .. "/out") or "", fs.read_file(dir .. "/err") or ""
    fs.rm_rf(dir)
    return code, out, err
end


local function must(cmd)
    local code, out, err = sh(cmd)
    assert(code == 0, cmd .. " failed:\n" .. out .. err)
    return out
end


--- Every command path the parser knows ("run", "dlq ls", ...).
local function command_paths()
    local out = {}
    local function walk(p, prefix)
        for _, c in ipairs(p._commands) do
            if #c._commands > 0 then
                walk(c, prefix .. c._name .. " ")
            else
                out[#out + 1] = prefix .. c._name
            end
        end
    end
    walk(completion.full_parser(), "")
    return out
end


describe("packaging", function()
    local build_dir = cli.binary():match("^(.*)/[^/]+$")
    local q = cli.quote
    local work, prefix, deb, listing

    setup(function()
        work = tmp.mkdtemp("relay-pkg-")
        prefix = work .. "/prefix"
        must(string.format("cmake --install %s --prefix %s", q(build_dir), q(prefix)))
        -- -B: the package and CPack's staging stay out of the build dir
        must(string.format("cpack --config %s/CPackConfig.cmake -G DEB -B %s/deb", q(build_dir), q(work)))
        deb = must(string.format("ls %s/deb/*.deb", q(work))):match("^(%S+)")
        listing = must("dpkg-deb -c " .. q(deb))
    end)

    teardown(function()
        if work then
            fs.rm_rf(work)
        end
    end)

    describe("cmake --install", function()
        it("installs the units, pages, completions, examples and hooks under the prefix", function()
            for _, path in ipairs({
                "bin/relay", "share/relay/lua/relay/cli.lua",
                "lib/systemd/system/relay.service", "lib/systemd/system/relay@.service",
                "share/man/man1/relay.1.gz", "share/man/man5/relay-templates.5.gz",
                "share/bash-completion/completions/relay", "share/zsh/site-functions/_relay",
                "share/fish/vendor_completions.d/relay.fish",
                "share/relay/examples/apps/greeter/template.yaml", "share/relay/examples/hooks/statsd.lua",
                "share/doc/relay/LICENSE", "share/doc/relay/templates.md", "etc/relay/relay.env",
            }) do
                assert.is_true(fs.exists(prefix .. "/" .. path), "missing " .. path)
            end
            assert.is_true(fs.is_dir(prefix .. "/etc/relay/apps"))
            -- the units name this prefix's paths, not the configured one's
            local unit = fs.read_file(prefix .. "/lib/systemd/system/relay.service")
            assert.truthy(unit:find("ExecStart=" .. prefix .. "/bin/relay run\n", 1, true))
            assert.truthy(unit:find("EnvironmentFile=-" .. prefix .. "/etc/relay/relay.env\n", 1, true))
            assert.are.equal("600", must("stat -c %a " .. q(prefix .. "/etc/relay/relay.env")):match("%d+"))
            -- a handler script stays executable
            assert.are.equal(0, (sh("test -x " .. q(prefix .. "/share/relay/examples/apps/greeter/handler.sh"))))
        end)
    end)

    describe("the .deb", function()
        it("holds the binary, the Lua tree, units, pages, completions and settings under /usr and /etc", function()
            for _, path in ipairs({
                "./usr/bin/relay", "./usr/share/relay/lua/relay/cli.lua", "./usr/share/relay/lua/relay/worker.lua",
                "./usr/lib/systemd/system/relay.service", "./usr/lib/systemd/system/relay@.service",
                "./usr/share/man/man1/relay.1.gz", "./usr/share/man/man5/relay-templates.5.gz",
                "./usr/share/bash-completion/completions/relay", "./usr/share/zsh/vendor-completions/_relay",
                "./usr/share/fish/vendor_completions.d/relay.fish",
                "./usr/share/relay/examples/apps/users/main.py", "./usr/share/relay/examples/hooks/jsonl_metrics.lua",
                "./usr/share/doc/relay/copyright", "./etc/relay/apps/",
            }) do
                assert.truthy(listing:find(" " .. path .. "\n", 1, true), "the .deb lacks " .. path)
            end
            local env_line = listing:match("([^\n]*) %./etc/relay/relay%.env\n")
            assert.are.equal("-rw------- root/root", env_line and env_line:sub(1, 20), "relay.env is not 0600 root")
            assert.falsy(listing:find("/usr/local/", 1, true), "the .deb installs into /usr/local")
            assert.are.equal("/etc/relay/relay.env\n",
                must("dpkg-deb --ctrl-tarfile " .. q(deb) .. " | tar -xO ./conffiles"))
        end)

        it("reloads systemd on install and removal, and stops the units before removal", function()
            local control = must("dpkg-deb --ctrl-tarfile " .. q(deb) .. " | tar -tvf -")
            for _, script in ipairs({ "postinst", "prerm", "postrm" }) do
                local line = control:match("([^\n]*%./" .. script .. ")\n")
                assert.truthy(line, "no " .. script)
                assert.are.equal("-rwxr-xr-x", line:sub(1, 10), script)
                local text = must("dpkg-deb --ctrl-tarfile " .. q(deb) .. " | tar -xO ./" .. script)
                assert.are.equal(0, (sh("printf '%s' " .. q(text) .. " | sh -n")), script)
            end
            local prerm = must("dpkg-deb --ctrl-tarfile " .. q(deb) .. " | tar -xO ./prerm")
            assert.truthy(prerm:find("stop relay.service 'relay@*.service'", 1, true))
        end)

        it("has units that run the packaged binary with the packaged settings", function()
            local x = work .. "/x"
            must(string.format("dpkg-deb -x %s %s", q(deb), q(x)))
            local unit = fs.read_file(x .. "/usr/lib/systemd/system/relay@.service")
            assert.truthy(unit:find("\nExecStart=/usr/bin/relay run --stream %I --consumer %H-%I\n", 1, true))
            assert.truthy(unit:find("\nEnvironmentFile=/etc/relay/%i.env\n", 1, true))
            for _, name in ipairs({ "relay.service", "relay@.service" }) do
                unit = fs.read_file(x .. "/usr/lib/systemd/system/" .. name)
                for _, line in ipairs({ "Type=notify", "KillMode=mixed", "WatchdogSec=30s",
                    "EnvironmentFile=-/etc/relay/relay.env", "Environment=RELAY_APPS=/etc/relay/apps" }) do
                    assert.truthy(unit:find("\n" .. line .. "\n", 1, true), name .. " lacks " .. line)
                end
            end
            -- the packaged binary finds the packaged Lua tree
            assert.matches("^relay %d", must(q(x .. "/usr/bin/relay") .. " version"))
        end)

        it("installs into a scratch root, keeps edited settings on removal and purges clean", function()
            local root = work .. "/root"
            must(string.format("mkdir -p %s/var/lib/dpkg/info %s/var/lib/dpkg/updates && touch %s/var/lib/dpkg/status",
                q(root), q(root), q(root)))
            -- chrootless: the scratch root has no shell for the maintainer
            -- scripts, which then see DPKG_ROOT and leave this host alone
            local dpkg = "dpkg --root=" .. q(root) .. " --log=/dev/null --force-not-root --force-script-chrootless "
            local code, out, err = sh(dpkg .. "--force-depends -i " .. q(deb))
            assert.are.equal(0, code, out .. err)
            -- what dpkg found missing is exactly what the package declares
            assert.matches("relay depends on lua%-cjson", err)
            assert.matches("relay depends on runc | bubblewrap", err)
            assert.matches("^install ok installed\n /etc/relay/relay%.env %x+",
                must(string.format("dpkg-query --admindir=%s/var/lib/dpkg -W -f '${Status}\\n${Conffiles}' relay",
                    q(root))))
            assert.matches("^relay %d", must(q(root .. "/usr/bin/relay") .. " version"))
            local f = assert(io.open(root .. "/etc/relay/relay.env", "a"))
            f:write("REDIS_URL=redis://edited:6379/0\n")
            f:close()
            must(dpkg .. "--force-depends -r relay")
            assert.is_false(fs.exists(root .. "/usr/bin/relay"))
            assert.matches("edited", fs.read_file(root .. "/etc/relay/relay.env"))
            must(dpkg .. "-P relay")
            assert.are.equal("", must(string.format("find %s -path %s -prune -o -type f -print",
                q(root), q(root .. "/var/lib/dpkg"))))
        end)

        it("declares its runtime dependencies, every shared library's package among them", function()
            local fields = must("dpkg-deb -f " .. q(deb) .. " Package Depends Suggests")
            local depends = fields:match("Depends: ([^\n]*)")
            assert.matches("^Package: relay\n", fields)
            -- libssl3: loaded at the first TLS connection, so no NEEDED entry names it
            for _, dep in ipairs({ "lua-cjson", "lua-argparse", "lua-posix", "runc | bubblewrap", "catatonit",
                "libssl3" }) do
                assert.truthy(depends:find(dep, 1, true), "Depends lacks " .. dep .. ": " .. depends)
            end
            -- The libraries the binary links, mapped to the Debian packages
            -- that ship them on this host.
            local paths = {}
            for soname, path in must("ldd " .. q(cli.binary())):gmatch("(%S+) => (%S+)") do
                paths[soname] = path
            end
            local needed = must("readelf -d " .. q(cli.binary()))
            local count = 0
            for soname in needed:gmatch("%(NEEDED%)%s+Shared library: %[([^%]]+)%]") do
                local path = assert(paths[soname], "ldd does not resolve " .. soname)
                local code, owner = sh(string.format("dpkg -S %s || dpkg -S $(readlink -f %s) || dpkg -S /usr%s",
                    q(path), q(path), q(path)))
                assert.are.equal(0, code, "no package ships " .. path)
                local pkg = owner:match("^([^:,]+)")
                assert.truthy(depends:find("%f[%w%-]" .. pkg:gsub("%p", "%%%0") .. "%f[^%w%-.]"),
                    "Depends lacks " .. pkg .. " (for " .. soname .. "): " .. depends)
                count = count + 1
            end
            assert.is_true(count >= 5, "NEEDED entries: " .. count)
        end)
    end)

    describe("the units", function()
        it("pass systemd-analyze verify, the template as an instance too", function()
            local units = prefix .. "/lib/systemd/system"
            -- MANPATH: verify also looks up the pages named by Documentation=
            local code, out, err = sh(string.format("cd / && MANPATH=%s systemd-analyze verify %s %s %s",
                q(prefix .. "/share/man"), q(units .. "/relay.service"), q(units .. "/relay@.service"),
                q(units .. "/relay@orders.service")))
            -- verify reports unknown keys and bad values as warnings with exit 0
            assert.are.equal("", out .. err)
            assert.are.equal(0, code)
        end)

        it("are checked for real: a bad value would be reported", function()
            local bad = work .. "/bad.service"
            local f = assert(io.open(bad, "w"))
            f:write((fs.read_file(prefix .. "/lib/systemd/system/relay.service")
                :gsub("KillMode=mixed", "KillMode=mixd")))
            f:close()
            local _, out, err = sh(string.format("cd / && MANPATH=%s systemd-analyze verify %s",
                q(prefix .. "/share/man"), q(bad)))
            assert.matches("mixd", out .. err)
        end)
    end)

    describe("the manual pages", function()
        local function render(page)
            return sh(string.format("MANWIDTH=80 man --warnings -l %s",
                q(prefix .. "/share/man/" .. page)))
        end

        it("render without warnings", function()
            for _, page in ipairs({ "man1/relay.1.gz", "man5/relay-templates.5.gz" }) do
                local code, out, err = render(page)
                assert.are.equal(0, code, page)
                assert.are.equal("", err, page)
                assert.matches("NAME", out)
                assert.matches("SEE ALSO", out)
            end
        end)

        it("relay(1) lists every command and every variable config.lua reads", function()
            local _, page = render("man1/relay.1.gz")
            for _, path in ipairs(command_paths()) do
                assert.truthy(page:find("\n   relay " .. path .. "\n", 1, true), "relay(1) lacks relay " .. path)
            end
            local config_src = fs.read_file(ROOT .. "/lua/relay/config.lua")
            local vars = 0
            for var in config_src:gmatch('\nsetting%("([%w_]+)"') do
                assert.truthy(page:find("\n       " .. var .. "%s"), "relay(1) ENVIRONMENT lacks " .. var)
                vars = vars + 1
            end
            assert.is_true(vars >= 10)
        end)

        it("relay-templates(5) holds the template reference and the pattern language", function()
            local _, page = render("man5/relay-templates.5.gz")
            for _, needle in ipairs({ "relay-templates - ", "TOP LEVEL", "concurrency", "seccomp", "schedules",
                "THE PATTERN LANGUAGE", "Operators" }) do
                assert.truthy(page:find(needle, 1, true), "relay-templates(5) lacks " .. needle)
            end
        end)
    end)

    describe("shell completion", function()
        local installed = function(path) return fs.read_file(prefix .. "/share/" .. path) end

        it("installs what relay completion prints", function()
            for shell, path in pairs({ bash = "bash-completion/completions/relay", zsh = "zsh/site-functions/_relay",
                fish = "fish/vendor_completions.d/relay.fish" }) do
                local r = cli.run({ "completion", shell })
                assert.are.equal(0, r.code, r.stderr)
                assert.are.equal(r.stdout, installed(path), shell)
            end
        end)

        it("loads in bash and completes commands, sub-commands and flags", function()
            local script = q(prefix .. "/share/bash-completion/completions/relay")
            local load = "source <(" .. q(cli.binary()) .. " completion bash) && complete -p relay"
            local out = must("bash -c " .. q(load))
            assert.matches("%-F _relay .*relay\n$", out)
            local function complete(words, cword)
                return must("bash -c " .. q(string.format(
                    'source %s; COMP_WORDS=(%s); COMP_CWORD=%d; COMPREPLY=(); _relay; echo "${COMPREPLY[*]}"',
                    script, words, cword)))
            end
            assert.are.equal("dlq\n", complete("relay dl", 1))
            assert.are.equal("ls inspect replay rm\n", complete("relay dlq ''", 2))
            assert.are.equal("--json\n", complete("relay dlq ls --j", 3))
            assert.matches("%-%-redis%-url", complete("relay run --red", 2))
        end)

        it("describes every command for zsh and fish", function()
            local zsh, fish = installed("zsh/site-functions/_relay"), installed("fish/vendor_completions.d/relay.fish")
            assert.matches("^#compdef relay\n", zsh)
            for _, path in ipairs(command_paths()) do
                local last = path:match("(%S+)$")
                assert.truthy(zsh:find('"' .. last .. ":", 1, true), "zsh lacks " .. path)
                assert.truthy(fish:find("-xa '" .. last .. "'", 1, true), "fish lacks " .. path)
            end
        end)

        it("refuses other shells with a usage error", function()
            local r = cli.run({ "completion", "tcsh" })
            assert.are.equal(2, r.code)
            assert.matches("bash", r.stderr)
        end)
    end)
end)
