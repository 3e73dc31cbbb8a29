/*
 * rule_block: an app template's whole `events:` list compiled in one piece, for the
 * bulk commands (relay match) that only need each rule's pattern and handler name.
 *
 * Loading 10,000 rules through Lua tables (one per entry from the YAML loader, one per
 * validated event, a label string each) took most of the load's time; a block keeps
 * the entries in two arrays and one text buffer instead, and the matcher reads the
 * patterns from it directly.
 *
 * A block is built only when the result is certain to be what the Lua validator would
 * give: every entry compiles by relay_pattern_compile_entry (include/relay/
 * pattern_compile.h), none has timeout or retries (whose checks are the validator's),
 * and no handler name is written twice. Anything else is declined, and the caller
 * validates the list the ordinary way, which owns every error message.
 */
#ifndef RELAY_RULE_BLOCK_H
#define RELAY_RULE_BLOCK_H

#include "relay/pattern_compile.h"
#include "relay/yaml_doc.h"

#include <stddef.h>

typedef struct {
    size_t handler_off, handler_len; /* in relay_rule_block.text, NUL-terminated */
    size_t json_off, json_len;       /* the pattern's normal form, NUL-terminated */
    int line, col;                   /* the entry */
} relay_rule_block_entry;

typedef struct {
    relay_rule_block_entry *entries;
    size_t count;
    char *text;
    size_t text_len, text_cap;
} relay_rule_block;

/*
 * Compile the items of an events sequence into *block (zero-initialised by the
 * caller). Returns 0, or -1 when the list must be validated the ordinary way (see
 * above; running out of memory declines too), leaving *block empty. buf is scratch
 * space the caller owns, as for relay_pattern_compile_entry.
 */
int relay_rule_block_build(relay_rule_block *block, const relay_yaml_node *events, relay_pattern_buf *buf);

/* The handler name and pattern JSON of entry i (< count). */
const char *relay_rule_block_handler(const relay_rule_block *block, size_t i);

const char *relay_rule_block_json(const relay_rule_block *block, size_t i);

/* Free the block's memory and zero it; safe on a zeroed block. */
void relay_rule_block_free(relay_rule_block *block);

#endif
