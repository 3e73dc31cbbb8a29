/* A tiny assertion layer for the C unit tests: no framework, ctest reads the exit code. */
#ifndef RELAY_TESTS_CHECK_H
#define RELAY_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        check_count++;                                                               \
        if (!(cond)) {                                                               \
            check_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_STR(got, want)                                                        \
    do {                                                                            \
        const char *check_got_ = (got), *check_want_ = (want);                      \
        check_count++;                                                              \
        if (check_got_ == NULL || strcmp(check_got_, check_want_) != 0) {           \
            check_failures++;                                                       \
            fprintf(stderr, "%s:%d: got \"%s\", want \"%s\"\n", __FILE__, __LINE__, \
                    check_got_ ? check_got_ : "(null)", check_want_);               \
        }                                                                           \
    } while (0)

#define CHECK_DONE()                                                   \
    do {                                                               \
        printf("%d checks, %d failed\n", check_count, check_failures); \
        return check_failures == 0 ? 0 : 1;                            \
    } while (0)

#endif
