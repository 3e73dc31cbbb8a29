/*
 * The default seccomp policy of handler containers. One table, used two ways:
 * runc gets it as the OCI `linux.seccomp` section (built in Lua by
 * relay.core.seccomp), bubblewrap as a classic-BPF program for `--seccomp FD`
 * compiled here with libseccomp.
 *
 * Two profiles with the same intent, so their load cost can be compared:
 *
 *   allowlist  default ERRNO(EPERM); the calls an ordinary program makes are
 *              allowed (the moby default set for a container without
 *              capabilities), everything else is refused.
 *   denylist   default ALLOW; ERRNO(EPERM) for the calls that reach kernel
 *              attack surface or host state (namespaces, mounts, keyrings,
 *              io_uring, bpf, ptrace, modules, clocks, ...).
 *
 * Both carry the same argument rules: personality only with the harmless
 * values, clone only without CLONE_NEW* flags, clone3 answered with ENOSYS
 * (its flags live in memory a filter cannot read, so libc must fall back to
 * clone). Every rule compares one argument once, because runc splits a rule
 * with two comparisons on the same argument into an OR of single ones.
 *
 * Nothing here includes seccomp.h or lua.h.
 */
#ifndef RELAY_SECCOMP_POLICY_H
#define RELAY_SECCOMP_POLICY_H

#include <stddef.h>
#include <stdint.h>

typedef enum { RELAY_SECCOMP_ALLOWLIST = 0, RELAY_SECCOMP_DENYLIST } relay_seccomp_kind;

typedef enum { RELAY_SECCOMP_ACT_ALLOW = 0, RELAY_SECCOMP_ACT_ERRNO } relay_seccomp_action;

/* The OCI runtime-spec meaning: EQ is arg == value, GT is arg > value,
 * MASKED_EQ is (arg & value) == value_two. */
typedef enum { RELAY_SECCOMP_CMP_EQ = 0, RELAY_SECCOMP_CMP_GT, RELAY_SECCOMP_CMP_MASKED_EQ } relay_seccomp_op;

/* One rule on one call: action when the comparison holds (always, when
 * has_arg is 0). Rules on the same call are alternatives (OR). */
typedef struct {
    const char *name;
    relay_seccomp_action action;
    int errno_ret; /* with RELAY_SECCOMP_ACT_ERRNO */
    int has_arg;
    unsigned arg_index;
    relay_seccomp_op op;
    uint64_t value;
    uint64_t value_two;
} relay_seccomp_rule;

typedef struct {
    relay_seccomp_action default_action;
    int default_errno;                 /* with RELAY_SECCOMP_ACT_ERRNO */
    relay_seccomp_action names_action; /* what every plain name gets */
    int names_errno;
    const char *const *names; /* NULL-terminated, unfiltered */
    const relay_seccomp_rule *rules;
    size_t nrules;
} relay_seccomp_profile;

const relay_seccomp_profile *relay_seccomp_profile_get(relay_seccomp_kind kind);

/* 0 and *kind set for "allowlist" or "denylist", -1 otherwise. */
int relay_seccomp_kind_parse(const char *text, relay_seccomp_kind *kind);

/* 1 if the running libseccomp knows the call. A call of another ABI of the
 * profile (x86's mmap2 on an x86_64 host) counts: libseccomp maps it to each
 * architecture of the filter. Calls newer than the library do not. */
int relay_seccomp_name_known(const char *name);

/* The plain names of kind the running libseccomp knows, in table order.
 * Stores up to cap of them in out (which may be NULL when cap is 0) and
 * returns how many there are. */
size_t relay_seccomp_names(relay_seccomp_kind kind, const char **out, size_t cap);

/* The architectures the filter covers, as OCI names ("SCMP_ARCH_X86_64"),
 * native first; none for a native architecture this file does not name
 * (the filter then covers the native one only). Same storage convention
 * as relay_seccomp_names(). */
size_t relay_seccomp_architectures(const char **out, size_t cap);

/* Writes the compiled allowlist profile (an array of struct sock_filter, as
 * bwrap --seccomp reads it) to fd. 0, or -1 with err filled. */
int relay_seccomp_write_bpf(int fd, char *err, size_t errlen);

/* The same for either profile. */
int relay_seccomp_write_bpf_kind(relay_seccomp_kind kind, int fd, char *err, size_t errlen);

#endif
