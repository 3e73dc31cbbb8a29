/*
 * pattern_compile: events entries of an app template into normal-form JSON, for the
 * subset documented in include/relay/pattern_compile.h. The helpers mirror the
 * functions of lua/relay/pattern.lua they stand in for; each returns 0 or -1 (defer).
 */
#include "relay/pattern_compile.h"
#include "relay/matcher.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const entry_keys[] = {"handler", "pattern", "timeout", "retries", NULL};


/* jb_put when the buffer must grow. */
static int
jb_grow(relay_pattern_buf *b, size_t n)
{
    size_t ncap = b->cap ? b->cap : 256;
    char *d;

    while (b->len + n + 1 > ncap) {
        ncap *= 2;
    }
    if ((d = realloc(b->data, ncap)) == NULL) {
        return -1;
    }
    b->data = d;
    b->cap = ncap;
    return 0;
}


/* Inline, so that the many short constant pieces are plain stores. */
static inline int
jb_put(relay_pattern_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap && jb_grow(b, n) != 0) {
        return -1;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}


#define JB_LIT(b, s) jb_put((b), (s), sizeof(s) - 1)


/* The bytes yaml.json_string escapes: '"', '\\' and control bytes (0x00-0x1f, 0x7f). */
static const unsigned char escaped_byte[256] = {
    [0x00 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
    [0x7f] = 1,
};


/* As yaml.json_string: '"', '\\' and control bytes (0x00-0x1f, 0x7f) escaped. */
static int
jb_string(relay_pattern_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t i, run = 0;
    char esc[6];

    if (JB_LIT(b, "\"") != 0) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        size_t elen = 2;
        if (!escaped_byte[c]) {
            continue;
        }
        switch (c) {
        case '"':
            e = "\\\"";
            break;
        case '\\':
            e = "\\\\";
            break;
        case '\b':
            e = "\\b";
            break;
        case '\f':
            e = "\\f";
            break;
        case '\n':
            e = "\\n";
            break;
        case '\r':
            e = "\\r";
            break;
        case '\t':
            e = "\\t";
            break;
        default:
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            e = esc;
            elen = 6;
        }
        if (jb_put(b, s + run, i - run) != 0 || jb_put(b, e, elen) != 0) {
            return -1;
        }
        run = i + 1;
    }
    if (jb_put(b, s + run, n - run) != 0) {
        return -1;
    }
    return JB_LIT(b, "\"");
}


/* As yaml.json_number; -1 for NaN and infinities (the Lua path reports those). */
static int
jb_number(relay_pattern_buf *b, double n)
{
    static const char *const fmts[] = {"%.15g", "%.16g", "%.17g"};
    char text[40];
    int i, len = 0;

    if (n != n || isinf(n)) {
        return -1;
    }
    if (n == floor(n) && n > -9007199254740992.0 && n < 9007199254740992.0) {
        len = snprintf(text, sizeof(text), "%lld", (long long)n);
        return jb_put(b, text, (size_t)len);
    }
    for (i = 0; i < 3; i++) {
        len = snprintf(text, sizeof(text), fmts[i], n);
        if (i == 2 || strtod(text, NULL) == n) {
            break;
        }
    }
    return jb_put(b, text, (size_t)len);
}


/* The operator a pattern author writes as {key: operand}, or NULL. */
static const relay_matcher_op *
written_operator(const relay_yaml_node *key)
{
    const relay_matcher_op *op = relay_matcher_op_find(key->text, key->len);

    return op != NULL && op->written ? op : NULL;
}


/* A key pattern.lua refuses as a field name: a written operator or a foreign one. */
static int
reserved_field(const relay_yaml_node *key)
{
    const relay_matcher_op *op = relay_matcher_op_find(key->text, key->len);

    return op != NULL && (op->written || op->operand == RELAY_OPERAND_FOREIGN);
}


static int compile_group(relay_pattern_buf *b, const relay_yaml_node *map);


