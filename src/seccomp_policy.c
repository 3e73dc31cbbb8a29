/*
 * The default seccomp policy of handler containers (include/relay/seccomp_policy.h).
 *
 * The allowlist follows the documented moby default profile for a container
 * without capabilities, minus what Relay refuses on top of it: io_uring (a
 * steady source of kernel bugs), name_to_handle_at, clock and time setting,
 * ptrace and its relatives. Calls of x86 and x32 are listed beside the
 * x86_64 ones because the filter covers all three ABIs of an x86_64 host: a
 * 32-bit binary in an image must not find the door the 64-bit one lacks.
 */
#include "relay/seccomp_policy.h"

#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>

/* CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID and NEWNET.
 * CLONE_NEWTIME needs no bit here: it lies inside clone's exit-signal byte,
 * so only clone3 and unshare can ask for it, and both are refused. */
#define CLONE_NS_FLAGS UINT64_C(0x7E020000)

/* clang-format off: one family of calls per line */
static const char *const ALLOW_NAMES[] = {"accept",
                                          "accept4",
                                          "access",
                                          "alarm",
                                          "arch_prctl",
                                          "bind",
                                          "brk",
                                          "cachestat",
                                          "capget",
                                          "capset",
                                          "chdir",
                                          "chmod",
                                          "chown",
                                          "chown32",
                                          "clock_getres",
                                          "clock_getres_time64",
                                          "clock_gettime",
                                          "clock_gettime64",
                                          "clock_nanosleep",
                                          "clock_nanosleep_time64",
                                          "close",
                                          "close_range",
                                          "connect",
                                          "copy_file_range",
                                          "creat",
                                          "dup",
                                          "dup2",
                                          "dup3",
                                          "epoll_create",
                                          "epoll_create1",
                                          "epoll_ctl",
                                          "epoll_ctl_old",
                                          "epoll_pwait",
                                          "epoll_pwait2",
                                          "epoll_wait",
                                          "epoll_wait_old",
                                          "eventfd",
                                          "eventfd2",
                                          "execve",
                                          "execveat",
                                          "exit",
                                          "exit_group",
                                          "faccessat",
                                          "faccessat2",
                                          "fadvise64",
                                          "fadvise64_64",
                                          "fallocate",
                                          "fanotify_mark",
                                          "fchdir",
                                          "fchmod",
                                          "fchmodat",
                                          "fchmodat2",
                                          "fchown",
                                          "fchown32",
                                          "fchownat",
                                          "fcntl",
                                          "fcntl64",
                                          "fdatasync",
                                          "fgetxattr",
                                          "flistxattr",
                                          "flock",
                                          "fork",
                                          "fremovexattr",
                                          "fsetxattr",
                                          "fstat",
                                          "fstat64",
                                          "fstatat64",
                                          "fstatfs",
                                          "fstatfs64",
                                          "fsync",
                                          "ftruncate",
                                          "ftruncate64",
                                          "futex",
                                          "futex_requeue",
                                          "futex_time64",
                                          "futex_wait",
                                          "futex_waitv",
                                          "futex_wake",
                                          "futimesat",
                                          "get_robust_list",
                                          "get_thread_area",
                                          "getcpu",
                                          "getcwd",
                                          "getdents",
                                          "getdents64",
                                          "getegid",
                                          "getegid32",
                                          "geteuid",
                                          "geteuid32",
                                          "getgid",
                                          "getgid32",
                                          "getgroups",
                                          "getgroups32",
                                          "getitimer",
                                          "getpeername",
                                          "getpgid",
                                          "getpgrp",
                                          "getpid",
                                          "getppid",
                                          "getpriority",
                                          "getrandom",
                                          "getresgid",
                                          "getresgid32",
                                          "getresuid",
                                          "getresuid32",
                                          "getrlimit",
                                          "getrusage",
                                          "getsid",
                                          "getsockname",
                                          "getsockopt",
                                          "gettid",
                                          "gettimeofday",
                                          "getuid",
                                          "getuid32",
                                          "getxattr",
                                          "inotify_add_watch",
                                          "inotify_init",
                                          "inotify_init1",
                                          "inotify_rm_watch",
                                          "io_cancel",
                                          "io_destroy",
                                          "io_getevents",
                                          "io_pgetevents",
                                          "io_pgetevents_time64",
                                          "io_setup",
                                          "io_submit",
                                          "ioctl",
                                          "ioprio_get",
                                          "ioprio_set",
                                          "ipc",
                                          "kill",
                                          "landlock_add_rule",
                                          "landlock_create_ruleset",
                                          "landlock_restrict_self",
                                          "lchown",
                                          "lchown32",
                                          "lgetxattr",
                                          "link",
                                          "linkat",
                                          "listen",
                                          "listxattr",
                                          "llistxattr",
                                          "_llseek",
                                          "lremovexattr",
                                          "lseek",
                                          "lsetxattr",
                                          "lstat",
                                          "lstat64",
                                          "madvise",
                                          "map_shadow_stack",
                                          "membarrier",
                                          "memfd_create",
                                          "memfd_secret",
                                          "mincore",
                                          "mkdir",
                                          "mkdirat",
                                          "mknod",
                                          "mknodat",
                                          "mlock",
                                          "mlock2",
                                          "mlockall",
                                          "mmap",
                                          "mmap2",
                                          "modify_ldt",
                                          "mprotect",
                                          "mq_getsetattr",
                                          "mq_notify",
                                          "mq_open",
                                          "mq_timedreceive",
                                          "mq_timedreceive_time64",
                                          "mq_timedsend",
                                          "mq_timedsend_time64",
                                          "mq_unlink",
                                          "mremap",
                                          "msgctl",
                                          "msgget",
                                          "msgrcv",
                                          "msgsnd",
                                          "msync",
                                          "munlock",
                                          "munlockall",
                                          "munmap",
                                          "nanosleep",
                                          "newfstatat",
                                          "_newselect",
                                          "open",
                                          "openat",
                                          "openat2",
                                          "pause",
                                          "pidfd_open",
                                          "pidfd_send_signal",
                                          "pipe",
                                          "pipe2",
                                          "pkey_alloc",
                                          "pkey_free",
                                          "pkey_mprotect",
                                          "poll",
                                          "ppoll",
                                          "ppoll_time64",
                                          "prctl",
                                          "pread64",
                                          "preadv",
                                          "preadv2",
                                          "prlimit64",
                                          "process_mrelease",
                                          "pselect6",
                                          "pselect6_time64",
                                          "pwrite64",
                                          "pwritev",
                                          "pwritev2",
                                          "read",
                                          "readahead",
                                          "readlink",
                                          "readlinkat",
                                          "readv",
                                          "recv",
                                          "recvfrom",
                                          "recvmmsg",
                                          "recvmmsg_time64",
                                          "recvmsg",
                                          "remap_file_pages",
                                          "removexattr",
                                          "rename",
                                          "renameat",
                                          "renameat2",
                                          "restart_syscall",
                                          "rmdir",
                                          "rseq",
                                          "rt_sigaction",
                                          "rt_sigpending",
                                          "rt_sigprocmask",
                                          "rt_sigqueueinfo",
                                          "rt_sigreturn",
                                          "rt_sigsuspend",
                                          "rt_sigtimedwait",
                                          "rt_sigtimedwait_time64",
                                          "rt_tgsigqueueinfo",
                                          "sched_get_priority_max",
                                          "sched_get_priority_min",
                                          "sched_getaffinity",
                                          "sched_getattr",
                                          "sched_getparam",
                                          "sched_getscheduler",
                                          "sched_rr_get_interval",
                                          "sched_rr_get_interval_time64",
                                          "sched_setaffinity",
                                          "sched_setattr",
                                          "sched_setparam",
                                          "sched_setscheduler",
                                          "sched_yield",
                                          "seccomp",
                                          "select",
                                          "semctl",
                                          "semget",
                                          "semop",
                                          "semtimedop",
                                          "semtimedop_time64",
                                          "send",
                                          "sendfile",
                                          "sendfile64",
                                          "sendmmsg",
                                          "sendmsg",
                                          "sendto",
                                          "set_robust_list",
                                          "set_thread_area",
                                          "set_tid_address",
                                          "setfsgid",
                                          "setfsgid32",
                                          "setfsuid",
                                          "setfsuid32",
                                          "setgid",
                                          "setgid32",
                                          "setgroups",
                                          "setgroups32",
                                          "setitimer",
                                          "setpgid",
                                          "setpriority",
                                          "setregid",
                                          "setregid32",
                                          "setresgid",
                                          "setresgid32",
                                          "setresuid",
                                          "setresuid32",
                                          "setreuid",
                                          "setreuid32",
                                          "setrlimit",
                                          "setsid",
                                          "setsockopt",
                                          "setuid",
                                          "setuid32",
                                          "setxattr",
                                          "shmat",
                                          "shmctl",
                                          "shmdt",
                                          "shmget",
                                          "shutdown",
                                          "sigaltstack",
                                          "signalfd",
                                          "signalfd4",
                                          "sigprocmask",
                                          "sigreturn",
                                          "socket",
                                          "socketcall",
                                          "socketpair",
                                          "splice",
                                          "stat",
                                          "stat64",
                                          "statfs",
                                          "statfs64",
                                          "statx",
                                          "symlink",
                                          "symlinkat",
                                          "sync",
                                          "sync_file_range",
                                          "syncfs",
                                          "sysinfo",
                                          "tee",
                                          "tgkill",
                                          "time",
                                          "timer_create",
                                          "timer_delete",
                                          "timer_getoverrun",
                                          "timer_gettime",
                                          "timer_gettime64",
                                          "timer_settime",
                                          "timer_settime64",
                                          "timerfd_create",
                                          "timerfd_gettime",
                                          "timerfd_gettime64",
                                          "timerfd_settime",
                                          "timerfd_settime64",
                                          "times",
                                          "tkill",
                                          "truncate",
                                          "truncate64",
                                          "ugetrlimit",
                                          "umask",
                                          "uname",
                                          "unlink",
                                          "unlinkat",
                                          "utime",
                                          "utimensat",
                                          "utimensat_time64",
                                          "utimes",
                                          "vfork",
                                          "vmsplice",
                                          "wait4",
                                          "waitid",
                                          "waitpid",
                                          "write",
                                          "writev",
                                          NULL};

