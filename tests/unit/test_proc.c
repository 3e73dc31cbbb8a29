/* Process supervision: exit codes, signals, stdin, line splitting, floods,
 * the TERM -> KILL deadline on a whole group, start errors, the control
 * socket, deferred (warm) starts, no zombies. */
#include "relay/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

struct line {
    int stream;
    int partial;
    char *bytes;
    size_t len;
};

struct run {
    relay_proc_report rep;
    int done;
    struct line lines[64];
    int nlines;
    size_t total[4]; /* bytes per stream */
    size_t pieces[4];
    size_t max_piece;
    int hooks_term, hooks_kill;
};


static void
on_line(void *ud, int stream, const char *bytes, size_t len, int partial)
{
    struct run *r = ud;

    r->total[stream] += len;
    r->pieces[stream]++;
    if (len > r->max_piece) {
        r->max_piece = len;
    }
    if (r->nlines < 64) {
        struct line *l = &r->lines[r->nlines++];

        l->stream = stream;
        l->partial = partial;
        l->len = len;
        l->bytes = malloc(len + 1);
        memcpy(l->bytes, bytes, len);
        l->bytes[len] = '\0';
    }
}


static void
on_done(void *ud, relay_proc *p, const relay_proc_report *rep)
{
    struct run *r = ud;

    r->rep = *rep;
    r->done = 1;
    relay_proc_free(p); /* freeing from inside the callback is allowed */
}


static void
on_hook(void *ud, relay_proc *p, int which)
{
    struct run *r = ud;

    (void)p;
    if (which == SIGTERM) {
        r->hooks_term++;
    } else {
        r->hooks_kill++;
    }
}


static void
run_free(struct run *r)
{
    int i;

    for (i = 0; i < r->nlines; i++) {
        free(r->lines[i].bytes);
    }
}


/* Runs argv to completion with the given options template. */
static int
run(struct run *r, const char *const *argv, relay_proc_opts *o)
{
    struct ev_loop *loop = ev_default_loop(0);
    char err[256];
    relay_proc *p;

    memset(r, 0, sizeof *r);
    o->argv = argv;
    o->on_line = on_line;
    o->on_done = on_done;
    o->on_hook = on_hook;
    o->ud = r;
    p = relay_proc_spawn(loop, o, err, sizeof err);
    if (p == NULL) {
        fprintf(stderr, "spawn: %s\n", err);
        return -1;
    }
    while (!r->done) {
        ev_run(loop, EVRUN_ONCE);
    }
    return 0;
}


static long
rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;

    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kb;
}


/* A pid is gone when it no longer exists or is a zombie we do not own. */
static int
pid_gone(pid_t pid)
{
    char path[64], buf[512];
    FILE *f;
    int i;
    char *rp;

    for (i = 0; i < 100; i++) {
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        if (f == NULL) {
            return 1;
        }
        buf[0] = '\0';
        if (fgets(buf, sizeof buf, f) == NULL) {
            buf[0] = '\0';
        }
        fclose(f);
        rp = strrchr(buf, ')');
        if (rp != NULL && rp[2] == 'Z') {
            return 1;
        }
        usleep(10000);
    }
    return 0;
}


static void
test_exit_and_signal(void)
{
    static const char *const exit3[] = {"sh", "-c", "exit 3", NULL};
    static const char *const sig9[] = {"sh", "-c", "kill -9 $$", NULL};
    relay_proc_opts o;
    struct run r;

    memset(&o, 0, sizeof o);
    CHECK(run(&r, exit3, &o) == 0);
    CHECK(r.rep.exited && r.rep.status == 3 && r.rep.signal == 0 && !r.rep.timed_out);
    CHECK(r.rep.start_errno == 0);
    run_free(&r);

    memset(&o, 0, sizeof o);
    CHECK(run(&r, sig9, &o) == 0);
    CHECK(!r.rep.exited && r.rep.signal == 9);
    run_free(&r);
}


