/*
 * Child-process supervision on the libev default loop (see relay/proc.h).
 *
 * State machine of one proc: RUNNING (child alive, pipes open) -> reaped ->
 * drained (both output pipes at EOF, or force-closed drain_s after the reap)
 * -> done (on_done called once). The deadline runs TERM -> grace -> KILL on
 * the whole process group, never on the leader alone: a container runtime
 * and whatever it forked must all go. The optional control socket is a
 * third stream that completion does not wait for (see drain_control).
 */
/* pipe2 */
#define _GNU_SOURCE

#include "relay/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* What the child reports through the CLOEXEC error pipe before _exit(127). */
enum { STAGE_CGROUP = 1, STAGE_STDIO, STAGE_CHDIR, STAGE_FDS, STAGE_LIMITS, STAGE_IDS, STAGE_EXEC };

struct child_error {
    int stage;
    int err;
    int index;
};

struct relay_stream {
    ev_io io;
    int fd;
    int which;
    char *buf;
    size_t len, cap;
    int eof;
    relay_proc *owner;
};

struct relay_proc {
    struct ev_loop *loop;
    relay_proc_line_fn on_line;
    relay_proc_done_fn on_done;
    relay_proc_hook_fn on_hook;
    void *ud;
    double timeout_s, grace_s, drain_s, kill_delay_s;
    size_t line_max;
    int keep_group;
    int deferred; /* waiting for relay_proc_activate */

    pid_t pid;
    ev_child child;
    ev_io in_io;
    int in_fd;
    char *in_data;
    size_t in_len, in_off;
    struct relay_stream out, err, ctl;
    ev_timer deadline, grace, drain;

    int reaped, done, term_sent, kill_hooked, kill_sent;
    int in_done_cb, free_pending;
    struct timespec t0;
    relay_proc_report rep;
};

static int live_procs;

#define MIN_FD 3
#define READS_PER_EVENT 4
#define MAX_PASS_FDS 16


static double
mono_ms_since(const struct timespec *t0)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) / 1e6;
}


/* Moves fd to >= 3 so that dup2 onto 0/1/2 in the child never clobbers
 * another pipe end (our own stdio may be closed). Keeps CLOEXEC. */
static int
fd_high(int fd)
{
    int nfd;

    if (fd >= MIN_FD) {
        return fd;
    }
    nfd = fcntl(fd, F_DUPFD_CLOEXEC, MIN_FD);
    close(fd);
    return nfd;
}


static int
make_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) != 0) {
        return -1;
    }
    fds[0] = fd_high(fds[0]);
    fds[1] = fd_high(fds[1]);
    if (fds[0] < 0 || fds[1] < 0) {
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
        return -1;
    }
    return 0;
}


/* The control socket pair: [0] stays here, [1] goes to the child. */
static int
make_socketpair(int fds[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
        return -1;
    }
    fds[0] = fd_high(fds[0]);
    fds[1] = fd_high(fds[1]);
    return fds[0] < 0 || fds[1] < 0 ? -1 : 0;
}


static void
close_pair(int fds[2])
{
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    fds[0] = fds[1] = -1;
}


static void
set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl >= 0) {
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    }
}


static const char *
env_path(const char *const *envp)
{
    const char *p;
    size_t i;

    if (envp == NULL) {
        p = getenv("PATH");
        return p != NULL ? p : "/usr/local/bin:/usr/bin:/bin";
    }
    for (i = 0; envp[i] != NULL; i++) {
        if (strncmp(envp[i], "PATH=", 5) == 0) {
            return envp[i] + 5;
        }
    }
    return "/usr/local/bin:/usr/bin:/bin";
}


/* PATH search happens here, before fork, so the child only calls execve
 * (execvpe is a GNU extension and allocates). On no match the name is kept
 * and execve's ENOENT becomes the start error. */
