/* yaml_arena: chunked memory for one YAML document and its build stack (src/yaml_arena.h). */
#include "yaml_arena.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CHUNK (64u << 10)
#define MAX_CHUNK (16u << 20)
#define ALIGN 16u


void *
yaml_arena_alloc(yaml_arena *arena, size_t size)
{
    yaml_arena_chunk *c = arena->cur;
    size_t cap;
    void *p;

    size = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (c == NULL || c->cap - c->used < size) {
        cap = c == NULL ? MIN_CHUNK : c->cap * 2;
        if (cap > MAX_CHUNK) {
            cap = MAX_CHUNK;
        }
        if (cap < size) {
            cap = size;
        }
        c = malloc(sizeof(*c) + cap);
        if (c == NULL) {
            return NULL;
        }
        c->next = NULL;
        c->used = 0;
        c->cap = cap;
        if (arena->cur != NULL) {
            arena->cur->next = c;
        } else {
            arena->first = c;
        }
        arena->cur = c;
    }
    p = c->data + c->used;
    c->used += size;
    return p;
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