/* Beside the calls every container profile refuses, the 32-bit twins of
 * refused calls (umount, stime, the *64 clock setters) and the newer members
 * of refused families (quotactl_fd, set_mempolicy_home_node, pidfd_getfd):
 * a default-allow profile must name every door. */
static const char *const DENY_NAMES[] = {"unshare",
                                         "setns",
                                         "mount",
                                         "umount",
                                         "umount2",
                                         "pivot_root",
                                         "move_mount",
                                         "open_tree",
                                         "fsopen",
                                         "fsconfig",
                                         "fsmount",
                                         "fspick",
                                         "mount_setattr",
                                         "keyctl",
                                         "add_key",
                                         "request_key",
                                         "io_uring_setup",
                                         "io_uring_enter",
                                         "io_uring_register",
                                         "bpf",
                                         "perf_event_open",
                                         "ptrace",
                                         "process_vm_readv",
                                         "process_vm_writev",
                                         "pidfd_getfd",
                                         "kcmp",
                                         "kexec_load",
                                         "kexec_file_load",
                                         "init_module",
                                         "finit_module",
                                         "delete_module",
                                         "create_module",
                                         "get_kernel_syms",
                                         "query_module",
                                         "uselib",
                                         "reboot",
                                         "swapon",
                                         "swapoff",
                                         "userfaultfd",
                                         "open_by_handle_at",
                                         "name_to_handle_at",
                                         "acct",
                                         "settimeofday",
                                         "stime",
                                         "clock_settime",
                                         "clock_settime64",
                                         "clock_adjtime",
                                         "clock_adjtime64",
                                         "adjtimex",
                                         "syslog",
                                         "quotactl",
                                         "quotactl_fd",
                                         "lookup_dcookie",
                                         "nfsservctl",
                                         "vhangup",
                                         "iopl",
                                         "ioperm",
                                         "vm86",
                                         "vm86old",
                                         "ustat",
                                         "sysfs",
                                         "_sysctl",
                                         "pciconfig_iobase",
                                         "pciconfig_read",
                                         "pciconfig_write",
                                         "setdomainname",
                                         "sethostname",
                                         "chroot",
                                         "fanotify_init",
                                         "mbind",
                                         "set_mempolicy",
                                         "set_mempolicy_home_node",
                                         "migrate_pages",
                                         "move_pages",
                                         NULL};

