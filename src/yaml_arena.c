/* yaml_arena: chunked memory for one YAML document and its build stack (src/yaml_arena.h). */
#include "yaml_arena.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CHUNK (64u << 10)
/* Chunks double up to this: a chunk's unused tail is heap the next
 * allocations of a bulk load cannot use (a 16 MiB cap left up to half of a
 * 10,000-rule tree's last chunk idle, past the heap the load had populated). */
#define MAX_CHUNK (1u << 20)


void *
yaml_arena_alloc_chunk(yaml_arena *arena, size_t size)
{
    yaml_arena_chunk *c = arena->cur;
    size_t cap = c == NULL ? MIN_CHUNK : c->cap * 2;

    if (cap > MAX_CHUNK) {
        cap = MAX_CHUNK;
    }
    if (cap < size) {
        cap = size;
    }
    if ((c = malloc(sizeof(*c) + cap)) == NULL) {
        return NULL;
    }
    c->next = NULL;
    c->used = size;
    c->cap = cap;
    if (arena->cur != NULL) {
        arena->cur->next = c;
    } else {
        arena->first = c;
    }
    arena->cur = c;
    return c->data;
}


void
yaml_arena_free(yaml_arena_chunk *c)
{
    while (c != NULL) {
        yaml_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
}


int
yaml_children_push(yaml_children *c, relay_yaml_node *child)
{
    relay_yaml_node **stack;

    if (c->sp == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 256;

        if ((stack = realloc(c->stack, ncap * sizeof(*stack))) == NULL) {
            return -1;
        }
        c->stack = stack;
        c->cap = ncap;
    }
    c->stack[c->sp++] = child;
    return 0;
}


int
yaml_children_take(yaml_children *c, yaml_arena *arena, relay_yaml_node *node, size_t base)
{
    size_t n = c->sp - base;

    if (n > 0) {
        if ((node->items = yaml_arena_alloc(arena, n * sizeof(*node->items))) == NULL) {
            return -1;
        }
        memcpy(node->items, c->stack + base, n * sizeof(*node->items));
    }
    c->sp = base;
    return 0;
}
