/*
 * relay: the process entry point. It sets what belongs to the process (SIGPIPE,
 * the default event loop) and hands over to the VM boot (src/lua_boot.c),
 * which runs relay.cli in a LuaJIT state. Everything else is Lua.
 */
#include <signal.h>
#include <stdio.h>

#include <ev.h>

#include "lua_boot.h"


int
main(int argc, char **argv)
{
    struct ev_loop *loop;
    int exit_code;

    /* A handler closing its stdin early must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    loop = ev_default_loop(EVFLAG_AUTO);
    if (loop == NULL) {
        fprintf(stderr, "relay: cannot initialise the event loop\n");
        return 2;
    }
    exit_code = relay_boot_run(loop, argc, argv);
    ev_loop_destroy(loop);
    return exit_code;
}