static void
resolve_path(const char *name, const char *const *envp, char *out, size_t outlen)
{
    const char *path = env_path(envp), *end;
    struct stat st;
    size_t dlen;

    snprintf(out, outlen, "%s", name);
    if (strchr(name, '/') != NULL) {
        return;
    }
    while (*path != '\0') {
        end = strchr(path, ':');
        dlen = end != NULL ? (size_t)(end - path) : strlen(path);
        if (dlen > 0 && dlen + strlen(name) + 2 <= outlen) {
            memcpy(out, path, dlen);
            out[dlen] = '/';
            memcpy(out + dlen + 1, name, strlen(name) + 1);
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) {
                return;
            }
        }
        if (end == NULL) {
            break;
        }
        path = end + 1;
    }
    snprintf(out, outlen, "%s", name);
}


/* Child side, between fork and exec: async-signal-safe calls only. */
static void
child_fail(int errfd, int stage, int index)
{
    struct child_error ce;
    ssize_t n;

    ce.stage = stage;
    ce.err = errno;
    ce.index = index;
    do {
        n = write(errfd, &ce, sizeof ce);
    } while (n < 0 && errno == EINTR);
    _exit(127);
}


static void
child_join_cgroups(const char *const *procs, int errfd)
{
    char buf[24];
    int fd, len, i, v;
    pid_t me = getpid();

    for (i = 0; procs != NULL && procs[i] != NULL; i++) {
        /* no snprintf here: format the pid by hand */
        len = 0;
        for (v = (int)me; v > 0; v /= 10) {
            buf[len++] = (char)('0' + v % 10);
        }
        for (v = 0; v < len / 2; v++) {
            char t = buf[v];
            buf[v] = buf[len - 1 - v];
            buf[len - 1 - v] = t;
        }
        fd = open(procs[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, buf, (size_t)len) != len) {
            child_fail(errfd, STAGE_CGROUP, i);
        }
        close(fd);
    }
}


/* Every inherited descriptor (redis sockets, the loop's fds) must not leak
 * into the container runtime: mark all of them close-on-exec. */
static void
child_cloexec_all(void)
{
    long fd, max;

#ifdef SYS_close_range
    if (syscall(SYS_close_range, MIN_FD, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */) == 0) {
        return;
    }
#endif
    max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) {
        max = 65536;
    }
    for (fd = MIN_FD; fd < max; fd++) {
        fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    }
}


/* Moves the passed descriptors to 3, 4, ...: first all of them (and the
 * error pipe) above the targets, so no dup2 overwrites one still needed.
 * Returns the error pipe's new number. */
static int
child_pass_fds(const int *fds, size_t n, int errfd)
{
    int high = 3 + (int)n + 16;
    int moved[MAX_PASS_FDS + 1];
    size_t i;

    if (n == 0) {
        return errfd;
    }
    if (n > MAX_PASS_FDS + 1) {
        errno = EMFILE;
        child_fail(errfd, STAGE_FDS, 0);
    }
    errfd = fcntl(errfd, F_DUPFD_CLOEXEC, high);
    for (i = 0; i < n; i++) {
        moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, high);
        if (moved[i] < 0) {
            child_fail(errfd, STAGE_FDS, (int)i);
        }
    }
    for (i = 0; i < n; i++) {
        /* dup2 clears close-on-exec on the new descriptor */
        if (dup2(moved[i], 3 + (int)i) < 0) {
            child_fail(errfd, STAGE_FDS, (int)i);
        }
    }
    return errfd;
}


static void
child_limits_and_ids(const relay_proc_opts *o, int errfd)
{
    struct rlimit rl;

    if (o->nofile > 0) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)o->nofile;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            child_fail(errfd, STAGE_LIMITS, 0);
        }
    }
    if (o->no_core) {
        rl.rlim_cur = rl.rlim_max = 0;
        if (setrlimit(RLIMIT_CORE, &rl) != 0) {
            child_fail(errfd, STAGE_LIMITS, 1);
        }
    }
    if (o->set_ids) {
        if (setgroups(0, NULL) != 0 || setgid((gid_t)o->gid) != 0 || setuid((uid_t)o->uid) != 0) {
            child_fail(errfd, STAGE_IDS, 0);
        }
    }
}


