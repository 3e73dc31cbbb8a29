/*
 * yaml_doc: libyaml events -> a node tree with 1-based marks (see yaml_doc.h for the
 * rules this layer enforces and why).
 */
#include "relay/yaml_doc.h"

#include "yaml_arena.h"
#include "yaml_fast.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define STR_TAG "tag:yaml.org,2002:str"

typedef struct {
    yaml_parser_t parser;
    const char *text;
    size_t len;
    char *err;
    size_t errlen;
    yaml_arena arena;
    yaml_children children; /* of the collections being built */
} parse_ctx;


static void
set_err(parse_ctx *ctx, size_t line, size_t col, const char *fmt, ...)
{
    va_list ap;
    int n;

    n = snprintf(ctx->err, ctx->errlen, "%zu:%zu: ", line, col);
    if (n < 0 || (size_t)n >= ctx->errlen) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(ctx->err + n, ctx->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}


/* Reader errors carry a byte offset, not a mark: count lines and UTF-8 characters. */
static void
offset_to_mark(const char *text, size_t len, size_t offset, size_t *line, size_t *col)
{
    size_t i;

    *line = 1;
    *col = 1;
    if (offset > len) {
        offset = len;
    }
    for (i = 0; i < offset; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') {
            (*line)++;
            *col = 1;
        } else if ((c & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}


/* libyaml's words for a tab in indentation ("found character that cannot
 * start any token") do not say what to change; its mark is on the tab. */
static int
at_tab(const parse_ctx *ctx, const yaml_parser_t *p)
{
    return p->problem_mark.index < ctx->len && ctx->text[p->problem_mark.index] == '\t';
}


static void
set_parser_err(parse_ctx *ctx)
{
    yaml_parser_t *p = &ctx->parser;
    size_t line, col;

    switch (p->error) {
    case YAML_MEMORY_ERROR:
        set_err(ctx, 1, 1, "out of memory while parsing YAML");
        break;
    case YAML_READER_ERROR:
        offset_to_mark(ctx->text, ctx->len, p->problem_offset, &line, &col);
        if (p->problem_value != -1) {
            set_err(ctx, line, col, "%s (byte 0x%02X); the file must be UTF-8",
                    p->problem ? p->problem : "invalid input", (unsigned)p->problem_value & 0xFF);
        } else {
            set_err(ctx, line, col, "%s; the file must be UTF-8", p->problem ? p->problem : "invalid input");
        }
        break;
    default:
        if (at_tab(ctx, p)) {
            set_err(ctx, p->problem_mark.line + 1, p->problem_mark.column + 1,
                    "tabs are not allowed for indentation; indent with spaces");
        } else if (p->context) {
            set_err(ctx, p->problem_mark.line + 1, p->problem_mark.column + 1, "%s %s (line %zu:%zu)",
                    p->problem ? p->problem : "invalid YAML", p->context, p->context_mark.line + 1,
                    p->context_mark.column + 1);
        } else {
            set_err(ctx, p->problem_mark.line + 1, p->problem_mark.column + 1, "%s",
                    p->problem ? p->problem : "invalid YAML");
        }
        break;
    }
}


static int
next_event(parse_ctx *ctx, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&ctx->parser, ev)) {
        set_parser_err(ctx);
        return -1;
    }
    return 0;
}


static void *
arena_alloc(parse_ctx *ctx, size_t size)
{
    return yaml_arena_alloc(&ctx->arena, size);
}


static relay_yaml_node *
new_node(parse_ctx *ctx, relay_yaml_kind kind, const yaml_mark_t *mark)
{
    relay_yaml_node *node = arena_alloc(ctx, sizeof(*node));

    if (node == NULL) {
        set_err(ctx, mark->line + 1, mark->column + 1, "out of memory");
        return NULL;
    }
    memset(node, 0, sizeof(*node));
    node->kind = kind;
    node->line = (int)mark->line + 1;
    node->col = (int)mark->column + 1;
    return node;
}


/* Park a finished child on the scratch stack until its collection ends. */
static int
push_child(parse_ctx *ctx, relay_yaml_node *child)
{
    if (yaml_children_push(&ctx->children, child) != 0) {
        set_err(ctx, child->line, child->col, "out of memory");
        return -1;
    }
    return 0;
}


/* Move the children parked since `base` into the collection's own item array. */
static int
take_children(parse_ctx *ctx, relay_yaml_node *node, size_t base)
{
    if (yaml_children_take(&ctx->children, &ctx->arena, node, base) != 0) {
        set_err(ctx, node->line, node->col, "out of memory");
        return -1;
    }
    return 0;
}


static relay_yaml_node *
build_scalar(parse_ctx *ctx, yaml_event_t *ev)
{
    const char *tag = (const char *)ev->data.scalar.tag;
    relay_yaml_node *node;

    if (tag != NULL && strcmp(tag, STR_TAG) != 0) {
        set_err(ctx, ev->start_mark.line + 1, ev->start_mark.column + 1,
                "YAML tag %s is not supported (only !!str is); remove the tag", tag);
        return NULL;
    }
    node = new_node(ctx, RELAY_YAML_SCALAR, &ev->start_mark);
    if (node == NULL) {
        return NULL;
    }
    node->len = ev->data.scalar.length;
    node->text = arena_alloc(ctx, node->len + 1);
    if (node->text == NULL) {
        set_err(ctx, ev->start_mark.line + 1, ev->start_mark.column + 1, "out of memory");
        return NULL;
    }
    memcpy(node->text, ev->data.scalar.value, node->len);
    node->text[node->len] = '\0';
    node->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    node->str_tag = tag != NULL;
    return node;
}


static int
values_equal(const relay_yaml_node *a, const relay_yaml_node *b)
{
    relay_yaml_value va, vb;

    relay_yaml_resolve(a, &va);
    relay_yaml_resolve(b, &vb);
    switch (va.type) {
    case RELAY_YAML_NULL:
        return vb.type == RELAY_YAML_NULL;
    case RELAY_YAML_BOOL:
        return vb.type == RELAY_YAML_BOOL && va.boolean == vb.boolean;
    case RELAY_YAML_INT:
    case RELAY_YAML_FLOAT:
        return (vb.type == RELAY_YAML_INT || vb.type == RELAY_YAML_FLOAT) && va.number == vb.number;
    case RELAY_YAML_STR:
        return vb.type == RELAY_YAML_STR && a->len == b->len && memcmp(a->text, b->text, a->len) == 0;
    }
    return 0;
}


static int
check_duplicate(parse_ctx *ctx, size_t base, size_t pairs, const relay_yaml_node *key)
{
    size_t i;

    for (i = 0; i < pairs; i++) {
        const relay_yaml_node *prev = ctx->children.stack[base + i * 2];
        if (values_equal(prev, key)) {
            set_err(ctx, key->line, key->col, "duplicate key \"%.*s\" (first at %d:%d)",
                    (int)(key->len > 64 ? 64 : key->len), key->text, prev->line, prev->col);
            return -1;
        }
    }
    return 0;
}


static relay_yaml_node *build_node(parse_ctx *ctx, yaml_event_t *ev, int depth);


/* Read one event and build the node it starts; *end is set when it is `end_type`. */
static relay_yaml_node *
build_child(parse_ctx *ctx, int depth, yaml_event_type_t end_type, int *end)
{
    yaml_event_t ev;
    relay_yaml_node *node;

    *end = 0;
    if (next_event(ctx, &ev) != 0) {
        return NULL;
    }
    if (ev.type == end_type) {
        *end = 1;
        yaml_event_delete(&ev);
        return NULL;
    }
    node = build_node(ctx, &ev, depth);
    yaml_event_delete(&ev);
    return node;
}


static int
fill_seq(parse_ctx *ctx, relay_yaml_node *seq, int depth)
{
    size_t base = ctx->children.sp;
    relay_yaml_node *item;
    int end;

    for (;;) {
        item = build_child(ctx, depth + 1, YAML_SEQUENCE_END_EVENT, &end);
        if (end) {
            return take_children(ctx, seq, base);
        }
        if (item == NULL || push_child(ctx, item) != 0) {
            return -1;
        }
        seq->count++;
    }
}


static int
fill_map(parse_ctx *ctx, relay_yaml_node *map, int depth)
{
    size_t base = ctx->children.sp;
    relay_yaml_node *key, *value;
    int end;

    for (;;) {
        key = build_child(ctx, depth + 1, YAML_MAPPING_END_EVENT, &end);
        if (end) {
            return take_children(ctx, map, base);
        }
        if (key == NULL) {
            return -1;
        }
        if (key->kind != RELAY_YAML_SCALAR) {
            set_err(ctx, key->line, key->col, "mapping keys must be scalars");
            return -1;
        }
        if (check_duplicate(ctx, base, map->count, key) != 0 || push_child(ctx, key) != 0) {
            return -1;
        }
        value = build_child(ctx, depth + 1, YAML_MAPPING_END_EVENT, &end);
        if (end) {
            set_err(ctx, key->line, key->col, "mapping key without a value");
        }
        if (value == NULL || push_child(ctx, value) != 0) {
            return -1;
        }
        map->count++;
    }
}


static relay_yaml_node *
build_collection(parse_ctx *ctx, yaml_event_t *ev, int depth)
{
    int is_map = ev->type == YAML_MAPPING_START_EVENT;
    const char *tag = (const char *)(is_map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag);
    relay_yaml_node *node;
    int rc;

    if (tag != NULL) {
        set_err(ctx, ev->start_mark.line + 1, ev->start_mark.column + 1,
                "YAML tag %s is not supported on a %s; remove the tag", tag, is_map ? "mapping" : "sequence");
        return NULL;
    }
    if (depth >= RELAY_YAML_MAX_DEPTH) {
        set_err(ctx, ev->start_mark.line + 1, ev->start_mark.column + 1, "nesting deeper than %d levels",
                RELAY_YAML_MAX_DEPTH);
        return NULL;
    }
    node = new_node(ctx, is_map ? RELAY_YAML_MAP : RELAY_YAML_SEQ, &ev->start_mark);
    if (node == NULL) {
        return NULL;
    }
    rc = is_map ? fill_map(ctx, node, depth) : fill_seq(ctx, node, depth);
    return rc == 0 ? node : NULL; /* on failure the arena goes as a whole */
}


static relay_yaml_node *
build_node(parse_ctx *ctx, yaml_event_t *ev, int depth)
{
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        return build_scalar(ctx, ev);
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        return build_collection(ctx, ev, depth);
    case YAML_ALIAS_EVENT:
        set_err(ctx, ev->start_mark.line + 1, ev->start_mark.column + 1,
                "YAML aliases (*%s) are not supported; write the value out", (const char *)ev->data.alias.anchor);
        return NULL;
    default:
        set_err(ctx, ev->start_mark.line + 1, ev->start_mark.column + 1, "unexpected YAML event");
        return NULL;
    }
}


