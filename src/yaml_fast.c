/*
 * yaml_fast: the plain shape of app templates parsed without libyaml
 * (src/yaml_fast.h). libyaml spends ~3 us per rule of a large template on
 * tokens, events and their allocations; templates are almost always
 * printable ASCII in a few forms, and those are read here in one pass.
 *
 * Accepted, and nothing else (anything else declines, and libyaml decides):
 *   - ASCII text without tabs, CRs or other control characters but newlines;
 *     blank lines and whole-line comments anywhere, a comment after a value;
 *   - one block mapping at column 1 as the root; block mappings of plain keys
 *     (letters, digits, _ - . /; resolving to strings; no duplicates) whose
 *     values follow on the line or, for a mapping or a sequence, on the next
 *     lines (a sequence may sit at the key's indentation);
 *   - block sequences whose items are on the line of their '-': a scalar, a
 *     flow collection, or a compact mapping ("- key: value" and its keys below);
 *   - flow mappings and sequences that end on their line, without empty
 *     entries or trailing commas;
 *   - plain scalars (block: to the end of the line or a comment, without ": ";
 *     flow: no indicator or ':' inside), single-quoted scalars without '',
 *     double-quoted scalars without backslashes, all on one line.
 * Nodes carry the marks libyaml gives them (tests/unit/test_yaml_fast.c
 * compares both trees over every template in the repository and a corpus of
 * near misses).
 */
#include "yaml_fast.h"

#include "yaml_arena.h"

#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Longer keys are libyaml's to judge (it limits simple keys to 1024). */
#define MAX_KEY 1000

typedef struct fast {
    const char *text, *end;
    const char *p;   /* the parse position */
    const char *bol; /* the start of p's line */
    int line;        /* p's line, from 1 */
    int indent;      /* the indentation of p's line once at its content; -1 at the end */
    yaml_arena arena;
    yaml_children children; /* of the collections being built */
    int declined;
} fast;

/* What ends a plain scalar in a flow collection here: an indicator, a quote
 * (libyaml reads on; this reader declines), the end of the line. */
static const unsigned char ends_flow_plain[256] = {
    ['\n'] = 1, [','] = 1, ['['] = 1, [']'] = 1, ['{'] = 1, ['}'] = 1, ['#'] = 1, [':'] = 1, ['"'] = 1, ['\''] = 1,
};

/* Characters a plain scalar may start with; '-' also, before a non-space. */
static int
plain_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.'
           || c == '/' || c == '~' || c == '+' || c == '$' || c == '(' || c == '=' || c == '^' || c == '<';
}


/* The bytes of a plain key here: letters, digits, _ - . / (a table: key_end
 * reads every byte of every block key through it). */
static const unsigned char key_chars[256] = {
    ['a' ... 'z'] = 1, ['A' ... 'Z'] = 1, ['0' ... '9'] = 1, ['_'] = 1, ['-'] = 1, ['.'] = 1, ['/'] = 1,
};

static int
key_char(char c)
{
    return key_chars[(unsigned char)c];
}


static int
decline(fast *f)
{
    f->declined = 1;
    return -1;
}


static int
at_eol(const fast *f, const char *p)
{
    return p == f->end || *p == '\n';
}


static const char *
skip_spaces(const fast *f, const char *p)
{
    while (p < f->end && *p == ' ') {
        p++;
    }
    return p;
}


/* Every byte printable ASCII or a newline; 16 bytes at a time where SSE2
 * is there (a template is read whole before anything else). */
static int
plain_ascii(const char *p, size_t len)
{
    size_t i = 0;

#ifdef __SSE2__
    for (; i + 16 <= len; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        /* Signed: bytes >= 0x80 are negative, so "< 0x20" catches them too. */
        __m128i bad = _mm_or_si128(
            _mm_andnot_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('\n')), _mm_cmplt_epi8(x, _mm_set1_epi8(0x20))),
            _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7f)));

        if (_mm_movemask_epi8(bad) != 0) {
            return 0;
        }
    }
#endif
    for (; i < len; i++) {
        unsigned char c = (unsigned char)p[i];

        if ((c < 0x20 && c != '\n') || c >= 0x7f) {
            return 0;
        }
    }
    return 1;
}


/* From the start of a line, on to the first line with content: f->p at
 * its first character, f->indent its column from 0 (-1 at the end). */
