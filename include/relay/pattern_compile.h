/*
 * pattern_compile: the C fast path of lua/relay/pattern.lua for app templates.
 *
 * An ordinary `events:` entry -- a map of handler, pattern and optionally timeout and
 * retries -- is turned into the matcher's normal-form JSON straight from the YAML tree
 * (include/relay/yaml_doc.h), so loading a template with thousands of rules does not
 * build ~17 Lua tables per rule only for pattern.lua to walk them.
 *
 * CONTRACT: this module accepts exactly the subset it accepts today, and its output for
 * that subset is byte for byte what relay.pattern.compile returns. Everything else --
 * every error, every unusual shape, anything it is unsure about -- it DEFERS (returns
 * -1) and the caller hands the plain node to lua/relay/pattern.lua, which owns all
 * validation and every error message. Never report an error from here, and never widen
 * the subset without widening spec/unit/23-yaml_app_spec.lua, which checks that both
 * paths agree.
 *
 * The subset:
 *   pattern    a non-empty map of at most RELAY_PATTERN_MAX_FIELDS fields, no field
 *              named twice, no field named after a written or a foreign operator of
 *              relay_matcher_ops (include/relay/matcher.h, the one list of operators);
 *   condition  a non-empty list of alternatives, or a map standing for a one-element
 *              list;
 *   alternative
 *              a scalar literal (null, bool, finite number or string by the core
 *              schema) -> {"eq":v};
 *              a one-key map {op: v} of a written operator whose operand is a string
 *              (prefix, suffix), a bool (exists) or a finite number (the thresholds
 *              gt, gte, lt, lte; so no now() operands) -> {"op":v}; any other operand
 *              kind defers;
 *              a nested group: a map that is not a one-key map with a scalar value
 *              -> {"group":{...}} (same rules as a pattern).
 *   handler    a scalar string by the core schema matching [A-Za-z0-9_.-]+.
 *   entry keys handler and pattern (required), timeout and retries (optional; passed
 *              back as nodes, checked by the Lua side), nothing else.
 *
 * Running out of memory also defers, so the caller needs no separate error path.
 */
#ifndef RELAY_PATTERN_COMPILE_H
#define RELAY_PATTERN_COMPILE_H

#include "relay/yaml_doc.h"

#include <stddef.h>

#define RELAY_PATTERN_MAX_FIELDS 32

/* A growable buffer owned by the caller; zero-initialise it, reuse it across calls
 * (each compile overwrites it) and release it with relay_pattern_buf_free. After a
 * successful compile data holds len bytes of JSON followed by a NUL. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
} relay_pattern_buf;

/* The parts of an accepted events entry; nodes point into the entry. */
typedef struct {
    const relay_yaml_node *handler; /* scalar, a valid handler name */
    const relay_yaml_node *pattern; /* map, compiled into the buffer */
    const relay_yaml_node *timeout; /* NULL when absent; not checked here */
    const relay_yaml_node *retries; /* NULL when absent; not checked here */
} relay_pattern_entry;

/*
 * Compile a pattern map into its normal form, as relay.pattern.compile would. Returns 0
 * with the JSON in *buf, or -1 when the pattern must be left to pattern.lua (*buf is
 * then unspecified but still owned by the caller).
 */
int relay_pattern_compile(const relay_yaml_node *pattern, relay_pattern_buf *buf);

/*
 * Compile one item of an app template's events list. Returns 0 with *out filled and the
 * pattern's JSON in *buf, or -1 when the whole entry must be left to the Lua validator.
 */
int relay_pattern_compile_entry(const relay_yaml_node *entry, relay_pattern_entry *out, relay_pattern_buf *buf);

/* Free the buffer's memory and zero it; safe on a zeroed buffer. */
void relay_pattern_buf_free(relay_pattern_buf *buf);

#endif
