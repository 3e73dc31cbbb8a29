/*
 * The VM boot: the one place that creates the LuaJIT state, registers the C
 * modules in package.preload, points package.path at the Lua tree and runs
 * relay.cli. main.c calls it and never sees the Lua API, so this header
 * includes no Lua header.
 */
#ifndef RELAY_LUA_BOOT_H
#define RELAY_LUA_BOOT_H

struct ev_loop;

/* Runs `relay.cli.main(argv[1..])` as the main task on loop until it ends,
 * then closes the Lua state (its __gc handlers may still stop watchers, so the
 * caller destroys the loop only afterwards). Returns the process exit code:
 * the command's, 1 when it raised or got stuck, 2 when the VM or the Lua tree
 * could not be loaded. */
int relay_boot_run(struct ev_loop *loop, int argc, char **argv);

/* For a short-lived bulk command (relay match): relay_boot_run returns
 * without closing the Lua state, whose objects one by one cost more to free
 * than the process's end does at once (~15 M instructions for 10,000 rules).
 * Sanitizer builds close it anyway, so that their leak check still sees what
 * the state held. */
void relay_boot_leave_state_at_exit(void);

#endif
