/* libFuzzer target for the matcher and the JSON scanner.
 * Input: up to four lines of rules in normal form, then the event (the rest
 * of the input, newlines included). Rules may fail to compile; nothing may
 * crash, leak or hit undefined behaviour, matching must agree with plain
 * validation about which events are malformed, every level of the
 * scanner's block fast path must give the plain scanner's verdict and
 * reason, byte for byte, and matching without the fast paths must find the
 * same rules. Matching the event as the first of newline-separated lines
 * (relay_matcher_match_line), at every level, must settle it only where
 * matching the line found by its newline succeeds, with the same length and
 * rules. */
#include "relay/json_scan.h"
#include "relay/matcher.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RULES 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static const int levels[] = {
    RELAY_JSON_SIMD_PORTABLE,
    RELAY_JSON_SIMD_SSE2,
    RELAY_JSON_SIMD_AVX2,
    RELAY_JSON_SIMD_AVX512,
};
#define NLEVELS ((int)(sizeof(levels) / sizeof(*levels)))


/* Validate at every fast-path level; abort unless all agree with OFF. */
static int
validate_all_levels(const char *p, size_t len)
{
    char want[256], got[256];
    int rc, i;

    relay_json_set_simd(RELAY_JSON_SIMD_OFF);
    want[0] = '\0';
    rc = relay_json_validate_object(p, len, 4096, want, sizeof(want));
    for (i = 0; i < NLEVELS; i++) {
        relay_json_set_simd(levels[i]);
        got[0] = '\0';
        if (relay_json_validate_object(p, len, 4096, got, sizeof(got)) != rc || strcmp(got, want) != 0)
            abort();
    }
    relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
    return rc;
}


/* The match without the scanner's fast paths: it must find the same rules
 * (ids: what the fast match found) and return the same count. */
static int
match_plainly(relay_matcher *m, const char *p, size_t len, const uint32_t *ids)
{
    uint32_t plain[8];
    char err[256];
    int n, i;

    relay_json_set_simd(RELAY_JSON_SIMD_OFF);
    n = relay_matcher_match(m, p, len, 4096, INT64_C(1767225600000), plain, 8, err, sizeof(err));
    relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
    for (i = 0; i < n && i < 8; i++) {
        if (plain[i] != ids[i]) {
            abort();
        }
    }
    return n;
}


/* The event's text as lines: whatever relay_matcher_match_line settles
 * (first as the file's last line, then as one followed by more), matching
 * the line up to its first newline (nl) without the fast paths (k rules, want)
 * must settle the same way, and a valid event without a newline must be
 * settled. */
static void
check_lines_at_level(relay_matcher *m, relay_match_state *st, const char *p, size_t len, const char *nl, int k,
                     const uint32_t *want)
{
    size_t line = nl ? (size_t)(nl - p) : len, got;
    uint32_t ids[8];
    int eol, n, i;

    for (eol = 1; eol >= 0; eol--) {
        n = relay_matcher_match_line(m, st, p, len, eol, 4096, INT64_C(1767225600000), ids, 8, &got);
        if (n >= 0 && (got != line || n != k || (!eol && !nl))) {
            abort();
        }
        for (i = 0; i < n; i++) {
            if (ids[i] != want[i]) {
                abort();
            }
        }
        if (n < 0 && eol && !nl && k >= 0 && k <= 8 && len <= 4096) {
            abort();
        }
    }
}


/* check_lines_at_level at every level of the scanner: the line mode's own
 * paths (a newline ending the value) in each of them. */
static void
check_line_mode(relay_matcher *m, relay_match_state *st, const char *p, size_t len)
{
    const char *nl = memchr(p, '\n', len);
    uint32_t want[8];
    char err[256];
    int k, i;

    relay_json_set_simd(RELAY_JSON_SIMD_OFF);
    k = relay_matcher_match(m, p, nl ? (size_t)(nl - p) : len, 4096, INT64_C(1767225600000), want, 8, err, sizeof(err));
    for (i = 0; i < NLEVELS; i++) {
        relay_json_set_simd(levels[i]);
        check_lines_at_level(m, st, p, len, nl, k, want);
    }
    relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *nl;
    relay_matcher *m = relay_matcher_new();
    relay_match_state *st = NULL;
    uint32_t ids[8];
    char err[256];
    int i, n, valid;

    if (!m) {
        return 0;
    }
    for (i = 0; i < MAX_RULES && (nl = memchr(p, '\n', (size_t)(end - p))); i++) {
        relay_matcher_add(m, p, (size_t)(nl - p), err, sizeof(err));
        p = nl + 1;
    }
    n = relay_matcher_match(m, p, (size_t)(end - p), 4096, INT64_C(1767225600000), ids, 8, err, sizeof(err));
    valid = validate_all_levels(p, (size_t)(end - p)) == 0;
    if ((n >= 0) != valid || n != match_plainly(m, p, (size_t)(end - p), ids)) {
        abort();
    }
    for (i = 1; i < n && i < 8; i++) {
        if (ids[i - 1] >= ids[i]) {
            abort();
        }
    }
    if ((st = relay_match_state_new()) != NULL && relay_matcher_compile(m, NULL, 0) == 0) {
        check_line_mode(m, st, p, (size_t)(end - p));
    }
    relay_match_state_free(st);
    relay_matcher_free(m);
    return 0;
}
