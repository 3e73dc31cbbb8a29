/* rule_block: an events list compiled in one piece (include/relay/rule_block.h). */
#include "relay/rule_block.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


/* Append len bytes and a NUL to the block's text; returns their offset, or
 * SIZE_MAX when out of memory. */
static size_t
put_text(relay_rule_block *b, const char *s, size_t len)
{
    size_t off = b->text_len, need = off + len + 1, cap;
    char *grown;

    if (len > SIZE_MAX / 2 - off) {
        return SIZE_MAX;
    }
    if (need > b->text_cap) {
        cap = b->text_cap ? b->text_cap : 4096;
        while (cap < need) {
            cap *= 2;
        }
        if ((grown = realloc(b->text, cap)) == NULL) {
            return SIZE_MAX;
        }
        b->text = grown;
        b->text_cap = cap;
    }
    memcpy(b->text + off, s, len);
    b->text[off + len] = '\0';
    b->text_len = need;
    return off;
}


static int
add_entry(relay_rule_block *b, const relay_yaml_node *item, relay_pattern_buf *buf)
{
    relay_pattern_entry e;
    relay_rule_block_entry *out = &b->entries[b->count];

    if (relay_pattern_compile_entry(item, &e, buf) != 0) {
        return -1;
    }
    out->handler_off = put_text(b, e.handler->text, e.handler->len);
    out->json_off = put_text(b, buf->data, buf->len);
    if (out->handler_off == SIZE_MAX || out->json_off == SIZE_MAX) {
        return -1;
    }
    out->handler_len = e.handler->len;
    out->json_len = buf->len;
    out->line = item->line;
    out->col = item->col;
    b->count++;
    return 0;
}


static uint64_t
name_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    size_t i;

    for (i = 0; i < len; i++) {
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    }
    return h;
}


static int
key_is(const relay_yaml_node *key, const char *name)
{
    size_t len = strlen(name);

    return key->kind == RELAY_YAML_SCALAR && key->len == len && memcmp(key->text, name, len) == 0;
}


/* The handler name node of an entry that may go in a block: a map with a
 * scalar handler and neither timeout nor retries; else NULL. */
static const relay_yaml_node *
plain_handler(const relay_yaml_node *item)
{
    const relay_yaml_node *handler = NULL, *key;
    size_t i;

    if (item->kind != RELAY_YAML_MAP) {
        return NULL;
    }
    for (i = 0; i < item->count; i++) {
        key = relay_yaml_map_key(item, i);
        if (key_is(key, "timeout") || key_is(key, "retries")) {
            return NULL;
        }
        if (key_is(key, "handler")) {
            handler = relay_yaml_map_value(item, i);
        }
    }
    return handler != NULL && handler->kind == RELAY_YAML_SCALAR ? handler : NULL;
}


/* Whether some handler name of the block is written twice (1), not (0), or -1
 * out of memory. An open-addressing set of entry numbers + 1, at most half
 * full, over the block's own copies of the names (compact, unlike the tree). */
static int
has_duplicate(const relay_rule_block *b)
{
    size_t cap = 16, mask, i, j, *slots;
    const relay_rule_block_entry *e, *other;
    int dup = 0;

    while (cap < 2 * b->count) {
        cap *= 2;
    }
    if ((slots = calloc(cap, sizeof(*slots))) == NULL) {
        return -1;
    }
    mask = cap - 1;
    for (i = 0; i < b->count && !dup; i++) {
        e = &b->entries[i];
        for (j = name_hash(b->text + e->handler_off, e->handler_len) & mask; slots[j] != 0; j = (j + 1) & mask) {
            other = &b->entries[slots[j] - 1];
            if (other->handler_len == e->handler_len
                && memcmp(b->text + other->handler_off, b->text + e->handler_off, e->handler_len) == 0) {
                dup = 1;
                break;
            }
        }
        slots[j] = i + 1;
    }
    free(slots);
    return dup;
}


int
relay_rule_block_build(relay_rule_block *block, const relay_yaml_node *events, relay_pattern_buf *buf)
{
    size_t i;
    int ok;

    memset(block, 0, sizeof(*block));
    if (events->kind != RELAY_YAML_SEQ || events->count == 0) {
        return -1;
    }
    ok = (block->entries = calloc(events->count, sizeof(*block->entries))) != NULL;
    /* One walk: each entry is checked and compiled while its nodes are in the
     * cache (a first walk for the checks alone missed it over a large tree).
     * The first entry that does not qualify ends it. */
    for (i = 0; ok && i < events->count; i++) {
        ok = plain_handler(events->items[i]) != NULL && add_entry(block, events->items[i], buf) == 0;
    }
    if (!ok || has_duplicate(block) != 0) {
        relay_rule_block_free(block);
        return -1;
    }
    return 0;
}


const char *
relay_rule_block_handler(const relay_rule_block *block, size_t i)
{
    return block->text + block->entries[i].handler_off;
}


const char *
relay_rule_block_json(const relay_rule_block *block, size_t i)
{
    return block->text + block->entries[i].json_off;
}


void
relay_rule_block_free(relay_rule_block *block)
{
    free(block->entries);
    free(block->text);
    memset(block, 0, sizeof(*block));
}