/* The kernel SIGKILLs the child when its parent ends, however it ends (a
 * SIGKILL included); a parent already gone before the request is noticed
 * here. Set after the identity change, which clears the request. */
static void
child_die_with_parent(pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) {
        _exit(127);
    }
}


static void
child_exec(const relay_proc_opts *o, const char *path, const int std[3], const int *fds, size_t n_fds, int errfd,
           pid_t parent)
{
    struct sigaction sa;
    sigset_t all;
    int sig;

    setpgid(0, 0);
    /* We ignore SIGPIPE and libev may have blocked signals: the handler
     * starts with default dispositions and an empty mask. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (sig = 1; sig < NSIG; sig++) {
        sigaction(sig, &sa, NULL);
    }
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);

    child_join_cgroups(o->cgroup_procs, errfd);
    if (dup2(std[0], 0) < 0 || dup2(std[1], 1) < 0 || dup2(std[2], 2) < 0) {
        child_fail(errfd, STAGE_STDIO, 0);
    }
    child_cloexec_all();
    errfd = child_pass_fds(fds, n_fds, errfd);
    child_limits_and_ids(o, errfd);
    if (o->die_with_parent) {
        child_die_with_parent(parent);
    }
    if (o->cwd != NULL && chdir(o->cwd) != 0) {
        child_fail(errfd, STAGE_CHDIR, 0);
    }
    execve(path, (char *const *)o->argv, (char *const *)(o->envp != NULL ? o->envp : (const char *const *)environ));
    child_fail(errfd, STAGE_EXEC, 0);
}


static void
describe_start_error(relay_proc *p, const relay_proc_opts *o, const struct child_error *ce)
{
    const char *what = strerror(ce->err);

    p->rep.start_errno = ce->err != 0 ? ce->err : EIO;
    switch (ce->stage) {
    case STAGE_CGROUP:
        snprintf(p->rep.start_error, sizeof p->rep.start_error, "join cgroup %s: %s", o->cgroup_procs[ce->index], what);
        break;
    case STAGE_CHDIR:
        snprintf(p->rep.start_error, sizeof p->rep.start_error, "chdir %s: %s", o->cwd, what);
        break;
    case STAGE_FDS:
        snprintf(p->rep.start_error, sizeof p->rep.start_error, "pass descriptor %d: %s", ce->index, what);
        break;
    case STAGE_LIMITS:
        snprintf(p->rep.start_error, sizeof p->rep.start_error, "set %s limit: %s",
                 ce->index == 0 ? "RLIMIT_NOFILE" : "RLIMIT_CORE", what);
        break;
    case STAGE_IDS:
        snprintf(p->rep.start_error, sizeof p->rep.start_error, "switch to uid %ld gid %ld: %s", o->uid, o->gid, what);
        break;
    case STAGE_STDIO:
        snprintf(p->rep.start_error, sizeof p->rep.start_error, "set up stdio: %s", what);
        break;
    default:
        snprintf(p->rep.start_error, sizeof p->rep.start_error, "exec %s: %s", o->argv[0], what);
        break;
    }
}


/* ---- completion ---- */

static void
stop_all(relay_proc *p)
{
    ev_child_stop(p->loop, &p->child);
    ev_io_stop(p->loop, &p->in_io);
    ev_io_stop(p->loop, &p->out.io);
    ev_io_stop(p->loop, &p->err.io);
    ev_io_stop(p->loop, &p->ctl.io);
    ev_timer_stop(p->loop, &p->deadline);
    ev_timer_stop(p->loop, &p->grace);
    ev_timer_stop(p->loop, &p->drain);
}


static void
close_stdin(relay_proc *p)
{
    ev_io_stop(p->loop, &p->in_io);
    if (p->in_fd >= 0) {
        close(p->in_fd);
        p->in_fd = -1;
    }
    free(p->in_data);
    p->in_data = NULL;
}


static void
stream_close(relay_proc *p, struct relay_stream *s)
{
    ev_io_stop(p->loop, &s->io);
    if (s->len > 0 && p->on_line != NULL) {
        p->on_line(p->ud, s->which, s->buf, s->len, 1);
    }
    s->len = 0;
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    s->eof = 1;
}


static void emit_lines(relay_proc *p, struct relay_stream *s);


/* The control stream never holds completion up (a container may outlive
 * its runtime); what is in it when the rest is done is read (a bounded
 * number of times: a writer cannot keep us here), then it is closed, which
 * also ends a supervisor still waiting on it. */
static void
drain_control(relay_proc *p)
{
    struct relay_stream *s = &p->ctl;
    ssize_t n;
    int i;

    for (i = 0; i < READS_PER_EVENT && !s->eof; i++) {
        n = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (n > 0) {
            s->len += (size_t)n;
            emit_lines(p, s);
        } else if (!(n < 0 && errno == EINTR)) {
            break;
        }
    }
    if (!s->eof) {
        stream_close(p, s);
    }
}


static void
maybe_finish(relay_proc *p)
{
    if (p->done || !p->reaped || !p->out.eof || !p->err.eof) {
        return;
    }
    drain_control(p);
    stop_all(p);
    close_stdin(p);
    p->done = 1;
    p->rep.duration_ms = (int64_t)mono_ms_since(&p->t0);
    if (p->on_done != NULL) {
        p->in_done_cb = 1;
        p->on_done(p->ud, p, &p->rep);
        p->in_done_cb = 0;
        if (p->free_pending) {
            relay_proc_free(p);
        }
    }
}


/* ---- watchers ---- */

static void
emit_lines(relay_proc *p, struct relay_stream *s)
{
    size_t start = 0;
    char *nl;

    while (start < s->len && (nl = memchr(s->buf + start, '\n', s->len - start)) != NULL) {
        if (p->on_line != NULL) {
            p->on_line(p->ud, s->which, s->buf + start, (size_t)(nl - (s->buf + start)), 0);
        }
        start = (size_t)(nl - s->buf) + 1;
    }
    if (start > 0) {
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
    }
    if (s->len == s->cap) {
        /* a full buffer without a newline: emit it as a piece, keep draining */
        if (p->on_line != NULL) {
            p->on_line(p->ud, s->which, s->buf, s->len, 1);
        }
        s->len = 0;
    }
}


static void
stream_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct relay_stream *s = w->data;
    relay_proc *p = s->owner;
    ssize_t n;
    int i;

    (void)loop;
    (void)revents;
    /* a bounded number of reads per event keeps a flood from starving
     * the rest of the loop (heartbeats, redis) */
    for (i = 0; i < READS_PER_EVENT; i++) {
        n = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (n > 0) {
            s->len += (size_t)n;
            emit_lines(p, s);
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        stream_close(p, s);
        maybe_finish(p);
        return;
    }
}


static void
stdin_write(relay_proc *p)
{
    ssize_t n;

    while (p->in_off < p->in_len) {
        n = write(p->in_fd, p->in_data + p->in_off, p->in_len - p->in_off);
        if (n > 0) {
            p->in_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!ev_is_active(&p->in_io)) {
                ev_io_start(p->loop, &p->in_io);
            }
            return;
        }
        break; /* EPIPE: the handler does not read its stdin; fine */
    }
    close_stdin(p);
}


