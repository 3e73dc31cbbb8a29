/* The readiness protocol against real datagram sockets: a path and an
 * abstract name receive exactly the state sent, no socket is a silent
 * success, and the watchdog variables are honoured only for this process. */
#include "relay/notify.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"


static int
bind_dgram(const char *name, int abstract)
{
    struct sockaddr_un sa;
    socklen_t len;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (abstract) {
        memcpy(sa.sun_path + 1, name, strlen(name));
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    } else {
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", name);
        len = (socklen_t)sizeof(sa);
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) != 0) {
        fprintf(stderr, "bind %s: %s\n", name, strerror(errno));
        exit(2);
    }
    return fd;
}


static void
expect_datagram(int fd, const char *want)
{
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

    CHECK(n >= 0);
    buf[n < 0 ? 0 : n] = '\0';
    CHECK_STR(buf, want);
}


static void
test_path_socket(void)
{
    char dir[] = "/tmp/relay-notify-XXXXXX";
    char path[128];
    char err[256] = "";
    relay_notify_target t;
    int fd;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/notify.sock", dir);
    fd = bind_dgram(path, 0);
    CHECK(relay_notify_parse(&t, path, NULL, NULL, getpid(), err, sizeof(err)) == 0);
    CHECK(t.addr_len > 0);
    CHECK(t.watchdog_usec == 0);
    CHECK(relay_notify_send(&t, "READY=1\nSTATUS=consuming", err, sizeof(err)) == 0);
    expect_datagram(fd, "READY=1\nSTATUS=consuming");
    close(fd);
    unlink(path);
    /* Nobody listening any more: an error, never a hang. */
    CHECK(relay_notify_send(&t, "STOPPING=1", err, sizeof(err)) == -1);
    CHECK(strstr(err, path) != NULL);
    rmdir(dir);
}


static void
test_abstract_socket(void)
{
    char name[64], text[80];
    char err[256] = "";
    relay_notify_target t;
    int fd;

    snprintf(name, sizeof(name), "relay-notify-test-%ld", (long)getpid());
    snprintf(text, sizeof(text), "@%s", name);
    fd = bind_dgram(name, 1);
    CHECK(relay_notify_parse(&t, text, NULL, NULL, getpid(), err, sizeof(err)) == 0);
    CHECK(relay_notify_send(&t, "WATCHDOG=1", err, sizeof(err)) == 0);
    expect_datagram(fd, "WATCHDOG=1");
    close(fd);
}


static void
test_environment(void)
{
    char err[256] = "";
    char pid[32];
    relay_notify_target t;

    /* No socket: sends succeed and do nothing. */
    CHECK(relay_notify_parse(&t, NULL, NULL, NULL, getpid(), err, sizeof(err)) == 0);
    CHECK(t.addr_len == 0);
    CHECK(relay_notify_send(&t, "READY=1", err, sizeof(err)) == 0);

    CHECK(relay_notify_parse(&t, "relative/path", NULL, NULL, 1, err, sizeof(err)) == -1);
    CHECK(t.addr_len == 0);
    CHECK(strstr(err, "NOTIFY_SOCKET") != NULL);
    CHECK(relay_notify_parse(&t, "@", NULL, NULL, 1, err, sizeof(err)) == -1);

    CHECK(relay_notify_parse(&t, NULL, "30000000", NULL, 42, err, sizeof(err)) == 0);
    CHECK(t.watchdog_usec == 30000000);
    CHECK(relay_notify_parse(&t, NULL, "30000000", "42", 42, err, sizeof(err)) == 0);
    CHECK(t.watchdog_usec == 30000000);
    /* Another process's watchdog is left alone. */
    CHECK(relay_notify_parse(&t, NULL, "30000000", "43", 42, err, sizeof(err)) == 0);
    CHECK(t.watchdog_usec == 0);
    CHECK(relay_notify_parse(&t, NULL, "0", NULL, 42, err, sizeof(err)) == -1);
    CHECK(relay_notify_parse(&t, NULL, "-5", NULL, 42, err, sizeof(err)) == -1);
    CHECK(relay_notify_parse(&t, NULL, "5s", NULL, 42, err, sizeof(err)) == -1);
    CHECK(strstr(err, "WATCHDOG_USEC") != NULL);

    /* The variables leave the environment once read. */
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    setenv("NOTIFY_SOCKET", "/run/nothing/notify", 1);
    setenv("WATCHDOG_USEC", "2000000", 1);
    setenv("WATCHDOG_PID", pid, 1);
    CHECK(relay_notify_from_env(&t, 1, err, sizeof(err)) == 0);
    CHECK(t.addr_len > 0);
    CHECK(t.watchdog_usec == 2000000);
    CHECK(getenv("NOTIFY_SOCKET") == NULL);
    CHECK(getenv("WATCHDOG_USEC") == NULL);
    CHECK(getenv("WATCHDOG_PID") == NULL);
}


int
main(void)
{
    test_path_socket();
    test_abstract_socket();
    test_environment();
    CHECK_DONE();
}