#define ALLOW_IF(call, cmp, v, v2)                                 \
    {                                                              \
        (call), RELAY_SECCOMP_ACT_ALLOW, 0, 1, 0, (cmp), (v), (v2) \
    }
#define EPERM_IF(call, cmp, v, v2)                                     \
    {                                                                  \
        (call), RELAY_SECCOMP_ACT_ERRNO, EPERM, 1, 0, (cmp), (v), (v2) \
    }
#define CLONE3_ENOSYS                                                               \
    {                                                                               \
        "clone3", RELAY_SECCOMP_ACT_ERRNO, ENOSYS, 0, 0, RELAY_SECCOMP_CMP_EQ, 0, 0 \
    }

/* personality: PER_LINUX, UNAME26, PER_LINUX32, their union, and the
 * 0xffffffff query. Everything else (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE,
 * ...) weakens the process's own hardening. */
static const relay_seccomp_rule ALLOW_RULES[] = {
    ALLOW_IF("personality", RELAY_SECCOMP_CMP_EQ, 0x0, 0),
    ALLOW_IF("personality", RELAY_SECCOMP_CMP_EQ, 0x8, 0),
    ALLOW_IF("personality", RELAY_SECCOMP_CMP_EQ, 0x20000, 0),
    ALLOW_IF("personality", RELAY_SECCOMP_CMP_EQ, 0x20008, 0),
    ALLOW_IF("personality", RELAY_SECCOMP_CMP_EQ, 0xffffffff, 0),
    ALLOW_IF("clone", RELAY_SECCOMP_CMP_MASKED_EQ, CLONE_NS_FLAGS, 0),
    CLONE3_ENOSYS,
};

