--- relay schedule <sub>: the schedule sub-commands, each its own module relay.cmd.schedule_<sub>.
return require("relay.subcommands").group("schedule", {
    { "ls", "One line per schedule: app/name, handler, spec, next occurrence in UTC, then in its time zone." },
})
