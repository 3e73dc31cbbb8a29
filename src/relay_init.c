/*
 * relay-init: the first process of every runc container and bwrap sandbox,
 * a static binary bound read-only at /.relay-init.
 *
 *   relay-init [-d DEADLINE_MS] [-c FD] -- COMMAND [ARG...]
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

struct init_opts {
    long long deadline_ms; /* < 0: none */
    int control_fd;        /* < 0: none */
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
    for (i = 1; i + 1 < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (parse_number(argv[i + 1], &v) != 0) {
            return -1;
        }
        if (strcmp(argv[i], "-d") == 0) {
            o->deadline_ms = v;
        } else if (strcmp(argv[i], "-c") == 0 && v <= 65535) {
            o->control_fd = (int)v;
        } else {
            return -1;
        }
    }
    if (i + 1 >= argc || strcmp(argv[i], "--") != 0) {
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


int
main(int argc, char **argv)
{
    struct init_opts o;
    sigset_t all, old;
    pid_t child;
    int sfd, exec_errno;

    if (parse_args(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: relay-init [-d DEADLINE_MS] [-c FD] -- COMMAND [ARG...]\n");
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