static void
next_content_line(fast *f)
{
    const char *p;

    for (;;) {
        if (f->bol >= f->end) {
            f->p = f->end;
            f->indent = -1;
            return;
        }
        p = skip_spaces(f, f->bol);
        if (!at_eol(f, p) && *p != '#') {
            f->p = p;
            f->indent = (int)(p - f->bol);
            return;
        }
        while (p < f->end && *p != '\n') {
            p++;
        }
        f->bol = p + 1;
        f->line++;
    }
}


/* After a value: spaces, maybe a comment, the end of the line; then on to
 * the next line with content. */
static int
finish_line(fast *f, const char *p)
{
    const char *q = skip_spaces(f, p);

    if (q < f->end && *q == '#' && q > p) {
        while (q < f->end && *q != '\n') {
            q++;
        }
    }
    if (!at_eol(f, q)) {
        return decline(f);
    }
    f->bol = q + 1;
    f->line++;
    next_content_line(f);
    return 0;
}


static relay_yaml_node *
new_node(fast *f, relay_yaml_kind kind, const char *at)
{
    relay_yaml_node *node = yaml_arena_alloc(&f->arena, sizeof(*node));

    if (node == NULL) {
        decline(f); /* libyaml will report the shortage, if it persists */
        return NULL;
    }
    memset(node, 0, sizeof(*node));
    node->kind = kind;
    node->line = f->line;
    node->col = (int)(at - f->bol) + 1;
    return node;
}


static relay_yaml_node *
new_scalar(fast *f, const char *at, const char *from, size_t len, int quoted)
{
    relay_yaml_node *node = new_node(f, RELAY_YAML_SCALAR, at);

    if (node == NULL || (node->text = yaml_arena_alloc(&f->arena, len + 1)) == NULL) {
        decline(f);
        return NULL;
    }
    memcpy(node->text, from, len);
    node->text[len] = '\0';
    node->len = len;
    node->quoted = quoted;
    return node;
}


static int
push_child(fast *f, relay_yaml_node *child)
{
    return yaml_children_push(&f->children, child) != 0 ? decline(f) : 0;
}


/* Move the children parked since `base` into node's item array. */
static int
take_children(fast *f, relay_yaml_node *node, size_t base)
{
    return yaml_children_take(&f->children, &f->arena, node, base) != 0 ? decline(f) : 0;
}


/* A plain key ending at ':' then a space or the end of the line: its end,
 * or NULL. */
static const char *
key_end(const fast *f, const char *p)
{
    const char *q = p;

    if (q >= f->end || !plain_start(*q)) {
        return NULL;
    }
    while (q < f->end && key_char(*q)) {
        q++;
    }
    if (q - p > MAX_KEY || q >= f->end || *q != ':' || !(q + 1 == f->end || q[1] == ' ' || q[1] == '\n')) {
        return NULL;
    }
    return q;
}


/* Add key to the map's pairs parked since base, refusing what libyaml would
 * have to judge: a key that is not a string, or one already there. */
static int
push_key(fast *f, size_t base, relay_yaml_node *key)
{
    relay_yaml_value v;
    size_t i;

    if (relay_yaml_may_resolve(key->text[0])) {
        relay_yaml_resolve(key, &v);
        if (v.type != RELAY_YAML_STR) {
            return decline(f);
        }
    }
    for (i = base; i < f->children.sp; i += 2) {
        const relay_yaml_node *prev = f->children.stack[i];

        if (prev->len == key->len && memcmp(prev->text, key->text, key->len) == 0) {
            return decline(f);
        }
    }
    return push_child(f, key);
}


/* A quoted scalar on one line, without escapes; p at the quote. */
static relay_yaml_node *
quoted_scalar(fast *f, const char **pp)
{
    const char *p = *pp, *q = p + 1;
    char quote = *p;

    while (q < f->end && *q != quote && *q != '\n' && !(quote == '"' && *q == '\\')) {
        q++;
    }
    if (q >= f->end || *q != quote || (quote == '\'' && q + 1 < f->end && q[1] == '\'')) {
        decline(f);
        return NULL;
    }
    *pp = q + 1;
    return new_scalar(f, p, p + 1, (size_t)(q - p - 1), 1);
}


static int
starts_plain(const fast *f, const char *p)
{
    return plain_start(*p) || (*p == '-' && p + 1 < f->end && p[1] != ' ' && p[1] != '\n');
}


