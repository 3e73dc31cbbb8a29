/* The default seccomp policy (include/relay/seccomp_policy.h): what each
 * profile lists, that the argument rules of both profiles agree, and what a
 * process under each compiled filter can and cannot do. */
/* unshare, CLONE_NEWUSER, syscall */
#define _GNU_SOURCE

#include "relay/seccomp_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* The calls Relay refuses to handlers, whichever profile is loaded. */
/* clang-format off: packed by hand */
static const char *const REFUSED[] = {"unshare",
                                      "setns",
                                      "mount",
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
                                      "kexec_load",
                                      "kexec_file_load",
                                      "init_module",
                                      "finit_module",
                                      "delete_module",
                                      "reboot",
                                      "swapon",
                                      "swapoff",
                                      "userfaultfd",
                                      "open_by_handle_at",
                                      "name_to_handle_at",
                                      "acct",
                                      "settimeofday",
                                      "clock_settime",
                                      "clock_adjtime",
                                      "adjtimex",
                                      "syslog",
                                      "quotactl",
                                      "lookup_dcookie",
                                      "nfsservctl",
                                      "iopl",
                                      "ioperm",
                                      "create_module",
                                      "get_kernel_syms",
                                      "query_module",
                                      "uselib",
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
                                      "kcmp",
                                      "mbind",
                                      "set_mempolicy",
                                      "move_pages",
                                      "vm86",
                                      "vm86old",
                                      NULL};
/* clang-format on */


static int
listed(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}


static int
has_rule(const relay_seccomp_profile *p, const char *name)
{
    for (size_t i = 0; i < p->nrules; i++) {
        if (strcmp(p->rules[i].name, name) == 0) {
            return 1;
        }
    }
    return 0;
}


static void
test_names(void)
{
    const char *allow[512], *deny[512];
    size_t nallow = relay_seccomp_names(RELAY_SECCOMP_ALLOWLIST, allow, 512);
    size_t ndeny = relay_seccomp_names(RELAY_SECCOMP_DENYLIST, deny, 512);
    const relay_seccomp_profile *ap = relay_seccomp_profile_get(RELAY_SECCOMP_ALLOWLIST);
    const char *arches[8];

    CHECK(nallow > 250 && nallow <= 512);
    CHECK(ndeny > 50 && ndeny <= 512);
    CHECK(relay_seccomp_names(RELAY_SECCOMP_ALLOWLIST, NULL, 0) == nallow);
    for (const char *const *name = REFUSED; *name != NULL; name++) {
        if (listed(allow, nallow, *name) || has_rule(ap, *name)) {
            fprintf(stderr, "allowlist allows %s\n", *name);
            CHECK(0);
        }
        if (relay_seccomp_name_known(*name) && !listed(deny, ndeny, *name)) {
            fprintf(stderr, "denylist misses %s\n", *name);
            CHECK(0);
        }
    }
    CHECK(listed(allow, nallow, "read") && listed(allow, nallow, "write"));
    CHECK(listed(allow, nallow, "execve") && listed(allow, nallow, "exit_group"));
    CHECK(listed(allow, nallow, "mmap2")); /* an x86 call, mapped per arch */
    for (int k = 0; k < 2; k++) {
        const relay_seccomp_profile *p =
            relay_seccomp_profile_get(k == 0 ? RELAY_SECCOMP_ALLOWLIST : RELAY_SECCOMP_DENYLIST);

        for (size_t i = 0; i < p->nrules; i++) {
            CHECK(!listed(k == 0 ? allow : deny, k == 0 ? nallow : ndeny, p->rules[i].name));
        }
    }
    CHECK(!relay_seccomp_name_known("no_such_call"));
    CHECK(relay_seccomp_architectures(arches, 8) >= 1);
    CHECK(strncmp(arches[0], "SCMP_ARCH_", 10) == 0);
    printf("allowlist: %zu names, denylist: %zu names, %zu architectures (%s)\n", nallow, ndeny,
           relay_seccomp_architectures(NULL, 0), arches[0]);
}


/* What p does with name(arg0): 0 for ALLOW, else the errno. A call with
 * rules is no plain name (test_names), so a miss falls to the default. */