static void
test_lines(void)
{
    static const char *const argv[] = {"sh", "-c", "printf 'a\\nbb\\n\\nccc'; printf 'err1\\n' >&2", NULL};
    static const char *const longl[] = {"sh", "-c", "printf '%040d\\n' 0", NULL};
    relay_proc_opts o;
    struct run r;
    int i, out = 0;

    memset(&o, 0, sizeof o);
    CHECK(run(&r, argv, &o) == 0);
    for (i = 0; i < r.nlines; i++) {
        struct line *l = &r.lines[i];

        if (l->stream == RELAY_PROC_STDERR) {
            CHECK_STR(l->bytes, "err1");
            CHECK(!l->partial);
            continue;
        }
        switch (out++) {
        case 0:
            CHECK_STR(l->bytes, "a");
            CHECK(!l->partial);
            break;
        case 1:
            CHECK_STR(l->bytes, "bb");
            CHECK(!l->partial);
            break;
        case 2:
            CHECK_STR(l->bytes, "");
            CHECK(!l->partial);
            break;
        case 3:
            CHECK_STR(l->bytes, "ccc");
            CHECK(l->partial);
            break;
        default:
            CHECK(0);
        }
    }
    CHECK(out == 4 && r.nlines == 5);
    run_free(&r);

    /* a 40-byte line through a 16-byte buffer: 16p 16p 8 */
    memset(&o, 0, sizeof o);
    o.line_max = 16;
    CHECK(run(&r, longl, &o) == 0);
    CHECK(r.nlines == 3);
    CHECK(r.lines[0].len == 16 && r.lines[0].partial);
    CHECK(r.lines[1].len == 16 && r.lines[1].partial);
    CHECK(r.lines[2].len == 8 && !r.lines[2].partial);
    run_free(&r);
}


static void
test_stdin(void)
{
    static const char *const wc[] = {"wc", "-c", NULL};
    static const char *const nord[] = {"sh", "-c", "sleep 0.1; exit 0", NULL};
    size_t n = 8u << 20;
    char *big = malloc(n);
    relay_proc_opts o;
    struct run r;

    memset(big, 'x', n);
    memset(&o, 0, sizeof o);
    o.stdin_data = big;
    o.stdin_len = n;
    CHECK(run(&r, wc, &o) == 0);
    CHECK(r.rep.exited && r.rep.status == 0);
    CHECK(r.nlines == 1 && r.nlines > 0 && strtoul(r.lines[0].bytes, NULL, 10) == n);
    run_free(&r);

    /* a child that never reads: EPIPE, no SIGPIPE, no hang */
    memset(&o, 0, sizeof o);
    o.stdin_data = big;
    o.stdin_len = n;
    CHECK(run(&r, nord, &o) == 0);
    CHECK(r.rep.exited && r.rep.status == 0);
    run_free(&r);
    free(big);
}


static void
test_flood(void)
{
    static const char *const flood[] = {"sh", "-c", "head -c 200000000 /dev/zero; yes | head -c 50000000 >&2", NULL};
    relay_proc_opts o;
    struct run r;
    long before, after;

    memset(&o, 0, sizeof o);
    before = rss_kb();
    CHECK(run(&r, flood, &o) == 0);
    after = rss_kb();
    CHECK(r.rep.exited && r.rep.status == 0);
    CHECK(r.total[RELAY_PROC_STDOUT] == 200000000u);
    CHECK(r.total[RELAY_PROC_STDERR] == 25000000u); /* "y\n": the newlines are not bytes of lines */
    CHECK(r.max_piece <= RELAY_PROC_LINE_MAX);
    CHECK(after - before < 16384); /* 250 MB went through; ASan adds shadow pages */
    printf("flood: rss %ld -> %ld kB, %zu stdout pieces\n", before, after, r.pieces[RELAY_PROC_STDOUT]);
    run_free(&r);
}