/* {"<op>": then the operand written by put, then "}". */
static int
put_operator(relay_pattern_buf *b, const relay_matcher_op *op)
{
    return jb_put(b, "{\"", 2) || jb_put(b, op->name, op->len) || jb_put(b, "\":", 2);
}


/* A one-key map whose key is the written operator op and whose value is a scalar of
 * the operand's type; thresholds take numbers only, so now() operands are deferred,
 * and so is an operand kind this fast path does not know. */
static int
operator_alternative(relay_pattern_buf *b, const relay_matcher_op *op, const relay_yaml_node *value)
{
    relay_yaml_value v;

    relay_yaml_resolve(value, &v);
    switch ((relay_matcher_operand)op->operand) {
    case RELAY_OPERAND_STRING:
        if (v.type != RELAY_YAML_STR) {
            return -1;
        }
        return put_operator(b, op) || jb_string(b, value->text, value->len) || JB_LIT(b, "}");
    case RELAY_OPERAND_BOOLEAN:
        if (v.type != RELAY_YAML_BOOL) {
            return -1;
        }
        return put_operator(b, op) || (v.boolean ? JB_LIT(b, "true}") : JB_LIT(b, "false}"));
    case RELAY_OPERAND_THRESHOLD:
        if (v.type != RELAY_YAML_INT && v.type != RELAY_YAML_FLOAT) {
            return -1;
        }
        return put_operator(b, op) || jb_number(b, v.number) || JB_LIT(b, "}");
    default:
        return -1;
    }
}


/* A map inside a field's list: one operator, or a nested group. */
static int
map_alternative(relay_pattern_buf *b, const relay_yaml_node *map)
{
    const relay_matcher_op *op;
    const relay_yaml_node *value;
    size_t i;

    if (map->count == 0) {
        return -1;
    }
    for (i = 0; i < map->count; i++) {
        if (written_operator(relay_yaml_map_key(map, i)) != NULL && map->count > 1) {
            return -1;
        }
    }
    op = written_operator(relay_yaml_map_key(map, 0));
    value = relay_yaml_map_value(map, 0);
    if (map->count == 1 && op != NULL) {
        if (value->kind != RELAY_YAML_SCALAR) {
            return -1;
        }
        return operator_alternative(b, op, value);
    }
    /* {word: scalar}: a typo'd operator or a condition that is not a list; pattern.lua
     * says which. */
    if (map->count == 1 && value->kind == RELAY_YAML_SCALAR) {
        return -1;
    }
    return JB_LIT(b, "{\"group\":") || compile_group(b, map) || JB_LIT(b, "}");
}


static int
alternative(relay_pattern_buf *b, const relay_yaml_node *node)
{
    relay_yaml_value v;

    if (node->kind == RELAY_YAML_MAP) {
        return map_alternative(b, node);
    }
    if (node->kind != RELAY_YAML_SCALAR) {
        return -1;
    }
    relay_yaml_resolve(node, &v);
    if (JB_LIT(b, "{\"eq\":") != 0) {
        return -1;
    }
    switch (v.type) {
    case RELAY_YAML_NULL:
        return JB_LIT(b, "null}");
    case RELAY_YAML_BOOL:
        return v.boolean ? JB_LIT(b, "true}") : JB_LIT(b, "false}");
    case RELAY_YAML_INT:
    case RELAY_YAML_FLOAT:
        return jb_number(b, v.number) || JB_LIT(b, "}");
    case RELAY_YAML_STR:
        break;
    }
    return jb_string(b, node->text, node->len) || JB_LIT(b, "}");
}


/* A field's condition: a non-empty list, or a map standing for a one-element list. */
static int
condition(relay_pattern_buf *b, const relay_yaml_node *node)
{
    size_t i;

    if (node->kind == RELAY_YAML_MAP) {
        return JB_LIT(b, "[") || alternative(b, node) || JB_LIT(b, "]");
    }
    if (node->kind != RELAY_YAML_SEQ || node->count == 0 || JB_LIT(b, "[") != 0) {
        return -1;
    }
    for (i = 0; i < node->count; i++) {
        if ((i > 0 && JB_LIT(b, ",") != 0) || alternative(b, node->items[i]) != 0) {
            return -1;
        }
    }
    return JB_LIT(b, "]");
}