static int
verdict(const relay_seccomp_profile *p, const char *name, uint64_t arg0)
{
    int ruled = 0;

    for (size_t i = 0; i < p->nrules; i++) {
        const relay_seccomp_rule *r = &p->rules[i];
        int hit;

        if (strcmp(r->name, name) != 0) {
            continue;
        }
        ruled = 1;
        switch (r->op) {
        case RELAY_SECCOMP_CMP_EQ:
            hit = arg0 == r->value;
            break;
        case RELAY_SECCOMP_CMP_GT:
            hit = arg0 > r->value;
            break;
        default:
            hit = (arg0 & r->value) == r->value_two;
            break;
        }
        if (!r->has_arg || hit) {
            return r->action == RELAY_SECCOMP_ACT_ALLOW ? 0 : r->errno_ret;
        }
    }
    for (const char *const *n = p->names; !ruled && *n != NULL; n++) {
        if (strcmp(*n, name) == 0) {
            return p->names_action == RELAY_SECCOMP_ACT_ALLOW ? 0 : p->names_errno;
        }
    }
    return p->default_action == RELAY_SECCOMP_ACT_ALLOW ? 0 : p->default_errno;
}


static int
agree(const char *name, uint64_t arg0)
{
    int a = verdict(relay_seccomp_profile_get(RELAY_SECCOMP_ALLOWLIST), name, arg0);
    int d = verdict(relay_seccomp_profile_get(RELAY_SECCOMP_DENYLIST), name, arg0);

    if (a != d) {
        fprintf(stderr, "%s(0x%llx): allowlist %d, denylist %d\n", name, (unsigned long long)arg0, a, d);
    }
    return a == d;
}


/* The denylist spells "personality only with these five values" as a
 * complement: check it against the allowlist's direct form, exhaustively
 * near the edges and at random elsewhere. */
static void
test_rules_agree(void)
{
    static const uint64_t edges[] = {
        0x0, 0x8, 0x20000, 0x20008, 0xffffffff, 0x400000, UINT64_C(0x100000000), UINT64_C(0x100000008), UINT64_MAX};
    uint64_t x = UINT64_C(0x9e3779b97f4a7c15);
    int bad = 0;

    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        bad += !agree("personality", edges[i]) + !agree("clone", edges[i]);
        for (int b = 0; b < 64; b++) {
            uint64_t v = edges[i] ^ (UINT64_C(1) << b);

            bad += !agree("personality", v) + !agree("clone", v) + !agree("personality", v & 0xffffffff);
        }
    }
    for (uint64_t v = 0; v < 0x21000; v++) {
        bad += !agree("personality", v) + !agree("clone", v << 13);
    }
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        bad += !agree("personality", x) + !agree("personality", x & 0xffffffff) + !agree("clone", x);
        bad += !agree("personality", (x & 0xffffffff) | 0xfffdfff7);
    }
    CHECK(bad == 0);
    CHECK(verdict(relay_seccomp_profile_get(RELAY_SECCOMP_ALLOWLIST), "personality", 0x400000) == EPERM);
    CHECK(verdict(relay_seccomp_profile_get(RELAY_SECCOMP_DENYLIST), "clone", 0x10000000) == EPERM);
    CHECK(verdict(relay_seccomp_profile_get(RELAY_SECCOMP_DENYLIST), "clone3", 0) == ENOSYS);
    CHECK(verdict(relay_seccomp_profile_get(RELAY_SECCOMP_ALLOWLIST), "clone3", 0) == ENOSYS);
}


/* Writes kind's program to a fresh temp file; returns its size, or -1. */
static long
write_program(relay_seccomp_kind kind, char *path, size_t cap)
{
    char err[256];
    struct stat st;
    int fd;

    snprintf(path, cap, "/tmp/relay-seccomp-XXXXXX");
    fd = mkstemp(path);
    if (fd < 0) {
        return -1;
    }
    if (relay_seccomp_write_bpf_kind(kind, fd, err, sizeof(err)) != 0) {
        fprintf(stderr, "write_bpf: %s\n", err);
        close(fd);
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    close(fd);
    return (long)st.st_size;
}


static int
load_program(const char *path)
{
    static struct sock_filter insns[BPF_MAXINSNS];
    struct sock_fprog prog;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0) {
        return -1;
    }
    n = read(fd, insns, sizeof(insns));
    close(fd);
    if (n <= 0 || n % (ssize_t)sizeof(insns[0]) != 0) {
        return -1;
    }
    prog.len = (unsigned short)(n / (ssize_t)sizeof(insns[0]));
    prog.filter = insns;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return -1;
    }
    /* Not seccomp(2): without flags it is the same, and valgrind knows only this. */
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}