static void
stdin_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    stdin_write(w->data);
}


static void
drain_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    relay_proc *p = w->data;

    (void)loop;
    (void)revents;
    /* the child is gone but something it left behind still holds a pipe */
    if (!p->out.eof) {
        stream_close(p, &p->out);
    }
    if (!p->err.eof) {
        stream_close(p, &p->err);
    }
    maybe_finish(p);
}


static void
child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
    relay_proc *p = w->data;

    (void)revents;
    ev_child_stop(loop, w);
    p->reaped = 1;
    if (WIFEXITED(w->rstatus)) {
        p->rep.exited = 1;
        p->rep.status = WEXITSTATUS(w->rstatus);
    } else if (WIFSIGNALED(w->rstatus)) {
        p->rep.signal = WTERMSIG(w->rstatus);
    }
    ev_timer_stop(loop, &p->deadline);
    ev_timer_stop(loop, &p->grace);
    close_stdin(p);
    if (!p->keep_group) {
        /* leftovers of the group (a bare handler's background job); the
         * pgid cannot be reused while a member lives */
        kill(-p->pid, SIGKILL);
    }
    if (!p->out.eof || !p->err.eof) {
        ev_timer_set(&p->drain, p->drain_s, 0.);
        ev_timer_start(loop, &p->drain);
    }
    maybe_finish(p);
}


