/* Whether two parsed YAML trees are the same: kinds, marks, counts, scalar
 * styles and texts. Shared by the YAML fast path's unit test and its
 * differential fuzz target, which both hold src/yaml_fast.c to libyaml. */
#ifndef RELAY_TESTS_YAML_SAME_TREE_H
#define RELAY_TESTS_YAML_SAME_TREE_H

#include "relay/yaml_doc.h"

#include <string.h>

static int
yaml_same_tree(const relay_yaml_node *a, const relay_yaml_node *b)
{
    size_t i, n;

    if (a == NULL || b == NULL) {
        return a == b;
    }
    if (a->kind != b->kind || a->line != b->line || a->col != b->col || a->count != b->count) {
        return 0;
    }
    if (a->kind == RELAY_YAML_SCALAR) {
        return a->quoted == b->quoted && a->str_tag == b->str_tag && a->len == b->len
               && memcmp(a->text, b->text, a->len) == 0 && a->text[a->len] == '\0';
    }
    n = a->kind == RELAY_YAML_MAP ? a->count * 2 : a->count;
    for (i = 0; i < n; i++) {
        if (!yaml_same_tree(a->items[i], b->items[i])) {
            return 0;
        }
    }
    return 1;
}

#endif