static int
fails_with(long rc, int want)
{
    return rc == -1 && errno == want;
}


static void *
thread_main(void *arg)
{
    return arg;
}


static int
can_fork(void)
{
    int status;
    pid_t pid = fork();

    if (pid == 0) {
        _exit(7);
    }
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 7;
}


static int
can_thread(void)
{
    pthread_t t;
    void *out = NULL;
    int token = 1;

    return pthread_create(&t, NULL, thread_main, &token) == 0 && pthread_join(t, &out) == 0 && out == &token;
}


/* A call that wrongly succeeds in creating a process returns 0 in it: that
 * copy must stop at once, the parent's answer is what gets checked. */
static long
spawn_call(long rc)
{
    if (rc == 0) {
        _exit(0);
    }
    if (rc > 0) {
        waitpid((pid_t)rc, NULL, 0);
    }
    return rc;
}


/* Runs in the child under the filter; returns the number of the first
 * failed step (the exit code), 0 if all passed. The order matters: each
 * personality call answers with the previous value, and without the filter
 * an unshare first would make the clone fail for an unrelated reason. */
#define STEP(what, ok)                                                                         \
    do {                                                                                       \
        step++;                                                                                \
        errno = 0;                                                                             \
        if (!(ok)) {                                                                           \
            fprintf(stderr, "  under the filter: %s: FAILED (%s)\n", (what), strerror(errno)); \
            first = first != 0 ? first : step;                                                 \
        }                                                                                      \
    } while (0)

static int
confined_steps(void)
{
    uint64_t clone3_args[8] = {0, 0, 0, 0, SIGCHLD, 0, 0, 0};
    unsigned char uring_params[120] = {0};
    int step = 0, first = 0;

    STEP("clone(CLONE_NEWUSER) -> EPERM",
         fails_with(spawn_call(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)), EPERM));
    STEP("unshare(CLONE_NEWUSER) -> EPERM", fails_with(unshare(CLONE_NEWUSER), EPERM));
    STEP("keyctl -> EPERM", fails_with(syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0), EPERM));
    STEP("io_uring_setup -> EPERM", fails_with(syscall(SYS_io_uring_setup, 1, uring_params), EPERM));
    STEP("mount -> EPERM", fails_with(mount("none", "/relay-no-such-dir", "none", MS_REMOUNT, NULL), EPERM));
    STEP("personality(READ_IMPLIES_EXEC) -> EPERM", fails_with(personality(READ_IMPLIES_EXEC), EPERM));
    STEP("personality(0xffffffff) works", personality(0xffffffff) == PER_LINUX);
    STEP("personality(PER_LINUX32) works", personality(PER_LINUX32) == PER_LINUX);
    STEP("personality(PER_LINUX) works", personality(PER_LINUX) == PER_LINUX32);
    STEP("clone3 -> ENOSYS", fails_with(spawn_call(syscall(SYS_clone3, clone3_args, sizeof(clone3_args))), ENOSYS));
    STEP("getpid works", getpid() > 0 && syscall(SYS_getpid) == getpid());
    STEP("fork works", can_fork());
    STEP("pthread_create works (clone3 falls back to clone)", can_thread());
    STEP("socket works", socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) >= 0);
    return first;
}


static void
test_behaviour(relay_seccomp_kind kind, const char *label)
{
    char path[64];
    long size = write_program(kind, path, sizeof(path));
    int status = -1;
    pid_t pid;

    CHECK(size > 0 && size % (long)sizeof(struct sock_filter) == 0);
    printf("%s: %ld BPF instructions\n", label, size / (long)sizeof(struct sock_filter));
    if (size <= 0) {
        return;
    }
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        if (load_program(path) != 0) {
            fprintf(stderr, "  cannot load the %s filter: %s\n", label, strerror(errno));
            _exit(100);
        }
        /* _exit: no atexit work (a leak checker would ptrace) under the filter */
        _exit(confined_steps());
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: confined child ended with status 0x%x\n", label, status);
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    unlink(path);
}


int
main(void)
{
    test_names();
    test_rules_agree();
    test_behaviour(RELAY_SECCOMP_ALLOWLIST, "allowlist");
    test_behaviour(RELAY_SECCOMP_DENYLIST, "denylist");
    CHECK_DONE();
}
