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
 * Semantics are those of the pattern language (docs/patterns.md). One case more:
 * a field whose value is an empty array has no element, so a group alternative
 * on it does not hold (exists still sees the key).
 *
 * Events are validated in full (see json_scan.h) while the values below
 * paths some rule uses are collected; literal alternatives are looked up in
 * hash tables, so the cost per event barely depends on the number of rules.
 *
 * relay_matcher_match() is not thread-safe: it reuses scratch memory inside
 * the matcher. Threads share one compiled matcher read-only by giving
 * relay_matcher_match_with() a relay_match_state each.
 * The API is flat (handles, buffers, no callbacks) so that a binding stays thin.
 */
#ifndef RELAY_MATCHER_H
#define RELAY_MATCHER_H

#include <stddef.h>
#include <stdint.h>

/* Upper bound on nesting of groups in one rule. */
#define RELAY_MATCHER_MAX_RULE_DEPTH 64

/* What an operator takes. */
typedef enum relay_matcher_operand {
    RELAY_OPERAND_LITERAL,   /* eq: a string, number, true, false or null */
    RELAY_OPERAND_STRING,    /* prefix, suffix */
    RELAY_OPERAND_BOOLEAN,   /* exists */
    RELAY_OPERAND_THRESHOLD, /* gt, gte, lt, lte: a number, or {"now": <offset ms>} */
    RELAY_OPERAND_GROUP,     /* group: a nested group */
    RELAY_OPERAND_FOREIGN    /* none: another system's operator, see below */
} relay_matcher_operand;

typedef struct relay_matcher_op {
    const char *name;
    uint8_t len;     /* strlen(name) */
    uint8_t operand; /* relay_matcher_operand */
    uint8_t written; /* pattern authors write {name: operand} in an alternative's list */
} relay_matcher_op;

/*
 * The words of the pattern language: the one list that this matcher's rule
 * reader, the C fast path of the validator (include/relay/pattern_compile.h)
 * and the Lua validator (lua/relay/pattern.lua, through relay.core.matcher's
 * `operators`) read. A new operator is a row here plus its reading and
 * evaluation in the matcher; pattern.lua adds its messages, keyed by operand.
 *
 *   written      prefix suffix exists gt gte lt lte, in the order messages list
 *                them (the nearest one is suggested for a typo); the validator
 *                refuses them as field names.
 *   normal form  eq and group are only spelled in normal form: a pattern writes
 *                a bare literal and a nested map; they may name fields.
 *   foreign      operator names of other event-matching systems (numeric,
 *                anything-but, ...). This matcher has no such operator; the
 *                validator refuses them anywhere and says what to write instead,
 *                so a pattern never silently means something else here.
 *
 * The entry after the last has a NULL name.
 */
extern const relay_matcher_op relay_matcher_ops[];

/* The entry named by the len bytes at name, or NULL. */
const relay_matcher_op *relay_matcher_op_find(const char *name, size_t len);

/* The operand's name for bindings and messages ("literal", "string",
 * "boolean", "threshold", "group", "foreign"). */
const char *relay_matcher_operand_name(relay_matcher_operand operand);

typedef struct relay_matcher relay_matcher;

/* A new, empty matcher, or NULL when out of memory. */
relay_matcher *relay_matcher_new(void);

/* Add one rule (normal-form JSON). Returns its id (0, 1, 2, ... in add order)
 * or -1 with a message in err. Adding after compile() is allowed; the next
 * compile() or match() rebuilds the index. */
int relay_matcher_add(relay_matcher *m, const char *rule_json, size_t len, char *err, size_t errlen);

/* relay_matcher_add for a rule compiled by relay_pattern_compile_entry, whose
 * output is valid JSON by construction (the YAML fuzz target checks every rule
 * it compiles): the text is not validated again, which was a quarter of the
 * cost of adding a 10,000-rule block. Any other text must go through
 * relay_matcher_add, whose reader relies on the validation. */
int relay_matcher_add_compiled(relay_matcher *m, const char *rule_json, size_t len, char *err, size_t errlen);

/* Room for `more` rules beyond those added, for a caller that adds a known
 * number at once (a rule block): the per-rule arrays and the table of rule
 * texts are sized once rather than doubled and rehashed on the way up.
 * Returns 0, or -1 with a message (too many rules, out of memory); the rules
 * already added are untouched either way. */
int relay_matcher_reserve(relay_matcher *m, size_t more, char *err, size_t errlen);

/* Build the lookup index. Optional: match() compiles lazily when needed.
 * Returns 0, or -1 with a message (out of memory). */
int relay_matcher_compile(relay_matcher *m, char *err, size_t errlen);

/* Number of rules added. */
size_t relay_matcher_count(const relay_matcher *m);

/* Match one event. Returns the number of matching rules, writing their ids
 * in ascending order to ids when they fit (count <= ids_cap); when the return
 * value exceeds ids_cap, ids holds some of them: call again with a larger
 * buffer. Rules of identical text are evaluated once. Returns -1 when the event
 * is malformed (or memory ran out), with the reason in `reason`.
 * max_bytes: RELAY_MAX_EVENT_BYTES, checked before any scanning.
 * now_ms: wall-clock milliseconds since the Unix epoch, for temporal rules. */
int relay_matcher_match(relay_matcher *m, const char *event, size_t len, size_t max_bytes, int64_t now_ms,
                        uint32_t *ids, size_t ids_cap, char *reason, size_t reasonlen);

/* Scratch memory for matching, one per thread that matches: with it, a
 * compiled matcher is only read, so threads can share it. NULL when out of
 * memory. */
typedef struct relay_match_state relay_match_state;
relay_match_state *relay_match_state_new(void);
void relay_match_state_free(relay_match_state *st);

/* relay_matcher_match() with the caller's scratch. m must be compiled
 * (relay_matcher_compile) and must not change while any thread matches. */
int relay_matcher_match_with(const relay_matcher *m, relay_match_state *st, const char *event, size_t len,
                             size_t max_bytes, int64_t now_ms, uint32_t *ids, size_t ids_cap, char *reason,
                             size_t reasonlen);

/* relay_matcher_match_with over the line of newline-separated events that
 * starts at `text`, without finding its end first (relay_json_scan_line):
 * `avail` bytes may be read, and eol_at_end says whether text + avail ends
 * the last line. Returns the number of matching rules (their ids in `ids`)
 * with the line's length in *len, or -1 for any line it does not settle: one
 * that is malformed, too large, or matches more rules than ids_cap holds, and
 * when out of memory. The caller then finds the line's end and calls
 * relay_matcher_match_with, which reports it as always. */
int relay_matcher_match_line(const relay_matcher *m, relay_match_state *st, const char *text, size_t avail,
                             int eol_at_end, size_t max_bytes, int64_t now_ms, uint32_t *ids, size_t ids_cap,
                             size_t *len);

/* Free the matcher and everything it owns; NULL is fine. */
void relay_matcher_free(relay_matcher *m);

#endif