/* A plain scalar inside a flow collection: up to an indicator, trailing
 * spaces not included. */
static relay_yaml_node *
flow_plain(fast *f, const char **pp)
{
    const char *p = *pp, *q = p, *last = p;

    if (!starts_plain(f, p)) {
        decline(f);
        return NULL;
    }
    while (q < f->end && !ends_flow_plain[(unsigned char)*q]) {
        if (*q != ' ') {
            last = q;
        }
        q++;
    }
    *pp = last + 1;
    return new_scalar(f, p, p, (size_t)(last + 1 - p), 0);
}


static relay_yaml_node *flow_node(fast *f, const char **pp, int depth);


/* A flow mapping's or sequence's entries after its bracket, up to the
 * closing one, all on this line. */
static int
flow_entries(fast *f, relay_yaml_node *node, const char **pp, int depth)
{
    const char *p = skip_spaces(f, *pp);
    char close = node->kind == RELAY_YAML_MAP ? '}' : ']';
    size_t base = f->children.sp;
    relay_yaml_node *item;

    if (p < f->end && *p == close) {
        *pp = p + 1;
        return 0;
    }
    for (;;) {
        if ((item = flow_node(f, &p, depth + 1)) == NULL) {
            return -1;
        }
        if (node->kind == RELAY_YAML_MAP) {
            if (item->kind != RELAY_YAML_SCALAR || item->quoted || p >= f->end || *p != ':'
                || push_key(f, base, item) < 0 || p + 1 >= f->end || p[1] != ' ') {
                return decline(f);
            }
            p = skip_spaces(f, p + 1);
            if ((item = flow_node(f, &p, depth + 1)) == NULL) {
                return -1;
            }
        }
        if (push_child(f, item) < 0) {
            return -1;
        }
        node->count++;
        p = skip_spaces(f, p);
        if (p < f->end && *p == close) {
            *pp = p + 1;
            return take_children(f, node, base);
        }
        if (p >= f->end || *p != ',') {
            return decline(f);
        }
        p = skip_spaces(f, p + 1);
    }
}


/* A node inside a flow collection, or a flow collection; *pp moves past it. */
static relay_yaml_node *
flow_node(fast *f, const char **pp, int depth)
{
    const char *p = *pp;
    relay_yaml_node *node;

    if (p >= f->end) {
        decline(f);
        return NULL;
    }
    if (*p == '"' || *p == '\'') {
        return quoted_scalar(f, pp);
    }
    if (*p != '{' && *p != '[') {
        return flow_plain(f, pp);
    }
    if (depth >= RELAY_YAML_MAX_DEPTH || (node = new_node(f, *p == '{' ? RELAY_YAML_MAP : RELAY_YAML_SEQ, p)) == NULL) {
        decline(f);
        return NULL;
    }
    p++;
    if (flow_entries(f, node, &p, depth) < 0) {
        return NULL;
    }
    *pp = p;
    return node;
}


/* A plain scalar in block context: to the end of the line or a comment. */
static relay_yaml_node *
block_plain(fast *f, const char **pp)
{
    const char *p = *pp, *q = p, *last = p;

    if (!starts_plain(f, p)) {
        decline(f);
        return NULL;
    }
    while (!at_eol(f, q) && !(*q == ' ' && q + 1 < f->end && q[1] == '#')) {
        if (*q == ':' && (q + 1 == f->end || q[1] == ' ' || q[1] == '\n')) {
            decline(f);
            return NULL;
        }
        if (*q != ' ') {
            last = q;
        }
        q++;
    }
    *pp = last + 1;
    return new_scalar(f, p, p, (size_t)(last + 1 - p), 0);
}


/* A value that sits on its key's or its dash's line, then the rest of that
 * line; f moves on to the next line with content. */
static relay_yaml_node *
inline_value(fast *f, int depth)
{
    const char *p = f->p;
    relay_yaml_node *node;

    if (*p == '{' || *p == '[' || *p == '"' || *p == '\'') {
        node = flow_node(f, &p, depth);
    } else {
        node = block_plain(f, &p);
    }
    if (node == NULL || finish_line(f, p) < 0) {
        return NULL;
    }
    return node;
}


static relay_yaml_node *block_seq(fast *f, int depth);
static relay_yaml_node *block_map(fast *f, int depth);


static int
at_dash(const fast *f)
{
    const char *p = f->p;

    return p < f->end && *p == '-' && (p + 1 == f->end || p[1] == ' ' || p[1] == '\n');
}


