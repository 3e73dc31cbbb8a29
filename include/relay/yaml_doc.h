/*
 * yaml_doc: a YAML document as a tree of nodes that remember where they start.
 *
 * libyaml's event stream is turned into maps, sequences and scalars, each with the
 * 1-based line:col of its first character, so every validation error further up can
 * point at the offending node. The layer is deliberately strict and small:
 *
 *   - one document per file (a second document is an error);
 *   - aliases (*name) are rejected: templates have no use for them and refusing them
 *     makes "billion laughs" expansion impossible; anchors (&name) are accepted and
 *     ignored;
 *   - the only explicit tag accepted is !!str (forces a string); every other tag is an
 *     error, so no scalar ever means something other than what the core schema says;
 *   - mapping keys must be scalars; two keys with the same resolved value in one map
 *     are an error naming both positions;
 *   - nesting is bounded (RELAY_YAML_MAX_DEPTH), input must be UTF-8.
 *
 * Errors are rendered "line:col: message" into the caller's buffer.
 *
 * Scalars resolve by the YAML 1.2 core schema (relay_yaml_resolve): null, bool, int
 * (decimal, 0o octal, 0x hex), float (incl. .inf/.nan) or string. Quoted scalars and
 * !!str scalars are always strings.
 */
#ifndef RELAY_YAML_DOC_H
#define RELAY_YAML_DOC_H

#include <stddef.h>

#define RELAY_YAML_MAX_DEPTH 64
#define RELAY_YAML_ERR_MAX 256

typedef enum { RELAY_YAML_SCALAR, RELAY_YAML_SEQ, RELAY_YAML_MAP } relay_yaml_kind;

typedef enum { RELAY_YAML_NULL, RELAY_YAML_BOOL, RELAY_YAML_INT, RELAY_YAML_FLOAT, RELAY_YAML_STR } relay_yaml_type;

typedef struct relay_yaml_node relay_yaml_node;

struct relay_yaml_node {
    relay_yaml_kind kind;
    int line;              /* 1-based */
    int col;               /* 1-based, in characters */
    unsigned char quoted;  /* scalar written quoted, literal or folded */
    unsigned char str_tag; /* scalar carried an explicit !!str */
    /* A scalar's fields share room with a collection's: a large template's
     * tree is ~10 nodes a rule, and 32 bytes a node rather than 48 is less
     * memory to fill and read back. Read only the kind's own. */
    union {
        char *text;              /* scalar: raw text, NUL-terminated (may contain NULs) */
        relay_yaml_node **items; /* seq: items; map: key0, value0, key1, value1, ... */
    };
    union {
        size_t len;   /* scalar: length of text */
        size_t count; /* seq: number of items; map: number of pairs */
    };
};

typedef struct {
    relay_yaml_type type;
    int boolean;
    double number; /* INT and FLOAT */
} relay_yaml_value;

/*
 * Parse `len` bytes of YAML. On success returns 0 and stores the root in *root (NULL
 * when the stream holds no document at all). On failure returns -1, *root is NULL and
 * err holds "line:col: message".
 */
int relay_yaml_parse(const char *text, size_t len, relay_yaml_node **root, char *err, size_t errlen);

/* relay_yaml_parse through libyaml alone. relay_yaml_parse reads the plain shape of
 * templates itself (src/yaml_fast.c, ~5x faster) and leaves everything else, errors
 * included, to libyaml; tests compare the two trees. */
int relay_yaml_parse_libyaml(const char *text, size_t len, relay_yaml_node **root, char *err, size_t errlen);

void relay_yaml_free(relay_yaml_node *node);

/* Whether a plain scalar starting with c may be other than a string: every
 * null, boolean, integer and float of the core schema starts with one of
 * "nNtTfF~+-.0123456789"; any other plain scalar is a string without further
 * tests (relay_yaml_resolve answers those at once). */
int relay_yaml_may_resolve(char c);

/* Resolve a scalar node by the YAML 1.2 core schema. */
void relay_yaml_resolve(const relay_yaml_node *node, relay_yaml_value *out);

/* Map accessors: the i-th key and value (i < count). */
relay_yaml_node *relay_yaml_map_key(const relay_yaml_node *map, size_t i);

relay_yaml_node *relay_yaml_map_value(const relay_yaml_node *map, size_t i);

#endif
