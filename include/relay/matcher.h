/* The compiled multi-rule pattern matcher: the hot path of event dispatch.
 *
 * Rules arrive in normal form (JSON text produced by the Lua validator):
 *   group       = { "<field>": [alternative, ...], ... }     fields AND, alternatives OR
 *   alternative = {"eq": string|number|true|false|null}
 *               | {"prefix": string} | {"suffix": string}
 *               | {"exists": true|false}
 *               | {"gt"|"gte"|"lt"|"lte": number}
 *               | {"gt"|"gte"|"lt"|"lte": {"now": <integer offset in ms>}}
 *               | {"group": group}
 * Semantics are those of spec/events.md and spec/relay.md section 2. Where the
 * specs are silent: a field whose value is an empty array has no element, so a
 * group alternative on it does not hold (exists still sees the key).
 *
 * Events are validated in full (see json_scan.h) while the values below
 * paths some rule uses are collected; literal alternatives are looked up in
 * hash tables, so the cost per event barely depends on the number of rules.
 *
 * A matcher is not thread-safe: match() reuses scratch memory inside it.
 * All functions are plain C so LuaJIT's FFI can call them too.
 */
#ifndef RELAY_MATCHER_H
#define RELAY_MATCHER_H

#include <stddef.h>
#include <stdint.h>

/* Upper bound on nesting of groups in one rule. */
#define RELAY_MATCHER_MAX_RULE_DEPTH 64

typedef struct relay_matcher relay_matcher;

/* A new, empty matcher, or NULL when out of memory. */
relay_matcher *relay_matcher_new(void);

/* Add one rule (normal-form JSON). Returns its id (0, 1, 2, ... in add order)
 * or -1 with a message in err. Adding after compile() is allowed; the next
 * compile() or match() rebuilds the index. */
int relay_matcher_add(relay_matcher *m, const char *rule_json, size_t len, char *err,
                      size_t errlen);

/* Build the lookup index. Optional: match() compiles lazily when needed.
 * Returns 0, or -1 with a message (out of memory). */
int relay_matcher_compile(relay_matcher *m, char *err, size_t errlen);

/* Number of rules added. */
size_t relay_matcher_count(const relay_matcher *m);

/* Match one event. Returns the number of matching rules, writing the first
 * min(count, ids_cap) ids in ascending order to ids; when the return value
 * exceeds ids_cap, call again with a larger buffer. Returns -1 when the event
 * is malformed (or memory ran out), with the reason in `reason`.
 * max_bytes: RELAY_MAX_EVENT_BYTES, checked before any scanning.
 * now_ms: wall-clock milliseconds since the Unix epoch, for temporal rules. */
int relay_matcher_match(relay_matcher *m, const char *event, size_t len, size_t max_bytes,
                        int64_t now_ms, uint32_t *ids, size_t ids_cap, char *reason,
                        size_t reasonlen);

/* Free the matcher and everything it owns; NULL is fine. */
void relay_matcher_free(relay_matcher *m);

#endif
