--- relay app <sub>: the app sub-commands, each its own module relay.cmd.app_<sub>.
return require("relay.subcommands").group("app", {
    { "validate", "Validate apps (default: all under --apps); errors as file:line:col." },
    { "ls", "One line per app: name, state, driver, handlers, schedules, concurrency, note." },
    { "invoke", "Run one handler now in its container." },
    { "pause", "Pause an app fleet-wide: its matched invocations stay pending." },
    { "resume", "Resume a paused app." },
})