/* A mapping's value after "key:" at the end of its line: a collection on
 * the lines below (a sequence may start at the key's own indentation). */
static relay_yaml_node *
value_below(fast *f, int key_indent, int depth)
{
    if (f->indent > key_indent) {
        return at_dash(f) ? block_seq(f, depth) : block_map(f, depth);
    }
    if (f->indent == key_indent && at_dash(f)) {
        return block_seq(f, depth);
    }
    decline(f); /* an empty value: null, at a mark libyaml knows best */
    return NULL;
}


/* A block mapping whose first key is at f->p (the start of a line's content,
 * or just after a sequence item's dash); its other keys are on the lines
 * below at the same column. */
static relay_yaml_node *
block_map(fast *f, int depth)
{
    int indent = (int)(f->p - f->bol);
    size_t base = f->children.sp;
    relay_yaml_node *map, *key, *value;
    const char *colon;

    if (depth >= RELAY_YAML_MAX_DEPTH || (map = new_node(f, RELAY_YAML_MAP, f->p)) == NULL) {
        decline(f);
        return NULL;
    }
    for (;;) {
        if ((colon = key_end(f, f->p)) == NULL) {
            decline(f);
            return NULL;
        }
        if ((key = new_scalar(f, f->p, f->p, (size_t)(colon - f->p), 0)) == NULL || push_key(f, base, key) < 0) {
            return NULL;
        }
        f->p = skip_spaces(f, colon + 1);
        if (at_eol(f, f->p) || *f->p == '#') {
            value = finish_line(f, colon + 1) < 0 ? NULL : value_below(f, indent, depth + 1);
        } else {
            value = inline_value(f, depth + 1);
        }
        if (value == NULL || push_child(f, value) < 0) {
            return NULL;
        }
        map->count++;
        if (f->indent < indent) {
            return take_children(f, map, base) < 0 ? NULL : map;
        }
        if (f->indent > indent || at_dash(f)) {
            decline(f);
            return NULL;
        }
    }
}


/* A block sequence whose first dash is at f->p; every item sits on its
 * dash's line. */
static relay_yaml_node *
block_seq(fast *f, int depth)
{
    int indent = (int)(f->p - f->bol);
    size_t base = f->children.sp;
    relay_yaml_node *seq, *item;

    if (depth >= RELAY_YAML_MAX_DEPTH || (seq = new_node(f, RELAY_YAML_SEQ, f->p)) == NULL) {
        decline(f);
        return NULL;
    }
    for (;;) {
        f->p = skip_spaces(f, f->p + 1);
        if (at_eol(f, f->p) || *f->p == '#' || (*f->p == '-' && at_dash(f))) {
            decline(f);
            return NULL;
        }
        item = key_end(f, f->p) != NULL ? block_map(f, depth + 1) : inline_value(f, depth + 1);
        if (item == NULL || push_child(f, item) < 0) {
            return NULL;
        }
        seq->count++;
        if (f->indent < indent || (f->indent == indent && !at_dash(f))) {
            return take_children(f, seq, base) < 0 ? NULL : seq;
        }
        if (f->indent > indent) {
            decline(f);
            return NULL;
        }
    }
}


/* The document: one block mapping at column 1, nothing after it. */
static relay_yaml_node *
document(fast *f)
{
    relay_yaml_node *root, *map;

    f->bol = f->text;
    f->line = 1;
    next_content_line(f);
    if (f->indent != 0 || at_dash(f) || *f->p == '%' || (f->end - f->p >= 3 && memcmp(f->p, "...", 3) == 0)) {
        return NULL;
    }
    /* relay_yaml_free finds the arena from the root: it must come first. */
    if ((root = yaml_arena_alloc(&f->arena, sizeof(*root))) == NULL || (map = block_map(f, 0)) == NULL
        || f->indent != -1) {
        return NULL;
    }
    *root = *map;
    return root;
}


int
relay_yaml_fast_parse(const char *text, size_t len, relay_yaml_node **root)
{
    fast f;

    *root = NULL;
    if (!plain_ascii(text, len)) {
        return 0;
    }
    memset(&f, 0, sizeof(f));
    f.text = text;
    f.end = text + len;
    *root = document(&f);
    free(f.children.stack);
    if (*root == NULL) {
        yaml_arena_free(f.arena.first);
        return 0;
    }
    return 1;
}