static void
grace_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    relay_proc *p = w->data;

    (void)revents;
    if (p->reaped || p->kill_sent) {
        return;
    }
    if (!p->kill_hooked && p->on_hook != NULL) {
        p->kill_hooked = 1;
        p->on_hook(p->ud, p, SIGKILL);
        if (p->kill_delay_s > 0) {
            /* let the runtime end its container and clean up itself; a
             * runtime killed first would leave the container orphaned */
            ev_timer_set(&p->grace, p->kill_delay_s, 0.);
            ev_timer_start(loop, &p->grace);
            return;
        }
    }
    p->kill_sent = 1;
    kill(-p->pid, SIGKILL);
}


static void
deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    relay_proc *p = w->data;

    (void)w;
    (void)revents;
    if (p->reaped || p->term_sent) {
        return;
    }
    p->rep.timed_out = 1;
    p->term_sent = 1;
    if (p->on_hook != NULL) {
        p->on_hook(p->ud, p, SIGTERM);
    }
    kill(-p->pid, SIGTERM);
    ev_timer_set(&p->grace, p->grace_s, 0.);
    ev_timer_start(loop, &p->grace);
}


/* ---- spawn ---- */

static void
proc_release(relay_proc *p)
{
    free(p->out.buf);
    free(p->err.buf);
    free(p->ctl.buf);
    free(p->in_data);
    free(p);
}


static relay_proc *
proc_alloc(struct ev_loop *loop, const relay_proc_opts *o)
{
    relay_proc *p = calloc(1, sizeof *p);

    if (p == NULL) {
        return NULL;
    }
    p->loop = loop;
    p->on_line = o->on_line;
    p->on_done = o->on_done;
    p->on_hook = o->on_hook;
    p->ud = o->ud;
    p->timeout_s = o->timeout_s;
    p->grace_s = o->grace_s > 0 ? o->grace_s : 2.0;
    p->drain_s = o->drain_s > 0 ? o->drain_s : 2.0;
    p->kill_delay_s = o->kill_delay_s;
    p->line_max = o->line_max > 0 ? o->line_max : RELAY_PROC_LINE_MAX;
    p->keep_group = o->keep_group;
    p->deferred = o->deferred;
    p->in_fd = p->out.fd = p->err.fd = p->ctl.fd = -1;
    p->out.which = RELAY_PROC_STDOUT;
    p->err.which = RELAY_PROC_STDERR;
    p->ctl.which = RELAY_PROC_CONTROL;
    p->out.owner = p->err.owner = p->ctl.owner = p;
    p->out.cap = p->err.cap = p->line_max;
    p->ctl.cap = RELAY_PROC_CONTROL_LINE_MAX;
    p->ctl.eof = !o->control;
    p->out.buf = malloc(p->line_max);
    p->err.buf = malloc(p->line_max);
    p->ctl.buf = o->control ? malloc(p->ctl.cap) : NULL;
    if (o->stdin_len > 0 && !o->deferred) {
        p->in_data = malloc(o->stdin_len);
    }
    if (p->out.buf == NULL || p->err.buf == NULL || (o->control && p->ctl.buf == NULL)
        || (o->stdin_len > 0 && !o->deferred && p->in_data == NULL)) {
        proc_release(p);
        return NULL;
    }
    if (o->stdin_len > 0 && !o->deferred) {
        memcpy(p->in_data, o->stdin_data, o->stdin_len);
        p->in_len = o->stdin_len;
    }
    return p;
}


