--- relay consumer <sub>: the consumer group's members, each sub-command its
-- own module relay.cmd.consumer_<sub>.
return require("relay.subcommands").group("consumer", {
    { "ls", "One line per consumer: name, idle, pending, alive." },
    { "rm", "Remove a dead consumer, handing its pending entries to a live one first." },
})