/* Refusing "personality unless the value is one of five" needs the
 * complement as single comparisons. Within 32 bits a refused value has a
 * bit set outside 0x20008 and is not 0xffffffff: either all such bits are
 * set (three values, listed), or walking the bits outside 0x20008 in a
 * cycle meets a set bit followed by a clear one, which one
 * MASKED_EQ(set|clear, set) per step of the cycle catches. */
#define PERS_STEP(set, clear)                                                                               \
    EPERM_IF("personality", RELAY_SECCOMP_CMP_MASKED_EQ, (UINT64_C(1) << (set)) | (UINT64_C(1) << (clear)), \
             UINT64_C(1) << (set))
#define CLONE_FLAG(bit) EPERM_IF("clone", RELAY_SECCOMP_CMP_MASKED_EQ, UINT64_C(1) << (bit), UINT64_C(1) << (bit))

static const relay_seccomp_rule DENY_RULES[] = {
    EPERM_IF("personality", RELAY_SECCOMP_CMP_GT, 0xffffffff, 0),
    EPERM_IF("personality", RELAY_SECCOMP_CMP_EQ, 0xfffffff7, 0),
    EPERM_IF("personality", RELAY_SECCOMP_CMP_EQ, 0xfffdffff, 0),
    EPERM_IF("personality", RELAY_SECCOMP_CMP_EQ, 0xfffdfff7, 0),
    PERS_STEP(0, 1),
    PERS_STEP(1, 2),
    PERS_STEP(2, 4),
    PERS_STEP(4, 5),
    PERS_STEP(5, 6),
    PERS_STEP(6, 7),
    PERS_STEP(7, 8),
    PERS_STEP(8, 9),
    PERS_STEP(9, 10),
    PERS_STEP(10, 11),
    PERS_STEP(11, 12),
    PERS_STEP(12, 13),
    PERS_STEP(13, 14),
    PERS_STEP(14, 15),
    PERS_STEP(15, 16),
    PERS_STEP(16, 18),
    PERS_STEP(18, 19),
    PERS_STEP(19, 20),
    PERS_STEP(20, 21),
    PERS_STEP(21, 22),
    PERS_STEP(22, 23),
    PERS_STEP(23, 24),
    PERS_STEP(24, 25),
    PERS_STEP(25, 26),
    PERS_STEP(26, 27),
    PERS_STEP(27, 28),
    PERS_STEP(28, 29),
    PERS_STEP(29, 30),
    PERS_STEP(30, 31),
    PERS_STEP(31, 0),
    CLONE_FLAG(17),
    CLONE_FLAG(25),
    CLONE_FLAG(26),
    CLONE_FLAG(27),
    CLONE_FLAG(28),
    CLONE_FLAG(29),
    CLONE_FLAG(30),
    CLONE3_ENOSYS,
};

