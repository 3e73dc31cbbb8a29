--- What every `ls` command shares: a header line naming the columns of
-- its text output, left out with --no-header (for scripts that cut
-- columns) and never printed with --json.
local _M = {}


function _M.add_flags(cmd)
    cmd:flag("--no-header", "Text output without the header line.")
end


--- Prints the tab-separated header unless --json or --no-header.
function _M.header(args, columns)
    if not args.json and not args.no_header then
        print(table.concat(columns, "\t"))
    end
end


return _M