static void
test_timeout_group(void)
{
    /* the whole group ignores TERM: only the KILL step ends it */
    static const char *const stubborn[] = {"sh", "-c", "trap '' TERM; sleep 30 & echo $!; wait", NULL};
    /* the leader exits on TERM, its child would survive a leader-only kill */
    static const char *const leader[] = {"sh", "-c", "(trap '' TERM; sleep 30) & echo $!; wait", NULL};
    relay_proc_opts o;
    struct run r;
    pid_t bg;

    memset(&o, 0, sizeof o);
    o.timeout_s = 0.3;
    o.grace_s = 0.3;
    CHECK(run(&r, stubborn, &o) == 0);
    CHECK(r.rep.timed_out && r.rep.signal == SIGKILL);
    CHECK(r.hooks_term == 1 && r.hooks_kill == 1);
    CHECK(r.rep.duration_ms >= 550 && r.rep.duration_ms < 3000);
    CHECK(r.nlines >= 1);
    bg = r.nlines >= 1 ? (pid_t)atoi(r.lines[0].bytes) : 0;
    CHECK(bg > 0 && pid_gone(bg));
    run_free(&r);

    /* the KILL hook gets kill_delay_s to end it before the group SIGKILL */
    memset(&o, 0, sizeof o);
    o.timeout_s = 0.2;
    o.grace_s = 0.2;
    o.kill_delay_s = 0.4;
    CHECK(run(&r, stubborn, &o) == 0);
    CHECK(r.rep.timed_out && r.rep.signal == SIGKILL && r.hooks_kill == 1);
    CHECK(r.rep.duration_ms >= 750);
    run_free(&r);

    memset(&o, 0, sizeof o);
    o.timeout_s = 0.3;
    o.grace_s = 5;
    CHECK(run(&r, leader, &o) == 0);
    CHECK(r.rep.timed_out && r.rep.signal == SIGTERM);
    CHECK(r.hooks_term == 1 && r.hooks_kill == 0);
    CHECK(r.rep.duration_ms < 2000); /* reaped at TERM; the leftover was killed with the group */
    bg = r.nlines >= 1 ? (pid_t)atoi(r.lines[0].bytes) : 0;
    CHECK(bg > 0 && pid_gone(bg));
    run_free(&r);
}


static void
test_drain(void)
{
    /* keep_group: a background job holds stdout after the leader exits */
    static const char *const argv[] = {"sh", "-c", "sleep 5 & echo $!; exit 4", NULL};
    relay_proc_opts o;
    struct run r;
    pid_t bg;

    memset(&o, 0, sizeof o);
    o.keep_group = 1;
    o.drain_s = 0.2;
    CHECK(run(&r, argv, &o) == 0);
    CHECK(r.rep.exited && r.rep.status == 4);
    CHECK(r.rep.duration_ms < 1500);
    bg = r.nlines >= 1 ? (pid_t)atoi(r.lines[0].bytes) : 0;
    CHECK(bg > 0 && kill(bg, 0) == 0); /* keep_group: left alone */
    if (bg > 0) {
        kill(bg, SIGKILL);
    }
    run_free(&r);
}


static void
test_start_errors(void)
{
    static const char *const missing[] = {"/nonexistent/cmd", NULL};
    static const char *const unknown[] = {"relay-no-such-command-xyz", NULL};
    static const char *const pwd[] = {"pwd", NULL};
    static const char *const envv[] = {"env", NULL};
    static const char *const envp[] = {"FOO=bar", "PATH=/usr/bin:/bin", NULL};
    static const char *const cg[] = {"/nonexistent/cgroup.procs", NULL};
    relay_proc_opts o;
    struct run r;

    memset(&o, 0, sizeof o);
    CHECK(run(&r, missing, &o) == 0);
    CHECK(r.rep.start_errno == ENOENT);
    CHECK(strstr(r.rep.start_error, "exec /nonexistent/cmd") != NULL);
    run_free(&r);

    memset(&o, 0, sizeof o);
    CHECK(run(&r, unknown, &o) == 0);
    CHECK(r.rep.start_errno == ENOENT);
    run_free(&r);

    memset(&o, 0, sizeof o);
    o.cwd = "/nonexistent-dir";
    CHECK(run(&r, pwd, &o) == 0);
    CHECK(r.rep.start_errno == ENOENT && strncmp(r.rep.start_error, "chdir", 5) == 0);
    run_free(&r);

    memset(&o, 0, sizeof o);
    o.cgroup_procs = cg;
    CHECK(run(&r, pwd, &o) == 0);
    CHECK(r.rep.start_errno != 0 && strncmp(r.rep.start_error, "join cgroup", 11) == 0);
    run_free(&r);

    memset(&o, 0, sizeof o);
    o.cwd = "/tmp";
    CHECK(run(&r, pwd, &o) == 0);
    CHECK(r.nlines == 1 && strcmp(r.lines[0].bytes, "/tmp") == 0);
    run_free(&r);

    memset(&o, 0, sizeof o);
    o.envp = envp;
    CHECK(run(&r, envv, &o) == 0);
    CHECK(r.nlines == 2 && strcmp(r.lines[0].bytes, "FOO=bar") == 0);
    run_free(&r);
}


