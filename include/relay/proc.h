/*
 * Child-process supervision on the libev default loop.
 *
 * One relay_proc is one child (a container runtime, usually) in its own
 * process group, with three pipes. Its stdin is written without blocking the
 * loop and then closed; stdout and stderr are split into lines through a
 * fixed per-stream buffer, so a flood never grows memory; a deadline sends
 * SIGTERM to the group, then SIGKILL after a grace period, with optional
 * driver hooks (for example `runc kill`) called at both steps.
 *
 * Completion is reported once: after the child was reaped AND both output
 * pipes reached EOF, or were force-closed a bounded time after the exit (an
 * escaped grandchild can hold them open). The child is reaped through an
 * ev_child watcher started right after fork (before anything can reap it); this code never
 * calls waitpid(-1).
 *
 * With `control`, the child also gets one end of a socket pair as the
 * descriptor after its pass_fds; the other end stays here (close-on-exec),
 * its lines are reported as stream RELAY_PROC_CONTROL, and it is closed when
 * the proc is done or freed. A supervisor inside a container (relay-init)
 * reports its child's status on it, and its end of file tells that
 * supervisor this process is gone, however it died.
 *
 * Callers must ignore SIGPIPE process-wide (a handler that never reads its
 * stdin makes our write fail with EPIPE, which is fine); the child gets the
 * default disposition back before exec.
 */
#ifndef RELAY_PROC_H
#define RELAY_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <ev.h>

enum { RELAY_PROC_STDOUT = 1, RELAY_PROC_STDERR = 2, RELAY_PROC_CONTROL = 3 };

/* Default per-stream line buffer: a longer line is emitted in pieces. */
#define RELAY_PROC_LINE_MAX (64 * 1024)
/* The control stream's line buffer: its records are one short line. */
#define RELAY_PROC_CONTROL_LINE_MAX 256

typedef struct relay_proc relay_proc;

typedef struct relay_proc_report {
    int exited;            /* 1: exited normally, status is valid */
    int status;            /* exit status */
    int signal;            /* terminating signal, 0 if none */
    int timed_out;         /* the deadline passed and the group was signalled */
    int start_errno;       /* != 0: the child could not be started (exec, chdir, ...) */
    char start_error[256]; /* e.g. "exec runc: No such file or directory" */
    int64_t duration_ms;   /* spawn to completion, monotonic */
} relay_proc_report;

/* One line (without its '\n') or one piece of a line. partial is 1 when the
 * bytes are not terminated by a newline: a piece of an over-long line, or an
 * unterminated last line. Writing bytes plus "\n" unless partial reproduces
 * the stream exactly. */
typedef void (*relay_proc_line_fn)(void *ud, int stream, const char *bytes, size_t len, int partial);

/* Called exactly once, from a loop callback, unless relay_proc_free() came
 * first. The proc stays valid (free it afterwards, or from inside). */
typedef void (*relay_proc_done_fn)(void *ud, relay_proc *p, const relay_proc_report *r);

/* Driver hook at the TERM (which = SIGTERM) and KILL (which = SIGKILL) steps. */
typedef void (*relay_proc_hook_fn)(void *ud, relay_proc *p, int which);

typedef struct relay_proc_opts {
    const char *const *argv; /* argv[0] is searched in PATH if it has no '/' */
    const char *const *envp; /* NULL: inherit ours */
    const char *cwd;         /* NULL: ours */
    const char *stdin_data;  /* copied; NULL/0: stdin is closed at once */
    size_t stdin_len;
    double timeout_s;                /* <= 0: no deadline */
    double grace_s;                  /* TERM -> KILL; <= 0 means 2 s */
    double drain_s;                  /* after the reap, wait this long for EOF; <= 0 means 2 s */
    double kill_delay_s;             /* with a hook: time the KILL hook gets before the group is SIGKILLed */
    size_t line_max;                 /* 0: RELAY_PROC_LINE_MAX */
    int keep_group;                  /* 0: SIGKILL what is left of the group once the child is reaped */
    const char *const *cgroup_procs; /* NULL-terminated cgroup.procs files the child joins before exec */
    /* Applied in the child after joining the cgroups, in this order, so a
     * root daemon can place the child and then drop its identity. */
    const int *pass_fds; /* these descriptors become fds 3, 4, ... of the child */
    size_t n_pass_fds;
    int control; /* 1: a control socket, the child's fd 3 + n_pass_fds (see above) */
    long nofile; /* > 0: RLIMIT_NOFILE soft and hard */
    int no_core; /* 1: RLIMIT_CORE 0 */
    int set_ids; /* 1: setgroups({}), setgid(gid), setuid(uid) before exec */
    long uid, gid;
    int die_with_parent; /* 1: the kernel SIGKILLs the child when this process ends */
    /* 1: a warm start. stdin stays open and empty, no deadline runs, and the
     * duration is counted, until relay_proc_activate (stdin_data and
     * timeout_s are then ignored here). */
    int deferred;
    relay_proc_line_fn on_line;
    relay_proc_done_fn on_done;
    relay_proc_hook_fn on_hook;
    void *ud;
} relay_proc_opts;

/* Starts the child. Returns NULL with a message in err on a host failure
 * (pipe, fork); a failure of exec in the child is reported through the
 * completion (start_errno, start_error) instead. loop must be the default loop. */
relay_proc *relay_proc_spawn(struct ev_loop *loop, const relay_proc_opts *o, char *err, size_t errlen);

pid_t relay_proc_pid(const relay_proc *p);
int relay_proc_done(const relay_proc *p);
const relay_proc_report *relay_proc_report_get(const relay_proc *p);

/* Sends sig to the child's process group. Returns 0, or -1 if it is gone. */
int relay_proc_kill(relay_proc *p, int sig);

/* Starts the deadline sequence now (TERM, grace, KILL), as if the timeout
 * had passed; timed_out is then reported. */
void relay_proc_terminate(relay_proc *p);

/* Activates a deferred proc: writes start (the start record, at most the
 * socket's buffer: it is written without waiting) on the control socket,
 * then stdin, and arms the deadline from now; the duration counts from
 * now too. Returns 0, or -1 (errno) when the proc is not a deferred one
 * still waiting, has no control socket, or the record could not be sent. */
int relay_proc_activate(relay_proc *p, const char *start, size_t start_len, const char *stdin_data, size_t stdin_len,
                        double timeout_s, double grace_s);

/* Closes our end of the control socket now: a supervisor waiting on it (a
 * warm relay-init) sees the end of file and exits. */
void relay_proc_close_control(relay_proc *p);

/* Frees a finished proc. A running one has its group SIGKILLed (no hook: this
 * may run at shutdown), is reaped synchronously and freed, without its done
 * callback. May be called from inside on_done, not from on_line or on_hook. */
void relay_proc_free(relay_proc *p);

/* Live procs (spawned, not yet freed): for tests and metrics. */
int relay_proc_live_count(void);

/* Writes this process's pid to procs_path (a cgroup.procs file of the
 * cgroup it is in: a move to where it is) from a thread of its own, which
 * blocks no signal handling and ends after the write. A cgroup.procs write
 * may wait a kernel grace period: the caller goes on meanwhile, and a later
 * write (runc's) finds it paid. Best effort: 0, or -1 with err filled when
 * the thread could not start. */
int relay_proc_cgroup_warm(const char *procs_path, char *err, size_t errlen);

#endif