/* After the first document: only the stream end may follow. */
static int
expect_stream_end(parse_ctx *ctx)
{
    yaml_event_t ev;
    int rc = 0;

    if (next_event(ctx, &ev) != 0) {
        return -1;
    }
    if (ev.type != YAML_STREAM_END_EVENT) {
        set_err(ctx, ev.start_mark.line + 1, ev.start_mark.column + 1, "only one YAML document is allowed per file");
        rc = -1;
    }
    yaml_event_delete(&ev);
    return rc;
}


static int
parse_stream(parse_ctx *ctx, relay_yaml_node **root)
{
    yaml_event_t ev;
    int end;

    if (next_event(ctx, &ev) != 0) {
        return -1;
    }
    yaml_event_delete(&ev); /* STREAM-START */
    if (next_event(ctx, &ev) != 0) {
        return -1;
    }
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        return 0;
    }
    yaml_event_delete(&ev); /* DOCUMENT-START */
    *root = build_child(ctx, 0, YAML_DOCUMENT_END_EVENT, &end);
    if (*root == NULL) {
        return -1;
    }
    if (next_event(ctx, &ev) != 0) {
        return -1;
    }
    yaml_event_delete(&ev); /* DOCUMENT-END */
    return expect_stream_end(ctx);
}


int
relay_yaml_parse(const char *text, size_t len, relay_yaml_node **root, char *err, size_t errlen)
{
    if (errlen > 0) {
        err[0] = '\0';
    }
    if (relay_yaml_fast_parse(text, len, root)) {
        return 0;
    }
    return relay_yaml_parse_libyaml(text, len, root, err, errlen);
}