/* A `sleep 30` child whose completion lands in r; the caller ends it. */
static relay_proc *
spawn_sleeper(struct run *r)
{
    static const char *const slp[] = {"sleep", "30", NULL};
    relay_proc_opts o;
    relay_proc *p;
    char err[256];

    memset(&o, 0, sizeof o);
    memset(r, 0, sizeof *r);
    o.argv = slp;
    o.on_done = on_done;
    o.ud = r;
    p = relay_proc_spawn(ev_default_loop(0), &o, err, sizeof err);
    CHECK(p != NULL);
    return p;
}


static void
test_terminate_and_free(void)
{
    struct ev_loop *loop = ev_default_loop(0);
    relay_proc *p;
    struct run r;
    pid_t pid;
    int i;

    p = spawn_sleeper(&r);
    for (i = 0; i < 5; i++) {
        ev_run(loop, EVRUN_NOWAIT);
    }
    relay_proc_terminate(p);
    while (!r.done) {
        ev_run(loop, EVRUN_ONCE);
    }
    CHECK(r.rep.timed_out && r.rep.signal == SIGTERM);

    /* freeing a running child kills and reaps it at once */
    p = spawn_sleeper(&r);
    pid = relay_proc_pid(p);
    relay_proc_free(p);
    CHECK(kill(pid, 0) != 0 && errno == ESRCH);
    CHECK(!r.done);
}


/* The control socket: the child's descriptor after its pass_fds; its lines
 * come as RELAY_PROC_CONTROL, never as output; and it is closed when the
 * proc is done, which a process still holding the other end sees. */
static void
test_control(void)
{
    static const char *const rec[] = {"sh", "-c", "echo out; echo 'exit 7' >&4; exit 7", NULL};
    static const char *const watch[] = {"sh", "-c", "(exec >/dev/null 2>&1; cat <&3; echo closed >\"$0\") & exit 0",
                                        NULL, NULL};
    char marker[] = "/tmp/relay-test-control-XXXXXX";
    struct stat st;
    relay_proc_opts o;
    struct run r;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC), fd, i;
    const char *argv[5];

    memset(&o, 0, sizeof o);
    o.pass_fds = &devnull;
    o.n_pass_fds = 1;
    o.control = 1;
    CHECK(run(&r, rec, &o) == 0);
    CHECK(r.rep.exited && r.rep.status == 7);
    CHECK(r.nlines == 2);
    for (i = 0; i < r.nlines; i++) {
        if (r.lines[i].stream == RELAY_PROC_CONTROL) {
            CHECK(strcmp(r.lines[i].bytes, "exit 7") == 0 && !r.lines[i].partial);
        } else {
            CHECK(r.lines[i].stream == RELAY_PROC_STDOUT && strcmp(r.lines[i].bytes, "out") == 0);
        }
    }
    run_free(&r);
    close(devnull);

    fd = mkstemp(marker);
    CHECK(fd >= 0);
    close(fd);
    unlink(marker);
    memcpy(argv, watch, sizeof watch);
    argv[3] = marker;
    memset(&o, 0, sizeof o);
    o.control = 1;
    o.keep_group = 1;
    CHECK(run(&r, argv, &o) == 0);
    for (i = 0; i < 500 && stat(marker, &st) != 0; i++) {
        usleep(10000);
    }
    CHECK(i < 500);
    unlink(marker);
    run_free(&r);
}


