/*
 * relay-init: the first process of every runc container and bwrap sandbox,
 * a static binary bound read-only at /.relay-init.
 *
 *   relay-init [-d DEADLINE_MS] [-c FD] [-w IDLE_MS] -- COMMAND [ARG...]
 *
 * It runs COMMAND as its only child, forwards every signal it receives to
 * it, reaps zombies and exits with the child's status, like any minimal
 * init. Two more duties make a container unable to outlive its attempt,
 * whatever happens to the daemon that started it:
 *
 *   - DEADLINE_MS is a CLOCK_MONOTONIC time (a container shares the host's
 *     monotonic clock: no time namespace is ever created). When it passes,
 *     the init exits. Under runc it is pid 1 of the container's pid
 *     namespace, under bwrap the only child of bwrap's pid 1, which exits
 *     with it: either way the kernel then SIGKILLs every process of the
 *     namespace. A daemon that is frozen, or whose timers cannot run, no
 *     longer decides how long its containers live.
 *
 *   - FD is one end of a socket pair whose other end only the daemon holds
 *     (close-on-exec there, so no other process inherits it). The kernel
 *     closes it when the daemon dies, however it dies; the init sees the
 *     end of file and exits at once. A parent-death signal would not do:
 *     runc is the container's parent, and a runc that dies leaves its
 *     container running.
 *
 * Before it exits after its child, the init writes one status record to FD,
 * so the daemon can tell a handler that exited with 137 from one killed by
 * SIGKILL (runc and bwrap report both as 137):
 *
 *   exit N        the command exited with status N
 *   signal N      the command was killed by signal N
 *   exec E TEXT   the command could not be executed (errno E)
 *   deadline      the deadline passed first
 *
 * With -w (a warm start, which needs -c) the container is created before
 * its event exists: the init waits for one start record on FD before it
 * runs COMMAND. The record carries what differs per invocation, as
 * NUL-terminated fields (no byte of a value can end one early, since no
 * environment value holds a NUL):
 *
 *   "relay-start" NUL  DEADLINE_MS NUL  NAME=VALUE NUL ...  NUL
 *
 * DEADLINE_MS replaces -d; each NAME=VALUE is set in the environment the
 * command gets. The end of file before a whole record (the daemon is
 * gone), SIGTERM, SIGINT, SIGHUP or SIGQUIT, a malformed or oversized record, or IDLE_MS without
 * one ends the init at once: a container that never started its command
 * ran nothing, and no daemon waits for it.
 *
 * FD is close-on-exec here, so the handler never holds it; the init makes
 * itself non-dumpable, so a handler (same uid) cannot reach it through
 * /proc or ptrace either.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The exit status when the init ends the container itself. */
#define KILLED_STATUS 137
#define USAGE_STATUS 125
/* The largest start record a warm container accepts. */
#define START_MAX (64 * 1024)
#define START_MAGIC "relay-start"

struct init_opts {
    long long deadline_ms; /* < 0: none */
    int control_fd;        /* < 0: none */
    long long idle_ms;     /* < 0: start at once; else wait for a start record */
    char **argv;
};

static int control_fd = -1;


static long long
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/* One line to the daemon; lost if it is gone, which changes nothing. */
static void
record(const char *line)
{
    ssize_t n;

    if (control_fd < 0) {
        return;
    }
    do {
        n = write(control_fd, line, strlen(line));
    } while (n < 0 && errno == EINTR);
}


static int
parse_number(const char *text, long long *out)
{
    char *end;

    errno = 0;
    *out = strtoll(text, &end, 10);
    return (errno != 0 || end == text || *end != '\0' || *out < 0) ? -1 : 0;
}


static int
parse_args(int argc, char **argv, struct init_opts *o)
{
    long long v;
    int i;

    o->deadline_ms = -1;
    o->control_fd = -1;
    o->idle_ms = -1;
    for (i = 1; i + 1 < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (parse_number(argv[i + 1], &v) != 0) {
            return -1;
        }
        if (strcmp(argv[i], "-d") == 0) {
            o->deadline_ms = v;
        } else if (strcmp(argv[i], "-c") == 0 && v <= 65535) {
            o->control_fd = (int)v;
        } else if (strcmp(argv[i], "-w") == 0) {
            o->idle_ms = v;
        } else {
            return -1;
        }
    }
    if (i + 1 >= argc || strcmp(argv[i], "--") != 0 || (o->idle_ms >= 0 && o->control_fd < 0)) {
        return -1;
    }
    o->argv = argv + i + 1;
    return 0;
}


