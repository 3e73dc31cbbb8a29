/* Unit test of map_guard (include/relay/map_guard.h): a guarded read of a
 * mapped file cut short ends the call instead of killing the process, while any
 * holder remains; the last release puts the earlier SIGBUS action back; a
 * SIGBUS that is not a guarded fault reaches the earlier handler. */
#include "check.h"
#include "relay/map_guard.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile sig_atomic_t earlier_calls;


static void
earlier_handler(int sig)
{
    (void)sig;
    earlier_calls++;
}


static int
read_first_byte(void *map)
{
    return ((volatile const char *)map)[0];
}


/* 1 when reading the first byte of a mapped file emptied under the mapping
 * ended the guarded call (the guard held), 0 when it read. */
static int
guarded_read_of_emptied_file(void)
{
    FILE *f = tmpfile();
    int faulted = 0, rc;
    char *map;

    CHECK(f != NULL && fwrite("0123456789", 1, 10, f) == 10 && fflush(f) == 0);
    map = mmap(NULL, 10, PROT_READ, MAP_SHARED, fileno(f), 0);
    CHECK(map != MAP_FAILED);
    CHECK(relay_map_guard_run(map, 10, read_first_byte, map, &faulted) == '0' && !faulted); /* intact: read */
    CHECK(ftruncate(fileno(f), 0) == 0);
    rc = relay_map_guard_run(map, 10, read_first_byte, map, &faulted);
    CHECK(!faulted || rc == -1);
    munmap(map, 10);
    fclose(f);
    return faulted;
}


static void
test_holds_nest(void)
{
    struct sigaction now;

    CHECK(relay_map_guard_hold() == 0);
    CHECK(relay_map_guard_hold() == 0);
    relay_map_guard_release();
    CHECK(guarded_read_of_emptied_file() == 1); /* one holder still there */
    relay_map_guard_release();
    CHECK(sigaction(SIGBUS, NULL, &now) == 0);
    CHECK(now.sa_handler == earlier_handler && !(now.sa_flags & SA_SIGINFO));
}


/* A sent SIGBUS is not a fault of the mapping: the earlier handler hears it,
 * and the guard still works after it. */
static void
test_sent_signal_reaches_earlier_handler(void)
{
    earlier_calls = 0;
    CHECK(relay_map_guard_hold() == 0);
    CHECK(raise(SIGBUS) == 0);
    CHECK(earlier_calls == 1);
    CHECK(guarded_read_of_emptied_file() == 1);
    relay_map_guard_release();
}


int
main(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = earlier_handler;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGBUS, &sa, NULL) == 0);
    test_holds_nest();
    test_sent_signal_reaches_earlier_handler();
    CHECK_DONE();
}
