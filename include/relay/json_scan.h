/* Strict, non-recursive JSON scanner over raw bytes (RFC 8259 + UTF-8).
 *
 * The scanner validates every byte of its input and, optionally, reports the
 * values below keys a visitor declared interesting. Untracked subtrees are only
 * validated, never copied or decoded, which keeps the matcher's hot path cheap.
 * Nesting is tracked with an explicit stack capped at RELAY_JSON_MAX_DEPTH, so
 * hostile inputs ([[[[... 100k deep) cost bounded work and no C stack.
 *
 * Reasons are short, lower-case, without a trailing period, and byte offsets
 * in them are 0-based:
 *   empty event
 *   event too large (2000000 bytes > 1048576)
 *   invalid JSON at byte 17: expected ':'
 *   invalid UTF-8 at byte 5
 *   nesting deeper than 512
 *   event is not a JSON object
 */
#ifndef RELAY_JSON_SCAN_H
#define RELAY_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

#define RELAY_JSON_MAX_DEPTH 512

typedef enum relay_json_type {
    RELAY_JSON_STRING,
    RELAY_JSON_NUMBER,
    RELAY_JSON_TRUE,
    RELAY_JSON_FALSE,
    RELAY_JSON_NULL,
    RELAY_JSON_OBJECT,
    RELAY_JSON_ARRAY
} relay_json_type;

/* Callbacks for tracked values. A token is the visitor's own handle (>= 0);
 * -1 means "not tracked" and the scanner then makes no calls for that subtree.
 * Callbacks cannot fail the scan: a visitor that runs out of memory records
 * that itself and checks after the scan. */
typedef struct relay_json_visitor {
    void *ctx;
    /* A key of a tracked object `object`; returns the token its value gets,
     * or -1 to skip the value. `escaped` is nonzero when the raw key bytes
     * contain backslash escapes (use relay_json_unescape). */
    int32_t (*on_key)(void *ctx, int32_t object, const char *key, size_t len, int escaped);
    /* A scalar below token `slot`. Strings are passed without their quotes,
     * still escaped when `escaped` is nonzero; numbers as their raw text. */
    void (*on_scalar)(void *ctx, int32_t slot, relay_json_type type, const char *text, size_t len, int escaped);
    /* An object below token `slot`; returns the token for its keys or -1. */
    int32_t (*on_object)(void *ctx, int32_t slot);
    /* An array below token `slot`; returns the token its elements get or -1. */
    int32_t (*on_array)(void *ctx, int32_t slot);
    /* Optional (NULL: every key is reported): bit min(len, 63) set for each
     * length of key that on_key may give a token in object `object`. A key
     * without escapes of any other length gets -1 without an on_key call. */
    uint64_t (*key_lengths)(void *ctx, int32_t object);
} relay_json_visitor;

/* Validate that text is one JSON object (surrounding whitespace allowed),
 * checking max_bytes before anything else. Returns 0 when valid; otherwise -1
 * with the reason in `reason` (may be NULL). */
int relay_json_validate_object(const char *text, size_t len, size_t max_bytes, char *reason, size_t reasonlen);

/* The reason an event of len bytes over max_bytes is refused with, for a
 * reader that skipped such a line without holding it. */
void relay_json_too_large(size_t len, size_t max_bytes, char *reason, size_t reasonlen);

/* Like relay_json_validate_object, but reports tracked values to `visitor`
 * (may be NULL). The top-level value gets token `root`. Callbacks may have run
 * for a prefix of the text even when the scan fails. */
int relay_json_scan_object(const char *text, size_t len, size_t max_bytes, const relay_json_visitor *visitor,
                           int32_t root, char *reason, size_t reasonlen);

/* relay_json_scan_object over one line of newline-separated events, without
 * finding the line's end first: the scan starts at `text` and the line ends at
 * the first newline after the object (only spaces, tabs and CRs between), or
 * at text + avail when eol_at_end says the last line ends there. Returns 0 with
 * the line's length (its newline excluded) in *len when the line is a valid
 * object; -1 for anything else, with no reason: the caller then finds the
 * line's end and scans it with relay_json_scan_object, which says why, word
 * for word as always. No byte at or past text + avail is read; the caller
 * checks the length against its limit. Callbacks may have run even when it
 * returns -1. */
int relay_json_scan_line(const char *text, size_t avail, int eol_at_end, const relay_json_visitor *visitor,
                         int32_t root, size_t *len);

/* How the scanner's fast paths (the block path for untracked arrays of plain
 * numbers; above OFF also the one-go path for "key":"value" and "key":number
 * pairs) are run. Results never depend on the level: OFF is the plain token-at-a-time
 * scanner that the others must agree with, byte for byte and reason for
 * reason; tests and benchmarks switch levels to compare. AUTO, the default,
 * picks AVX512 (AVX-512BW) or AVX2 when the CPU has it, else SSE2, else OFF (PORTABLE is for
 * tests: it is slower than OFF). */
#define RELAY_JSON_SIMD_AUTO (-1)
#define RELAY_JSON_SIMD_OFF 0
#define RELAY_JSON_SIMD_PORTABLE 1
#define RELAY_JSON_SIMD_SSE2 2
#define RELAY_JSON_SIMD_AVX2 3
#define RELAY_JSON_SIMD_AVX512 4

/* Select the level (clamped to what this CPU and build support) for all
 * later scans; returns the level in effect. Not thread-safe: call it before
 * scanning starts (the first scan picks AUTO by itself, once, even when the
 * first scans run on several threads). */
int relay_json_set_simd(int level);

/* Decode the contents of a valid JSON string (no quotes) into `out`, which
 * must hold at least `len` bytes (decoding never grows). Returns the decoded
 * length. Only call on text the scanner accepted. */
size_t relay_json_unescape(const char *text, size_t len, char *out);

/* Convert the text of a valid JSON number to the nearest double. Out-of-range
 * magnitudes become +/-inf or +/-0 (1e400 is valid JSON and becomes inf).
 * Assumes the C locale's decimal point, like LuaJIT. */
double relay_json_number(const char *text, size_t len);

#endif