/* The child: the signal mask the init inherited, then the command. Its exec
 * errno goes back through errfd (close-on-exec: nothing comes on success). */
static void
run_child(char **argv, const sigset_t *mask, int errfd)
{
    int e;

    sigprocmask(SIG_SETMASK, mask, NULL);
    execvp(argv[0], argv);
    e = errno;
    fprintf(stderr, "relay-init: exec %s: %s\n", argv[0], strerror(e));
    if (write(errfd, &e, sizeof e) < 0) {
        /* the parent then sees a plain exit 127 */
    }
    _exit(e == ENOENT ? 127 : 126);
}


static pid_t
start_child(char **argv, const sigset_t *mask, int *exec_errno)
{
    int ep[2];
    pid_t pid;
    ssize_t n;

    *exec_errno = 0;
    if (pipe2(ep, O_CLOEXEC) != 0) {
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        close(ep[0]);
        run_child(argv, mask, ep[1]);
    }
    close(ep[1]);
    if (pid > 0) {
        do {
            n = read(ep[0], exec_errno, sizeof *exec_errno);
        } while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof *exec_errno) {
            *exec_errno = 0;
        }
    }
    close(ep[0]);
    return pid;
}


/* The child's end: the init's exit status is the child's, 128+N for a
 * signal, as a shell would report it. */
static void
child_ended(int status)
{
    char line[32];
    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);

    if (WIFSIGNALED(status)) {
        snprintf(line, sizeof line, "signal %d\n", WTERMSIG(status));
    } else {
        snprintf(line, sizeof line, "exit %d\n", code);
    }
    record(line);
    _exit(code);
}


static void
reap(pid_t child)
{
    pid_t pid;
    int status;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == child) {
            child_ended(status);
        }
    }
}


static void
forward_signals(int sfd, pid_t child)
{
    struct signalfd_siginfo si;

    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
            reap(child);
        } else {
            kill(child, (int)si.ssi_signo);
        }
    }
}


/* Any data is ignored; the end of file means the daemon is gone. */
static void
watch_control(void)
{
    char buf[64];
    ssize_t n;

    for (;;) {
        n = read(control_fd, buf, sizeof buf);
        if (n > 0 || (n < 0 && errno == EINTR)) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        _exit(KILLED_STATUS);
    }
}


static int
poll_timeout(long long deadline_ms)
{
    long long left;

    if (deadline_ms < 0) {
        return -1;
    }
    left = deadline_ms - now_ms();
    if (left <= 0) {
        record("deadline\n");
        _exit(KILLED_STATUS);
    }
    return left > 60000 ? 60000 : (int)left;
}


static void
supervise(pid_t child, int sfd, long long deadline_ms)
{
    struct pollfd pfd[2];
    int n;

    pfd[0].fd = sfd;
    pfd[0].events = POLLIN;
    pfd[1].fd = control_fd;
    pfd[1].events = POLLIN;
    for (;;) {
        n = poll(pfd, control_fd >= 0 ? 2 : 1, poll_timeout(deadline_ms));
        if (n < 0 && errno != EINTR) {
            _exit(KILLED_STATUS);
        }
        if (n > 0 && pfd[0].revents != 0) {
            forward_signals(sfd, child);
        }
        if (n > 0 && control_fd >= 0 && pfd[1].revents != 0) {
            watch_control();
        }
    }
}


static void
exec_failed(pid_t child, int e)
{
    char line[200];

    snprintf(line, sizeof line, "exec %d %s\n", e, strerror(e));
    record(line);
    waitpid(child, NULL, 0);
    _exit(e == ENOENT ? 127 : 126);
}


/* Exits USAGE_STATUS without a record: the daemon's sign that the init
 * itself failed (a host failure), not the handler. */
static void
init_failed(const char *what)
{
    fprintf(stderr, "relay-init: %s: %s\n", what, strerror(errno));
    _exit(USAGE_STATUS);
}


/* The record's fields, checked: the magic, a deadline, NAME=VALUE entries,
 * then an empty field that ends it. Sets the deadline and the environment;
 * -1 on anything else. */