static const relay_seccomp_profile PROFILES[] = {
    [RELAY_SECCOMP_ALLOWLIST] =
        {
            RELAY_SECCOMP_ACT_ERRNO,
            EPERM,
            RELAY_SECCOMP_ACT_ALLOW,
            0,
            ALLOW_NAMES,
            ALLOW_RULES,
            sizeof(ALLOW_RULES) / sizeof(ALLOW_RULES[0]),
        },
    [RELAY_SECCOMP_DENYLIST] =
        {
            RELAY_SECCOMP_ACT_ALLOW,
            0,
            RELAY_SECCOMP_ACT_ERRNO,
            EPERM,
            DENY_NAMES,
            DENY_RULES,
            sizeof(DENY_RULES) / sizeof(DENY_RULES[0]),
        },
};
/* clang-format on */

/* The native ABI only. A filter for x86_64's 32-bit ABIs (x86, x32) as
 * well made every runc start ~11 ms slower (tests/bench/runtime_bench.sh:
 * 56.6 vs 45.3 ms), a fifth of the whole start, for handlers that are
 * almost never 32-bit binaries; their system calls now fail as a foreign
 * architecture instead. */
static const struct {
    uint32_t native;
    uint32_t token;
    const char *name;
} ARCHES[] = {
    {SCMP_ARCH_X86_64, SCMP_ARCH_X86_64, "SCMP_ARCH_X86_64"},
    {SCMP_ARCH_AARCH64, SCMP_ARCH_AARCH64, "SCMP_ARCH_AARCH64"},
    {SCMP_ARCH_X86, SCMP_ARCH_X86, "SCMP_ARCH_X86"},
    {SCMP_ARCH_ARM, SCMP_ARCH_ARM, "SCMP_ARCH_ARM"},
};


const relay_seccomp_profile *
relay_seccomp_profile_get(relay_seccomp_kind kind)
{
    return kind == RELAY_SECCOMP_DENYLIST ? &PROFILES[RELAY_SECCOMP_DENYLIST] : &PROFILES[RELAY_SECCOMP_ALLOWLIST];
}


int
relay_seccomp_kind_parse(const char *text, relay_seccomp_kind *kind)
{
    if (strcmp(text, "allowlist") == 0) {
        *kind = RELAY_SECCOMP_ALLOWLIST;
        return 0;
    }
    if (strcmp(text, "denylist") == 0) {
        *kind = RELAY_SECCOMP_DENYLIST;
        return 0;
    }
    return -1;
}


int
relay_seccomp_name_known(const char *name)
{
    return seccomp_syscall_resolve_name(name) != __NR_SCMP_ERROR;
}


size_t
relay_seccomp_names(relay_seccomp_kind kind, const char **out, size_t cap)
{
    const relay_seccomp_profile *p = relay_seccomp_profile_get(kind);
    size_t n = 0;

    for (const char *const *name = p->names; *name != NULL; name++) {
        if (!relay_seccomp_name_known(*name)) {
            continue;
        }
        if (n < cap) {
            out[n] = *name;
        }
        n++;
    }
    return n;
}