/* Parent side after a successful fork: the child watcher first (a child
 * that exits at once must not be reaped by anyone else), then learn
 * whether exec worked. The blocking read ends at exec (CLOEXEC) or at the
 * child's error report, both immediate. */
static void
parent_setup(relay_proc *p, const relay_proc_opts *o, int errfd)
{
    struct child_error ce;
    ssize_t n;

    setpgid(p->pid, p->pid); /* also in the child: whichever runs first */
    ev_child_init(&p->child, child_cb, p->pid, 0);
    p->child.data = p;
    ev_child_start(p->loop, &p->child);

    do {
        n = read(errfd, &ce, sizeof ce);
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof ce) {
        describe_start_error(p, o, &ce);
    }

    set_nonblock(p->in_fd);
    set_nonblock(p->out.fd);
    set_nonblock(p->err.fd);
    ev_io_init(&p->in_io, stdin_cb, p->in_fd, EV_WRITE);
    p->in_io.data = p;
    ev_io_init(&p->out.io, stream_cb, p->out.fd, EV_READ);
    p->out.io.data = &p->out;
    ev_io_init(&p->err.io, stream_cb, p->err.fd, EV_READ);
    p->err.io.data = &p->err;
    ev_io_start(p->loop, &p->out.io);
    ev_io_start(p->loop, &p->err.io);
    if (p->ctl.fd >= 0) {
        set_nonblock(p->ctl.fd);
        ev_io_init(&p->ctl.io, stream_cb, p->ctl.fd, EV_READ);
        p->ctl.io.data = &p->ctl;
        ev_io_start(p->loop, &p->ctl.io);
    }
    ev_init(&p->grace, grace_cb);
    p->grace.data = p;
    ev_init(&p->drain, drain_cb);
    p->drain.data = p;
    ev_init(&p->deadline, deadline_cb);
    p->deadline.data = p;
    if (p->deferred) {
        return; /* stdin open, no deadline: relay_proc_activate */
    }
    if (p->timeout_s > 0) {
        /* The spawning task may have run long outside the loop: the
         * deadline counts from now, not from the loop's last wake-up. */
        ev_now_update(p->loop);
        ev_timer_set(&p->deadline, p->timeout_s, 0.);
        ev_timer_start(p->loop, &p->deadline);
    }
    if (p->in_len > 0 && p->rep.start_errno == 0) {
        stdin_write(p);
    } else {
        close_stdin(p);
    }
}


/* Starts the child. vfork where the child has nothing to wait for before
 * its exec: fork copied the page tables of this process (the daemon's or
 * `relay app invoke`'s, with LuaJIT's heap), and every page it wrote while
 * the child lived became a copy-on-write fault (~220 per `relay app
 * invoke`). A cgroup write can wait a kernel grace period, which would
 * stop the loop for as long, and glibc's setuid and setgid signal every
 * thread of the process, whose list vfork shares: such children fork.
 * Every signal is blocked meanwhile: a handler of ours must not run in the
 * vfork child, on our memory (child_exec resets them, then the mask).
 * noinline: the child's stack frames lie below this function's, which
 * the child never returns to. */