/* A deferred child: stdin stays open and no deadline runs until the
 * activation, which sends the start record on the control socket first;
 * closing the control socket instead ends a child waiting on it. */
static void
test_deferred(void)
{
    static const char *const argv[] = {"sh", "-c", "head -c 5 <&3; echo; cat", NULL};
    static const char *const waiter[] = {"sh", "-c", "cat <&3 >/dev/null; exit 3", NULL};
    struct ev_loop *loop = ev_default_loop(0);
    relay_proc_opts o;
    struct run r;
    relay_proc *p;
    char err[256];
    int i;

    memset(&o, 0, sizeof o);
    memset(&r, 0, sizeof r);
    o.argv = argv;
    o.control = 1;
    o.deferred = 1;
    o.timeout_s = 0.01; /* ignored: the deadline is the activation's */
    o.on_line = on_line;
    o.on_done = on_done;
    o.ud = &r;
    p = relay_proc_spawn(loop, &o, err, sizeof err);
    CHECK(p != NULL);
    for (i = 0; i < 20; i++) {
        usleep(5000);
        ev_run(loop, EVRUN_NOWAIT);
    }
    CHECK(!r.done && r.nlines == 0);
    CHECK(relay_proc_activate(p, "hello", 5, "the event\n", 10, 10.0, 1.0) == 0);
    CHECK(relay_proc_activate(p, "again", 5, NULL, 0, 10.0, 1.0) != 0);
    while (!r.done) {
        ev_run(loop, EVRUN_ONCE);
    }
    CHECK(r.rep.exited && r.rep.status == 0 && !r.rep.timed_out);
    CHECK(r.nlines == 2 && strcmp(r.lines[0].bytes, "hello") == 0 && strcmp(r.lines[1].bytes, "the event") == 0);
    run_free(&r);

    memset(&r, 0, sizeof r);
    o.argv = waiter;
    p = relay_proc_spawn(loop, &o, err, sizeof err);
    CHECK(p != NULL);
    relay_proc_close_control(p);
    while (!r.done) {
        ev_run(loop, EVRUN_ONCE);
    }
    CHECK(r.rep.exited && r.rep.status == 3);
    run_free(&r);
}


/* A child that joins no cgroup and keeps our ids starts by vfork: our pages
 * stay ours, so writing them while it lives is no copy-on-write fault
 * (after a fork every page written was one, ~220 per `relay app invoke`). */
static void
test_no_copy_on_write(void)
{
    enum { PAGES = 1024 };
    size_t len = (size_t)PAGES * (size_t)sysconf(_SC_PAGESIZE);
    char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct rusage before, after;
    relay_proc *p;
    struct run r;

    CHECK(mem != MAP_FAILED);
    madvise(mem, len, MADV_NOHUGEPAGE); /* one fault per page, not per huge page */
    memset(mem, 1, len);
    p = spawn_sleeper(&r);
    getrusage(RUSAGE_SELF, &before);
    memset(mem, 2, len);
    getrusage(RUSAGE_SELF, &after);
    /* valgrind runs a vfork as a fork (scripts/test says when it is the host) */
    if (getenv("RELAY_UNDER_VALGRIND") == NULL) {
        CHECK(after.ru_minflt - before.ru_minflt < PAGES / 2);
    } else {
        printf("copy-on-write faults not checked under valgrind: %ld\n", after.ru_minflt - before.ru_minflt);
    }
    relay_proc_free(p);
    munmap(mem, len);
}


int
main(void)
{
    int st;

    signal(SIGPIPE, SIG_IGN);
    ev_default_loop(0);
    test_exit_and_signal();
    test_lines();
    test_stdin();
    test_flood();
    test_timeout_group();
    test_drain();
    test_start_errors();
    test_terminate_and_free();
    test_control();
    test_deferred();
    test_no_copy_on_write();
    CHECK(relay_proc_live_count() == 0);
    /* no zombies: every child we forked was reaped */
    CHECK(waitpid(-1, &st, WNOHANG) < 0 && errno == ECHILD);
    CHECK_DONE();
}
