/*
 * yaml_arena: the memory of one parsed YAML document (yaml_doc.c, yaml_fast.c), and
 * the scratch stack its collections are built on.
 *
 * Every node, scalar text and item array lives in a chain of chunks: one malloc per
 * ~64 KB instead of three per node, and one free of the chain. The root is the first
 * allocation of the first chunk, which is how relay_yaml_free finds the chain.
 */
#ifndef RELAY_YAML_ARENA_H
#define RELAY_YAML_ARENA_H

#include "relay/yaml_doc.h"

#include <stddef.h>

typedef struct yaml_arena_chunk {
    struct yaml_arena_chunk *next;
    size_t used, cap;
    _Alignas(relay_yaml_node) unsigned char data[];
} yaml_arena_chunk;

typedef struct yaml_arena {
    yaml_arena_chunk *first, *cur;
} yaml_arena;

/* What the arena holds (nodes, item arrays of pointers, texts) needs no more
 * than a node's alignment; 16 cost a 10,000-rule template's tree a fifth more
 * memory. */
#define YAML_ARENA_ALIGN _Alignof(relay_yaml_node)

/* yaml_arena_alloc when the current chunk is full: size (aligned) bytes at the
 * start of a new chunk, or NULL when out of memory. */
void *yaml_arena_alloc_chunk(yaml_arena *arena, size_t size);

/* size bytes, aligned for a node, or NULL when out of memory. Inline: a large
 * template's tree is ~170,000 allocations. */
static inline void *
yaml_arena_alloc(yaml_arena *arena, size_t size)
{
    yaml_arena_chunk *c = arena->cur;
    void *p;

    size = (size + YAML_ARENA_ALIGN - 1) & ~(size_t)(YAML_ARENA_ALIGN - 1);
    if (c == NULL || c->cap - c->used < size) {
        return yaml_arena_alloc_chunk(arena, size);
    }
    p = c->data + c->used;
    c->used += size;
    return p;
}

/* Free the chain that starts at c (NULL is fine). */
void yaml_arena_free(yaml_arena_chunk *c);

/* Finished children parked until their collection ends (free stack when done). */
typedef struct yaml_children {
    relay_yaml_node **stack;
    size_t sp, cap;
} yaml_children;

/* Park child; 0, or -1 when out of memory. */
int yaml_children_push(yaml_children *c, relay_yaml_node *child);

/* Move the children parked since `base` into node's item array, allocated in
 * arena; 0, or -1 when out of memory. */
int yaml_children_take(yaml_children *c, yaml_arena *arena, relay_yaml_node *node, size_t base);

#endif