int
relay_yaml_parse_libyaml(const char *text, size_t len, relay_yaml_node **root, char *err, size_t errlen)
{
    parse_ctx ctx;
    int rc;

    *root = NULL;
    memset(&ctx, 0, sizeof(ctx));
    ctx.text = text;
    ctx.len = len;
    ctx.err = err;
    ctx.errlen = errlen;
    if (errlen > 0) {
        err[0] = '\0';
    }
    if (!yaml_parser_initialize(&ctx.parser)) {
        set_err(&ctx, 1, 1, "out of memory");
        return -1;
    }
    yaml_parser_set_encoding(&ctx.parser, YAML_UTF8_ENCODING);
    yaml_parser_set_input_string(&ctx.parser, (const unsigned char *)text, len);
    rc = parse_stream(&ctx, root);
    yaml_parser_delete(&ctx.parser);
    free(ctx.children.stack);
    if (rc != 0 || *root == NULL) {
        yaml_arena_free(ctx.arena.first);
        *root = NULL;
    }
    return rc;
}


/* `node` must be a root returned by relay_yaml_parse: the first allocation of its arena. */
void
relay_yaml_free(relay_yaml_node *node)
{
    if (node == NULL) {
        return;
    }
    yaml_arena_free((yaml_arena_chunk *)(void *)((unsigned char *)node - offsetof(yaml_arena_chunk, data)));
}