size_t
relay_seccomp_architectures(const char **out, size_t cap)
{
    uint32_t native = seccomp_arch_native();
    size_t n = 0;

    for (size_t i = 0; i < sizeof(ARCHES) / sizeof(ARCHES[0]); i++) {
        if (ARCHES[i].native != native) {
            continue;
        }
        if (n < cap) {
            out[n] = ARCHES[i].name;
        }
        n++;
    }
    return n;
}


static uint32_t
to_action(relay_seccomp_action action, int errno_ret)
{
    return action == RELAY_SECCOMP_ACT_ALLOW ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO((uint32_t)errno_ret);
}


static int
add_arches(scmp_filter_ctx ctx, char *err, size_t errlen)
{
    uint32_t native = seccomp_arch_native();
    int rc;

    for (size_t i = 0; i < sizeof(ARCHES) / sizeof(ARCHES[0]); i++) {
        if (ARCHES[i].native != native || ARCHES[i].token == native) {
            continue;
        }
        rc = seccomp_arch_add(ctx, ARCHES[i].token);
        if (rc != 0 && rc != -EEXIST) {
            snprintf(err, errlen, "seccomp: cannot add architecture %s: %s", ARCHES[i].name, strerror(-rc));
            return -1;
        }
    }
    return 0;
}


static int
add_rule(scmp_filter_ctx ctx, const relay_seccomp_rule *r, char *err, size_t errlen)
{
    static const enum scmp_compare ops[] = {
        [RELAY_SECCOMP_CMP_EQ] = SCMP_CMP_EQ,
        [RELAY_SECCOMP_CMP_GT] = SCMP_CMP_GT,
        [RELAY_SECCOMP_CMP_MASKED_EQ] = SCMP_CMP_MASKED_EQ,
    };
    struct scmp_arg_cmp cmp;
    int nr = seccomp_syscall_resolve_name(r->name);
    int rc;

    if (nr == __NR_SCMP_ERROR) {
        return 0; /* newer than the library: runc skips it the same way */
    }
    if (r->has_arg) {
        cmp = (struct scmp_arg_cmp){r->arg_index, ops[r->op], r->value, r->value_two};
        rc = seccomp_rule_add_array(ctx, to_action(r->action, r->errno_ret), nr, 1, &cmp);
    } else {
        rc = seccomp_rule_add(ctx, to_action(r->action, r->errno_ret), nr, 0);
    }
    if (rc != 0) {
        snprintf(err, errlen, "seccomp: cannot add the rule for %s: %s", r->name, strerror(-rc));
        return -1;
    }
    return 0;
}


static int
add_profile(scmp_filter_ctx ctx, const relay_seccomp_profile *p, char *err, size_t errlen)
{
    relay_seccomp_rule plain = {NULL, p->names_action, p->names_errno, 0, 0, RELAY_SECCOMP_CMP_EQ, 0, 0};

    for (const char *const *name = p->names; *name != NULL; name++) {
        plain.name = *name;
        if (add_rule(ctx, &plain, err, errlen) != 0) {
            return -1;
        }
    }
    for (size_t i = 0; i < p->nrules; i++) {
        if (add_rule(ctx, &p->rules[i], err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}


int
relay_seccomp_write_bpf_kind(relay_seccomp_kind kind, int fd, char *err, size_t errlen)
{
    const relay_seccomp_profile *p = relay_seccomp_profile_get(kind);
    scmp_filter_ctx ctx;
    int rc;

    ctx = seccomp_init(to_action(p->default_action, p->default_errno));
    if (ctx == NULL) {
        snprintf(err, errlen, "seccomp: cannot create a filter");
        return -1;
    }
    if (add_arches(ctx, err, errlen) != 0 || add_profile(ctx, p, err, errlen) != 0) {
        seccomp_release(ctx);
        return -1;
    }
    rc = seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    if (rc != 0) {
        snprintf(err, errlen, "seccomp: cannot write the filter: %s", strerror(-rc));
        return -1;
    }
    return 0;
}


int
relay_seccomp_write_bpf(int fd, char *err, size_t errlen)
{
    return relay_seccomp_write_bpf_kind(RELAY_SECCOMP_ALLOWLIST, fd, err, errlen);
}