/* A group of fields: no operator or foreign names, no field named twice. */
static int
compile_group(relay_pattern_buf *b, const relay_yaml_node *map)
{
    const relay_yaml_node *key;
    size_t i, j;

    if (map->count > RELAY_PATTERN_MAX_FIELDS || JB_LIT(b, "{") != 0) {
        return -1;
    }
    for (i = 0; i < map->count; i++) {
        key = relay_yaml_map_key(map, i);
        if (reserved_field(key)) {
            return -1;
        }
        for (j = 0; j < i; j++) {
            const relay_yaml_node *prev = relay_yaml_map_key(map, j);
            if (prev->len == key->len && memcmp(prev->text, key->text, key->len) == 0) {
                return -1;
            }
        }
        if ((i > 0 && JB_LIT(b, ",") != 0) || jb_string(b, key->text, key->len) != 0 || JB_LIT(b, ":") != 0
            || condition(b, relay_yaml_map_value(map, i)) != 0) {
            return -1;
        }
    }
    return JB_LIT(b, "}");
}


/* [A-Za-z0-9_.-]+ and a string by the core schema. */
static int
handler_ok(const relay_yaml_node *node)
{
    relay_yaml_value v;
    size_t i;

    if (node->kind != RELAY_YAML_SCALAR || node->len == 0) {
        return 0;
    }
    relay_yaml_resolve(node, &v);
    if (v.type != RELAY_YAML_STR) {
        return 0;
    }
    for (i = 0; i < node->len; i++) {
        unsigned char c = (unsigned char)node->text[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'
              || c == '-')) {
            return 0;
        }
    }
    return 1;
}


/* Find handler/pattern/timeout/retries of an entry (in entry_keys order); 0 when any
 * other key is present, a key repeats, or handler or pattern is missing. */
static int
entry_fields(const relay_yaml_node *entry, const relay_yaml_node *out[4])
{
    size_t i;
    int k;

    memset(out, 0, 4 * sizeof(*out));
    if (entry->kind != RELAY_YAML_MAP) {
        return 0;
    }
    for (i = 0; i < entry->count; i++) {
        const relay_yaml_node *key = relay_yaml_map_key(entry, i);
        for (k = 0; entry_keys[k] != NULL; k++) {
            if (strlen(entry_keys[k]) == key->len && memcmp(key->text, entry_keys[k], key->len) == 0) {
                break;
            }
        }
        if (entry_keys[k] == NULL || out[k] != NULL) {
            return 0;
        }
        out[k] = relay_yaml_map_value(entry, i);
    }
    return out[0] != NULL && out[1] != NULL;
}


int
relay_pattern_compile(const relay_yaml_node *pattern, relay_pattern_buf *buf)
{
    buf->len = 0;
    if (pattern->kind != RELAY_YAML_MAP || pattern->count == 0 || compile_group(buf, pattern) != 0) {
        return -1;
    }
    buf->data[buf->len] = '\0'; /* jb_put always leaves room for it */
    return 0;
}


int
relay_pattern_compile_entry(const relay_yaml_node *entry, relay_pattern_entry *out, relay_pattern_buf *buf)
{
    const relay_yaml_node *f[4];

    memset(out, 0, sizeof(*out));
    buf->len = 0;
    if (!entry_fields(entry, f) || !handler_ok(f[0]) || relay_pattern_compile(f[1], buf) != 0) {
        return -1;
    }
    out->handler = f[0];
    out->pattern = f[1];
    out->timeout = f[2];
    out->retries = f[3];
    return 0;
}


void
relay_pattern_buf_free(relay_pattern_buf *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}