relay_yaml_node *
relay_yaml_map_key(const relay_yaml_node *map, size_t i)
{
    return map->items[i * 2];
}


relay_yaml_node *
relay_yaml_map_value(const relay_yaml_node *map, size_t i)
{
    return map->items[i * 2 + 1];
}


static int
is_one_of(const char *s, size_t len, const char *const *words)
{
    for (; *words != NULL; words++) {
        if (strlen(*words) == len && memcmp(s, *words, len) == 0) {
            return 1;
        }
    }
    return 0;
}


static size_t
span(const char *s, size_t len, const char *set)
{
    size_t i = 0;

    while (i < len && s[i] != '\0' && strchr(set, s[i]) != NULL) {
        i++;
    }
    return i;
}


/* [-+]?[0-9]+ | 0o[0-7]+ | 0x[0-9a-fA-F]+ */
static int
resolve_int(const char *s, size_t len, double *out)
{
    size_t i = 0, d;
    double v = 0;
    int base = 10;
    const char *digits = "0123456789";

    if (len > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'x')) {
        base = s[1] == 'o' ? 8 : 16;
        digits = base == 8 ? "01234567" : "0123456789abcdefABCDEF";
        i = 2;
    } else if (len > 0 && (s[0] == '-' || s[0] == '+')) {
        i = 1;
    }
    d = span(s + i, len - i, digits);
    if (d == 0 || i + d != len) {
        return 0;
    }
    if (base == 10) {
        *out = strtod(s, NULL); /* correctly rounded, exact below 2^53 */
        return 1;
    }
    for (; i < len; i++) {
        char c = s[i];
        int dv = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        v = v * base + dv;
    }
    *out = v;
    return 1;
}


/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? | [-+]?\.inf | \.nan */
static int
resolve_float(const char *s, size_t len, double *out)
{
    static const char *const inf[] = {".inf", ".Inf", ".INF", NULL};
    static const char *const nan[] = {".nan", ".NaN", ".NAN", NULL};
    size_t i = 0, intd, fracd = 0, expd;
    int neg = 0;

    if (is_one_of(s, len, nan)) {
        *out = NAN;
        return 1;
    }
    if (len > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (is_one_of(s + i, len - i, inf)) {
        *out = neg ? -HUGE_VAL : HUGE_VAL;
        return 1;
    }
    intd = span(s + i, len - i, "0123456789");
    i += intd;
    if (i < len && s[i] == '.') {
        i++;
        fracd = span(s + i, len - i, "0123456789");
        i += fracd;
    }
    if (intd == 0 && fracd == 0) {
        return 0;
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '-' || s[i] == '+')) {
            i++;
        }
        expd = span(s + i, len - i, "0123456789");
        if (expd == 0) {
            return 0;
        }
        i += expd;
    }
    if (i != len) {
        return 0;
    }
    *out = strtod(s, NULL);
    return 1;
}


int
relay_yaml_may_resolve(char c)
{
    return c != '\0' && strchr("nNtTfF~+-.0123456789", c) != NULL;
}


void
relay_yaml_resolve(const relay_yaml_node *node, relay_yaml_value *out)
{
    static const char *const nulls[] = {"null", "Null", "NULL", "~", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    const char *s;
    size_t len;

    memset(out, 0, sizeof(*out));
    out->type = RELAY_YAML_STR;
    if (node->kind != RELAY_YAML_SCALAR || node->quoted || node->str_tag) {
        return;
    }
    s = node->text;
    len = node->len;
    if (len > 0 && !relay_yaml_may_resolve(s[0])) {
        return;
    }
    if (len == 0 || is_one_of(s, len, nulls)) {
        out->type = RELAY_YAML_NULL;
    } else if (is_one_of(s, len, trues) || is_one_of(s, len, falses)) {
        out->type = RELAY_YAML_BOOL;
        out->boolean = s[0] == 't' || s[0] == 'T';
    } else if (resolve_int(s, len, &out->number)) {
        out->type = RELAY_YAML_INT;
    } else if (resolve_float(s, len, &out->number)) {
        out->type = RELAY_YAML_FLOAT;
    }
}
