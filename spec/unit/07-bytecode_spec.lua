-- The precompiled Lua tree (src/lua_bytecode.c, relay.bytecode): a module is
-- served from its bytecode only while its source is the very file it was
-- compiled from, unchanged; anything else falls through to the source.
local bytecode = require("relay.bytecode")
local core = require("relay.core.bytecode")
local fs = require("relay.fs")

local ROOT = os.tmpname()
os.remove(ROOT)
local SRC, CACHE = ROOT .. "/src", ROOT .. "/cache"
local NAME = "relay_bytecode_probe"
local PATH = SRC .. "/" .. NAME .. ".lua"

describe("bytecode loader", function()
    local saved_path, loader

    before_each(function()
        assert(fs.mkdir_p(SRC))
        assert(fs.mkdir_p(CACHE))
        saved_path = package.path
        package.path = SRC .. "/?.lua;" .. package.path
        loader = core.loader(CACHE)
        assert(fs.write_file(PATH, "return { value = 1 }\n"))
    end)

    after_each(function()
        package.path = saved_path
        package.loaded[NAME] = nil
        fs.rm_rf(ROOT)
    end)

    it("serves a module from its bytecode, and require uses it", function()
        assert.is_string(loader(NAME)) -- nothing compiled yet: falls through
        assert(bytecode.compile_module(NAME, PATH, CACHE))
        local chunk = loader(NAME)
        assert.is_function(chunk)
        assert.are.equal(1, chunk(NAME).value)
        table.insert(package.loaders, 2, loader)
        local ok, mod = pcall(require, NAME)
        table.remove(package.loaders, 2)
        assert(ok, mod)
        assert.are.equal(1, mod.value)
    end)

    it("keeps the source's name and lines for tracebacks", function()
        assert(fs.write_file(PATH, "return function()\n  error('boom')\nend\n"))
        assert(bytecode.compile_module(NAME, PATH, CACHE))
        local _, err = pcall(loader(NAME)(NAME))
        assert.are.equal(PATH .. ":2: boom", err)
    end)

    it("falls through to a source edited since it was compiled", function()
        assert(bytecode.compile_module(NAME, PATH, CACHE))
        -- another size (the same size in the same tick of the file clock
        -- would look unchanged: the build compiles long after any edit)
        assert(fs.write_file(PATH, "return { value = 22 }\n"))
        assert.is_string(loader(NAME))
        assert(bytecode.compile_module(NAME, PATH, CACHE))
        assert.are.equal(22, loader(NAME)(NAME).value)
        -- another file in its place (git checkout, an editor's rename)
        assert(fs.write_file(PATH .. ".new", "return { value = 33 }\n"))
        assert(os.rename(PATH .. ".new", PATH))
        assert.is_string(loader(NAME))
    end)

    it("ignores bytecode of another file, writable by others, or broken", function()
        assert(bytecode.compile_module(NAME, PATH, CACHE))
        local file = CACHE .. "/" .. NAME .. ".bc"
        local text = fs.read_file(file)
        assert(fs.chmod(file, 438)) -- 0666
        assert.is_string(loader(NAME))
        assert(fs.chmod(file, 420))
        assert.is_function(loader(NAME))
        assert(fs.write_file(file, (text:gsub(PATH:gsub("%p", "%%%0"), (SRC .. "/other.lua"):gsub("%%", "%%%%"), 1))))
        assert.is_string(loader(NAME))
        local header = text:match("^[^\n]*\n")
        assert(fs.write_file(file, header .. "not bytecode at all"))
        assert.is_string(loader(NAME))
    end)

    it("loads a submodule of an all-in-one C library (posix.so) itself, as the C loaders would", function()
        local open_errno = loader("posix.errno")
        assert.is_function(open_errno)
        assert.are.equal(require("posix.errno").ENOENT, open_errno("posix.errno").ENOENT)
        assert.are.equal("", loader("posix.no_such_module"))
        assert.are.equal("", loader("relay_no_such_root.x"))
        -- a C library of the submodule's own comes first: the C loader's to load
        local saved_cpath = package.cpath
        assert(fs.mkdir_p(SRC .. "/posix"))
        assert(fs.write_file(SRC .. "/posix/errno.so", ""))
        package.cpath = SRC .. "/?.so;" .. package.cpath
        local answer = loader("posix.errno")
        package.cpath = saved_cpath
        assert.are.equal("", answer)
    end)

    it("compiles a tree by module name and drops the files of removed modules", function()
        local tree = ROOT .. "/tree"
        assert(fs.mkdir_p(tree .. "/pkg/sub"))
        assert(fs.write_file(tree .. "/pkg/a.lua", "return 1\n"))
        assert(fs.write_file(tree .. "/pkg/sub/init.lua", "return 2\n"))
        local names = bytecode.tree_modules(tree)
        table.sort(names)
        assert.are.same({ "pkg.a", "pkg.sub" }, names)
        package.path = tree .. "/?.lua;" .. tree .. "/?/init.lua;" .. package.path
        assert(fs.write_file(CACHE .. "/gone.bc", "x"))
        assert(bytecode.compile_tree(tree, CACHE))
        assert.is_false(fs.exists(CACHE .. "/gone.bc"))
        assert.are.equal(2, core.loader(CACHE)("pkg.sub")("pkg.sub"))
    end)
end)
