/* libFuzzer target for the C YAML layer: any input must either parse into a tree whose
 * marks are sane and whose scalars resolve, or fail with a "line:col: " error; and
 * whenever the fast path (src/yaml_fast.c) reads an input, libyaml alone must read
 * the same tree from it. A sequence is also read as an events list: a rule block
 * made of it holds each entry as pattern_compile compiles it alone, and each entry's
 * text is one the validating matcher reader accepts and gets the same id from
 * relay_matcher_add_compiled, which skips that validation. */
#include "../../src/yaml_fast.h"
#include "../common/yaml_same_tree.h"
#include "relay/matcher.h"
#include "relay/rule_block.h"
#include "relay/yaml_doc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void
walk(const relay_yaml_node *node, int depth)
{
    relay_yaml_value v;
    size_t i, n;

    if (depth > RELAY_YAML_MAX_DEPTH + 1 || node->line < 1 || node->col < 1) {
        abort();
    }
    if (node->kind == RELAY_YAML_SCALAR) {
        if (node->text == NULL || node->text[node->len] != '\0') {
            abort();
        }
        relay_yaml_resolve(node, &v);
        return;
    }
    n = node->kind == RELAY_YAML_MAP ? node->count * 2 : node->count;
    for (i = 0; i < n; i++) {
        if (node->kind == RELAY_YAML_MAP && i % 2 == 0 && node->items[i]->kind != RELAY_YAML_SCALAR) {
            abort();
        }
        walk(node->items[i], depth + 1);
    }
}


/* The fast path's tree, when it takes the input, is libyaml's. */
static void
check_fast_path(const char *text, size_t size)
{
    char err[RELAY_YAML_ERR_MAX];
    relay_yaml_node *fast = NULL, *reference = NULL;

    if (!relay_yaml_fast_parse(text, size, &fast)) {
        return;
    }
    if (relay_yaml_parse_libyaml(text, size, &reference, err, sizeof(err)) != 0 || !yaml_same_tree(fast, reference)) {
        abort();
    }
    relay_yaml_free(fast);
    relay_yaml_free(reference);
}


static void
check_rule_block(const relay_yaml_node *root)
{
    relay_rule_block block;
    relay_pattern_buf buf = {0};
    relay_pattern_entry e;
    relay_matcher *m, *compiled;
    char why[256];
    int id;
    size_t i;

    if (root->kind != RELAY_YAML_SEQ || relay_rule_block_build(&block, root, &buf) != 0) {
        relay_pattern_buf_free(&buf);
        return;
    }
    m = relay_matcher_new();
    compiled = relay_matcher_new();
    if (block.count != root->count || m == NULL || compiled == NULL
        || relay_matcher_reserve(compiled, block.count, why, sizeof(why)) != 0) {
        abort();
    }
    for (i = 0; i < block.count; i++) {
        if (relay_pattern_compile_entry(root->items[i], &e, &buf) != 0
            || strcmp(relay_rule_block_json(&block, i), buf.data) != 0
            || strlen(relay_rule_block_handler(&block, i)) != block.entries[i].handler_len
            || block.entries[i].line != root->items[i]->line
            || (id =
                    relay_matcher_add(m, relay_rule_block_json(&block, i), block.entries[i].json_len, why, sizeof(why)))
                   < 0
            || relay_matcher_add_compiled(compiled, relay_rule_block_json(&block, i), block.entries[i].json_len, why,
                                          sizeof(why))
                   != id) {
            abort();
        }
    }
    relay_matcher_free(compiled);
    relay_matcher_free(m);
    relay_rule_block_free(&block);
    relay_pattern_buf_free(&buf);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[RELAY_YAML_ERR_MAX];
    relay_yaml_node *root = NULL;
    unsigned long line, col;
    char *end;

    check_fast_path((const char *)data, size);
    if (relay_yaml_parse((const char *)data, size, &root, err, sizeof(err)) == 0) {
        if (root != NULL) {
            walk(root, 0);
            check_rule_block(root);
        }
        relay_yaml_free(root);
        return 0;
    }
    if (root != NULL) {
        abort();
    }
    /* Every error starts with "line:col: ". */
    line = strtoul(err, &end, 10);
    if (line < 1 || *end != ':') {
        abort();
    }
    col = strtoul(end + 1, &end, 10);
    if (col < 1 || strncmp(end, ": ", 2) != 0) {
        abort();
    }
    return 0;
}