static int
apply_start(char *rec, size_t len, long long *deadline_ms)
{
    char *field = rec, *end = rec + len, *eq, *next;

    if (strcmp(field, START_MAGIC) != 0) {
        return -1;
    }
    field += strlen(field) + 1;
    if (field >= end || parse_number(field, deadline_ms) != 0) {
        return -1;
    }
    for (field += strlen(field) + 1; field < end && *field != '\0'; field = next) {
        next = field + strlen(field) + 1;
        eq = strchr(field, '=');
        if (eq == NULL || eq == field) {
            return -1;
        }
        *eq = '\0';
        if (setenv(field, eq + 1, 1) != 0) {
            return -1;
        }
    }
    return field < end ? 0 : -1;
}


/* Where the record ends (after its empty last field), or 0 while it is
 * incomplete: two NULs in a row, the first after the magic and deadline. */
static size_t
record_end(const char *buf, size_t len)
{
    size_t i, fields = 0;

    for (i = 0; i < len; i++) {
        if (buf[i] != '\0') {
            continue;
        }
        if (fields >= 2 && (i == 0 || buf[i - 1] == '\0')) {
            return i + 1;
        }
        fields++;
    }
    return 0;
}


/* Reads what is there; returns 1 once the record is whole, 0 for more. */
static int
read_start(char *buf, size_t *len)
{
    ssize_t n;

    for (;;) {
        n = read(control_fd, buf + *len, START_MAX - *len);
        if (n > 0) {
            *len += (size_t)n;
            if (record_end(buf, *len) != 0) {
                return 1;
            }
            if (*len == START_MAX) {
                _exit(USAGE_STATUS);
            }
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        }
        _exit(KILLED_STATUS); /* end of file: the daemon is gone */
    }
}


/* A signal while waiting: one that asks to stop ends the init; others (a
 * runtime's own, a window change) are dropped, there is no child yet. */
static void
ended_by_signal(int sfd)
{
    struct signalfd_siginfo si;

    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        switch (si.ssi_signo) {
        case SIGTERM:
        case SIGINT:
        case SIGHUP:
        case SIGQUIT:
            _exit(KILLED_STATUS);
        default:
            break;
        }
    }
}


/* A warm start: waits (at most idle_ms) for the start record, then
 * applies it. */
static void
await_start(int sfd, long long idle_ms, long long *deadline_ms)
{
    static char buf[START_MAX];
    struct pollfd pfd[2];
    long long until = now_ms() + idle_ms, left;
    size_t len = 0;
    int n;

    pfd[0].fd = sfd;
    pfd[0].events = POLLIN;
    pfd[1].fd = control_fd;
    pfd[1].events = POLLIN;
    for (;;) {
        left = until - now_ms();
        if (left <= 0) {
            _exit(KILLED_STATUS);
        }
        n = poll(pfd, 2, left > 60000 ? 60000 : (int)left);
        if (n < 0 && errno != EINTR) {
            _exit(KILLED_STATUS);
        }
        if (n > 0 && pfd[0].revents != 0) {
            ended_by_signal(sfd);
        }
        if (n > 0 && pfd[1].revents != 0 && read_start(buf, &len)) {
            break;
        }
    }
    if (apply_start(buf, record_end(buf, len), deadline_ms) != 0) {
        fprintf(stderr, "relay-init: malformed start record\n");
        _exit(USAGE_STATUS);
    }
}


int
main(int argc, char **argv)
{
    struct init_opts o;
    sigset_t all, old;
    pid_t child;
    int sfd, exec_errno;

    if (parse_args(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: relay-init [-d DEADLINE_MS] [-c FD] [-w IDLE_MS] -- COMMAND [ARG...]\n");
        return USAGE_STATUS;
    }
    if (o.control_fd >= 0
        && (fcntl(o.control_fd, F_SETFD, FD_CLOEXEC) != 0 || fcntl(o.control_fd, F_SETFL, O_NONBLOCK) != 0)) {
        init_failed("control descriptor");
    }
    control_fd = o.control_fd;
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* Blocked signals are queued even for a namespace's pid 1, which the
     * kernel otherwise spares every signal it has no handler for. */
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    sfd = signalfd(-1, &all, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        init_failed("signalfd");
    }
    if (o.idle_ms >= 0) {
        await_start(sfd, o.idle_ms, &o.deadline_ms);
    }
    child = start_child(o.argv, &old, &exec_errno);
    if (child < 0) {
        init_failed("fork");
    }
    if (exec_errno != 0) {
        exec_failed(child, exec_errno);
    }
    supervise(child, sfd, o.deadline_ms);
    return KILLED_STATUS;
}