static pid_t __attribute__((noinline)) start_child(const relay_proc_opts *o, const char *path, const int std[3],
                                                   const int *fds, size_t n_fds, int errfd, pid_t parent)
{
    sigset_t all, old;
    pid_t pid;

    if ((o->cgroup_procs != NULL && o->cgroup_procs[0] != NULL) || o->set_ids) {
        pid = fork();
        if (pid == 0) {
            child_exec(o, path, std, fds, n_fds, errfd, parent);
        }
        return pid;
    }
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = vfork();
    if (pid == 0) {
        child_exec(o, path, std, fds, n_fds, errfd, parent);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return pid;
}


/* The descriptors the child gets from fd 3 on: pass_fds, then its end of
 * the control socket. Returns how many. */
static size_t
child_fd_list(const relay_proc_opts *o, int ctl_child, int fds[MAX_PASS_FDS + 1])
{
    size_t n;

    for (n = 0; n < o->n_pass_fds; n++) {
        fds[n] = o->pass_fds[n];
    }
    if (ctl_child >= 0) {
        fds[n++] = ctl_child;
    }
    return n;
}


relay_proc *
relay_proc_spawn(struct ev_loop *loop, const relay_proc_opts *o, char *err, size_t errlen)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1}, ep[2] = {-1, -1}, ctl[2] = {-1, -1};
    int fds[MAX_PASS_FDS + 1];
    size_t n_fds;
    char path[4096];
    relay_proc *p;
    pid_t parent;

    if (o->argv == NULL || o->argv[0] == NULL || o->n_pass_fds > MAX_PASS_FDS) {
        snprintf(err, errlen, o->argv == NULL || o->argv[0] == NULL ? "empty argv" : "too many pass_fds");
        return NULL;
    }
    p = proc_alloc(loop, o);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    resolve_path(o->argv[0], o->envp, path, sizeof path);
    if (make_pipe(in) != 0 || make_pipe(out) != 0 || make_pipe(errp) != 0 || make_pipe(ep) != 0
        || (o->control && make_socketpair(ctl) != 0)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto fail;
    }
    n_fds = child_fd_list(o, ctl[1], fds);
    clock_gettime(CLOCK_MONOTONIC, &p->t0);
    parent = getpid();
    p->pid = start_child(o, path, (const int[3]){in[0], out[1], errp[1]}, fds, n_fds, ep[1], parent);
    if (p->pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto fail;
    }
    close(in[0]);
    close(out[1]);
    close(errp[1]);
    close(ep[1]);
    if (ctl[1] >= 0) {
        close(ctl[1]);
    }
    p->in_fd = in[1];
    p->out.fd = out[0];
    p->err.fd = errp[0];
    p->ctl.fd = ctl[0];
    parent_setup(p, o, ep[0]);
    close(ep[0]);
    live_procs++;
    return p;

fail:
    close_pair(in);
    close_pair(out);
    close_pair(errp);
    close_pair(ep);
    close_pair(ctl);
    proc_release(p);
    return NULL;
}


/* ---- control ---- */

pid_t
relay_proc_pid(const relay_proc *p)
{
    return p->pid;
}


int
relay_proc_done(const relay_proc *p)
{
    return p->done;
}


const relay_proc_report *
relay_proc_report_get(const relay_proc *p)
{
    return &p->rep;
}


int
relay_proc_kill(relay_proc *p, int sig)
{
    if (p->reaped) {
        return -1;
    }
    return kill(-p->pid, sig) == 0 ? 0 : -1;
}


void
relay_proc_terminate(relay_proc *p)
{
    if (p->reaped || p->term_sent) {
        return;
    }
    ev_timer_stop(p->loop, &p->deadline);
    deadline_cb(p->loop, &p->deadline, EV_TIMER);
}


/* The whole record or nothing: a socket pair's buffer takes a bounded
 * record at once, and a partial one would leave the init waiting. */
