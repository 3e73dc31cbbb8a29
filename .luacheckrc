std = "luajit"
max_line_length = 120
codes = true
exclude_files = { "build*/**", ".cache/**" }

files["spec/**/*.lua"] = { std = "+busted" }
files["scripts/busted.lua"] = { std = "+busted" }
files["examples/hooks/**/*.lua"] = { std = "luajit" }