static int
send_start(int fd, const char *start, size_t len)
{
    ssize_t n;

    do {
        n = send(fd, start, len, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)len) {
        errno = n < 0 ? errno : EMSGSIZE;
        return -1;
    }
    return 0;
}


int
relay_proc_activate(relay_proc *p, const char *start, size_t start_len, const char *stdin_data, size_t stdin_len,
                    double timeout_s, double grace_s)
{
    if (!p->deferred || p->reaped || p->ctl.fd < 0 || p->in_fd < 0) {
        errno = ESRCH;
        return -1;
    }
    /* before the record: once it is sent the handler runs, and must get
     * its whole stdin */
    if (stdin_len > 0 && (p->in_data = malloc(stdin_len)) == NULL) {
        return -1;
    }
    if (send_start(p->ctl.fd, start, start_len) != 0) {
        free(p->in_data);
        p->in_data = NULL;
        return -1;
    }
    if (stdin_len > 0) {
        memcpy(p->in_data, stdin_data, stdin_len);
    }
    p->deferred = 0;
    clock_gettime(CLOCK_MONOTONIC, &p->t0);
    p->in_len = stdin_len;
    p->in_off = 0;
    p->timeout_s = timeout_s;
    p->grace_s = grace_s > 0 ? grace_s : p->grace_s;
    if (timeout_s > 0) {
        ev_now_update(p->loop);
        ev_timer_set(&p->deadline, timeout_s, 0.);
        ev_timer_start(p->loop, &p->deadline);
    }
    if (p->in_len > 0) {
        stdin_write(p);
    } else {
        close_stdin(p);
    }
    return 0;
}


void
relay_proc_close_control(relay_proc *p)
{
    if (p->ctl.fd >= 0) {
        stream_close(p, &p->ctl);
    }
}


void
relay_proc_free(relay_proc *p)
{
    int st;

    if (p == NULL) {
        return;
    }
    if (p->in_done_cb) {
        p->free_pending = 1;
        return;
    }
    if (!p->reaped) {
        /* no hook here: this may run at shutdown, with no loop to run it */
        kill(-p->pid, SIGKILL);
        /* SIGKILL makes this wait short; it prevents a zombie at shutdown */
        while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
        }
    }
    stop_all(p);
    close_stdin(p);
    if (p->out.fd >= 0)
        close(p->out.fd);
    if (p->err.fd >= 0)
        close(p->err.fd);
    if (p->ctl.fd >= 0)
        close(p->ctl.fd);
    live_procs--;
    proc_release(p);
}


int
relay_proc_live_count(void)
{
    return live_procs;
}


/* ---- the cgroup warm-up (relay_proc_cgroup_warm) ---- */

struct cgroup_warm {
    char path[4096];
};


static void *
cgroup_warm_thread(void *arg)
{
    struct cgroup_warm *w = arg;
    char pid[24];
    int len = snprintf(pid, sizeof pid, "%ld", (long)getpid());
    int fd = open(w->path, O_WRONLY | O_CLOEXEC);

    if (fd >= 0) {
        ssize_t n = write(fd, pid, (size_t)len);

        (void)n; /* best effort: a failed write only loses the head start */
        close(fd);
    }
    free(w);
    return NULL;
}


int
relay_proc_cgroup_warm(const char *procs_path, char *err, size_t errlen)
{
    struct cgroup_warm *w = malloc(sizeof(*w));
    sigset_t all, old;
    pthread_attr_t attr;
    pthread_t thread;
    int rc;

    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if ((size_t)snprintf(w->path, sizeof w->path, "%s", procs_path) >= sizeof w->path) {
        free(w);
        snprintf(err, errlen, "path too long");
        return -1;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* the thread blocks every signal (it inherits the mask): signals stay
     * the main thread's, where the loop handles them */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&thread, &attr, cgroup_warm_thread, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(w);
        snprintf(err, errlen, "thread: %s", strerror(rc));
        return -1;
    }
    return 0;
}
