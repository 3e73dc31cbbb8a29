/* Parse one rule in normal form into groups, fields and alternatives.
 * The text is valid JSON (validated here first unless the caller vouches for
 * it), so this reader only checks shape.
 * Recursion follows group nesting, capped at RELAY_MATCHER_MAX_RULE_DEPTH. */
#include "matcher_internal.h"
#include "relay/json_scan.h"

#include <stdio.h>
#include <string.h>

typedef struct rparser {
    relay_matcher *m;
    const char *start, *p, *end;
    char *err;
    size_t errlen;
} rparser;

static int parse_group(rparser *r, uint32_t node, int depth, uint32_t *group);


static int
rfail(rparser *r, const char *what)
{
    if (r->err && r->errlen) {
        snprintf(r->err, r->errlen, "invalid rule at byte %zu: %s", (size_t)(r->p - r->start), what);
    }
    return -1;
}


static int
oom(rparser *r)
{
    if (r->err && r->errlen) {
        snprintf(r->err, r->errlen, "out of memory");
    }
    return -1;
}


static char
peek(rparser *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) {
        r->p++;
    }
    return r->p < r->end ? *r->p : '\0';
}


static int
expect(rparser *r, char c, const char *what)
{
    if (peek(r) != c) {
        return rfail(r, what);
    }
    r->p++;
    return 0;
}


/* A string's text between its quotes, still escaped. */
typedef struct rstring {
    const char *text;
    size_t len;
    int escaped;
} rstring;


/* Read a string; r->p moves past its closing quote. */
static int
read_string(rparser *r, rstring *s)
{
    if (peek(r) != '"') {
        return rfail(r, "expected a string");
    }
    s->text = ++r->p;
    s->escaped = 0;
    while (*r->p != '"') {
        if (*r->p == '\\') {
            s->escaped = 1;
            r->p++;
        }
        r->p++;
    }
    s->len = (size_t)(r->p - s->text);
    r->p++;
    return 0;
}


/* Copy a string read by read_string into the pool, unescaped. */
static int
pool_string(rparser *r, const rstring *s, uint32_t *off, uint32_t *len)
{
    if (mpool_add(r->m, s->text, s->len, off) < 0) {
        return oom(r);
    }
    *len = s->escaped ? (uint32_t)relay_json_unescape(r->m->pool + *off, s->len, r->m->pool + *off) : (uint32_t)s->len;
    return 0;
}


/* Read a string into the pool, unescaped. */
static int
parse_string(rparser *r, uint32_t *off, uint32_t *len)
{
    rstring s;

    return read_string(r, &s) < 0 ? -1 : pool_string(r, &s, off, len);
}


uint32_t
mnode_child(const relay_matcher *m, uint32_t parent, const char *key, size_t len)
{
    const mnode *p = &m->nodes[parent];
    const mentry *e;
    uint32_t i;

    if (p->nchildren <= MFEW_CHILDREN) {
        for (i = 0; i < p->nchildren; i++) {
            const mnode *c = &m->nodes[p->few_children[i]];

            if (c->key_len == len && same_bytes(m->pool + c->key_off, key, len)) {
                return p->few_children[i];
            }
        }
        return MNONE;
    }
    e = mtable_find(&m->edges, medge_hash(parent, key, len), parent, 0, m->pool, key, len);
    return e ? e->value : MNONE;
}


/* The child of `parent` named by pool bytes [off, off+len), created if new. */
static int
node_child(relay_matcher *m, uint32_t parent, uint32_t off, uint32_t len, uint32_t *child)
{
    mentry *e;
    mnode *n;

    if ((*child = mnode_child(m, parent, m->pool + off, len)) != MNONE) {
        return 0;
    }
    if (mgrow(&m->nodes, &m->nodes_cap, m->nnodes + 1, sizeof(*m->nodes)) < 0
        || !(e = mtable_insert(&m->edges, medge_hash(parent, m->pool + off, len)))) {
        return -1;
    }
    e->node = parent;
    e->key_off = off;
    e->key_len = len;
    e->value = (uint32_t)m->nnodes;
    n = &m->nodes[m->nnodes];
    memset(n, 0, sizeof(*n));
    n->parent = parent;
    n->key_off = off;
    n->key_len = len;
    n->child_index = m->nodes[parent].nchildren++;
    if (n->child_index < MFEW_CHILDREN) {
        m->nodes[parent].few_children[n->child_index] = (uint32_t)m->nnodes;
    }
    m->nodes[parent].child_lens |= UINT64_C(1) << (len < 63 ? len : 63);
    *child = (uint32_t)m->nnodes++;
    return 0;
}


static int
new_alt(rparser *r, alt_kind kind, uint32_t *alt)
{
    relay_matcher *m = r->m;

    if (mgrow(&m->alts, &m->alts_cap, m->nalts + 1, sizeof(*m->alts)) < 0) {
        return oom(r);
    }
    memset(&m->alts[m->nalts], 0, sizeof(m->alts[0]));
    m->alts[m->nalts].kind = (uint8_t)kind;
    m->alts[m->nalts].next = MNONE;
    *alt = (uint32_t)m->nalts++;
    return 0;
}


/* A number's text; the JSON was validated, so its extent is enough. */
static double
parse_number(rparser *r)
{
    const char *s = r->p;

    while (r->p < r->end && strchr("+-.eE0123456789", *r->p) && *r->p) {
        r->p++;
    }
    return relay_json_number(s, (size_t)(r->p - s));
}


/* {"now": <integer ms>} */
static int
parse_now(rparser *r, int64_t *offset)
{
    uint32_t off, len;
    int neg = 0;
    uint64_t v = 0;

    if (expect(r, '{', "expected {\"now\": ms}") < 0 || parse_string(r, &off, &len) < 0) {
        return -1;
    }
    if (len != 3 || memcmp(r->m->pool + off, "now", 3) != 0) {
        return rfail(r, "expected {\"now\": ms}");
    }
    if (expect(r, ':', "expected ':'") < 0) {
        return -1;
    }
    if (peek(r) == '-') {
        neg = 1;
        r->p++;
    }
    if (r->p >= r->end || (unsigned)(*r->p - '0') >= 10) {
        return rfail(r, "now offset must be an integer");
    }
    for (; r->p < r->end && (unsigned)(*r->p - '0') < 10; r->p++) {
        v = v * 10 + (unsigned)(*r->p - '0');
        if (v > (uint64_t)INT64_MAX / 4) {
            return rfail(r, "now offset out of range");
        }
    }
    if (r->p < r->end && strchr(".eE", *r->p)) {
        return rfail(r, "now offset must be an integer");
    }
    *offset = neg ? -(int64_t)v : (int64_t)v;
    return expect(r, '}', "expected '}' after the now offset");
}


/* The operand of eq: a scalar literal. */
static int
parse_eq(rparser *r, uint32_t node, uint32_t *alt)
{
    char c = peek(r);
    malt *a;

    if (c == '"') {
        if (new_alt(r, ALT_EQ_STR, alt) < 0) {
            return -1;
        }
        return parse_string(r, &r->m->alts[*alt].str_off, &r->m->alts[*alt].str_len);
    }
    if (c == 't' || c == 'f' || c == 'n') {
        if (new_alt(r, c == 't' ? ALT_EQ_TRUE : c == 'f' ? ALT_EQ_FALSE : ALT_EQ_NULL, alt) < 0) {
            return -1;
        }
        r->p += c == 'f' ? 5 : 4;
        return 0;
    }
    if (c != '-' && (unsigned)(c - '0') >= 10) {
        return rfail(r, "eq takes a string, number, true, false or null");
    }
    if (new_alt(r, ALT_EQ_NUM, alt) < 0) {
        return -1;
    }
    a = &r->m->alts[*alt];
    a->num = parse_number(r);
    if (a->num == 0) {
        a->num = 0; /* -0 and 0 are equal; keep one index key */
    }
    r->m->nodes[node].needs_number = 1;
    /* The index compares literals as pool bytes; for numbers, the double's. */
    if (mpool_add(r->m, (const char *)&a->num, sizeof(a->num), &a->str_off) < 0) {
        return oom(r);
    }
    r->m->alts[*alt].str_len = sizeof(double);
    return 0;
}


static int
parse_threshold(rparser *r, uint32_t node, cmp_op op, uint32_t *alt)
{
    char c = peek(r);

    if (c == '{') {
        if (new_alt(r, ALT_CMP_TIME, alt) < 0) {
            return -1;
        }
        r->m->alts[*alt].op = (uint8_t)op;
        return parse_now(r, &r->m->alts[*alt].offset_ms);
    }
    if (c != '-' && (unsigned)(c - '0') >= 10) {
        return rfail(r, "a threshold takes a number or {\"now\": ms}");
    }
    if (new_alt(r, ALT_CMP_NUM, alt) < 0) {
        return -1;
    }
    r->m->alts[*alt].op = (uint8_t)op;
    r->m->alts[*alt].num = parse_number(r);
    r->m->nodes[node].needs_number = 1;
    return 0;
}


static int
parse_affix(rparser *r, alt_kind kind, uint32_t *alt)
{
    if (peek(r) != '"') {
        return rfail(r, "prefix and suffix take a string");
    }
    if (new_alt(r, kind, alt) < 0) {
        return -1;
    }
    return parse_string(r, &r->m->alts[*alt].str_off, &r->m->alts[*alt].str_len);
}


static int
parse_exists(rparser *r, uint32_t *alt)
{
    char c = peek(r);

    if (c != 't' && c != 'f') {
        return rfail(r, "exists takes true or false");
    }
    if (new_alt(r, ALT_EXISTS, alt) < 0) {
        return -1;
    }
    r->m->alts[*alt].exists = c == 't';
    r->p += c == 't' ? 4 : 5;
    return 0;
}


/* The operand of the operator op (NULL when the name is none of the table's). */
static int
parse_operand(rparser *r, const relay_matcher_op *op, uint32_t node, int depth, uint32_t *alt)
{
    uint32_t group;

    switch (op == NULL ? OP_FOREIGN : (op_code)(op - relay_matcher_ops)) {
    case OP_EQ:
        return parse_eq(r, node, alt);
    case OP_PREFIX:
        return parse_affix(r, ALT_PREFIX, alt);
    case OP_SUFFIX:
        return parse_affix(r, ALT_SUFFIX, alt);
    case OP_EXISTS:
        return parse_exists(r, alt);
    case OP_GT:
        return parse_threshold(r, node, CMP_GT, alt);
    case OP_GTE:
        return parse_threshold(r, node, CMP_GTE, alt);
    case OP_LT:
        return parse_threshold(r, node, CMP_LT, alt);
    case OP_LTE:
        return parse_threshold(r, node, CMP_LTE, alt);
    case OP_GROUP:
        break;
    default:
        return rfail(r, "unknown operator");
    }
    if (depth >= RELAY_MATCHER_MAX_RULE_DEPTH) {
        return rfail(r, "groups nested too deeply");
    }
    if (parse_group(r, node, depth + 1, &group) < 0 || new_alt(r, ALT_GROUP, alt) < 0) {
        return -1;
    }
    r->m->alts[*alt].group = group;
    return 0;
}


/* The operator a string names, or NULL. Only an escaped spelling needs the
 * pool, and only for the lookup. */
static int
string_op(rparser *r, const rstring *s, const relay_matcher_op **op)
{
    size_t pooled = r->m->pool_len;
    uint32_t off, len;

    if (!s->escaped) {
        *op = relay_matcher_op_find(s->text, s->len);
        return 0;
    }
    if (pool_string(r, s, &off, &len) < 0) {
        return -1;
    }
    *op = relay_matcher_op_find(r->m->pool + off, len);
    r->m->pool_len = pooled;
    return 0;
}


/* One alternative: an object with exactly one operator key. */
static int
parse_alt(rparser *r, uint32_t node, int depth, uint32_t *alt)
{
    const relay_matcher_op *op;
    rstring name;

    if (expect(r, '{', "an alternative must be an object") < 0 || read_string(r, &name) < 0
        || expect(r, ':', "expected ':'") < 0 || string_op(r, &name, &op) < 0) {
        return -1;
    }
    if (parse_operand(r, op, node, depth, alt) < 0) {
        return -1;
    }
    return expect(r, '}', "an alternative must have exactly one operator");
}


static int
parse_alts(rparser *r, uint32_t node, int depth, uint32_t *first)
{
    uint32_t alt, tail = MNONE;

    if (expect(r, '[', "a field condition must be a list") < 0) {
        return -1;
    }
    if (peek(r) == ']') {
        return rfail(r, "empty list of alternatives");
    }
    for (;;) {
        if (parse_alt(r, node, depth, &alt) < 0) {
            return -1;
        }
        if (tail == MNONE) {
            *first = alt;
        } else {
            r->m->alts[tail].next = alt;
        }
        tail = alt;
        if (peek(r) != ',') {
            return expect(r, ']', "expected ',' or ']'");
        }
        r->p++;
    }
}


static int
field_holds_on_empty(const relay_matcher *m, const mfield *f)
{
    uint32_t a;

    for (a = f->first_alt; a != MNONE; a = m->alts[a].next) {
        const malt *alt = &m->alts[a];

        if (alt->kind == ALT_EXISTS && !alt->exists) {
            return 1;
        }
        if (alt->kind == ALT_GROUP && m->groups[alt->group].holds_on_empty) {
            return 1;
        }
    }
    return 0;
}


static int
new_field(rparser *r, uint32_t group, uint32_t *tail, uint32_t *field)
{
    relay_matcher *m = r->m;

    if (mgrow(&m->fields, &m->fields_cap, m->nfields + 1, sizeof(*m->fields)) < 0) {
        return oom(r);
    }
    m->fields[m->nfields].next = MNONE;
    *field = (uint32_t)m->nfields++;
    if (*tail == MNONE) {
        m->groups[group].first_field = *field;
    } else {
        m->fields[*tail].next = *field;
    }
    *tail = *field;
    return 0;
}


/* The node a field name leads to from `parent`, made if new. A name already
 * known is not pooled again: a block of 10,000 rules names the same few
 * fields 10,000 times. */
static int
field_node(rparser *r, uint32_t parent, const rstring *s, uint32_t *child)
{
    relay_matcher *m = r->m;
    size_t nodes = m->nnodes, pooled = m->pool_len;
    uint32_t off, len;

    if (!s->escaped && (*child = mnode_child(m, parent, s->text, s->len)) != MNONE) {
        return 0;
    }
    if (pool_string(r, s, &off, &len) < 0) {
        return -1;
    }
    if (node_child(m, parent, off, len, child) < 0) {
        return oom(r);
    }
    if (m->nnodes == nodes) {
        m->pool_len = pooled; /* an escaped spelling of a known name */
    }
    return 0;
}


static int
parse_fields(rparser *r, uint32_t group, int depth)
{
    relay_matcher *m = r->m;
    uint32_t child, field, first_alt = MNONE, tail = MNONE;
    rstring name;
    int empty_ok = 1;

    for (;;) {
        if (read_string(r, &name) < 0 || expect(r, ':', "expected ':'") < 0
            || field_node(r, m->groups[group].node, &name, &child) < 0) {
            return -1;
        }
        if (parse_alts(r, child, depth, &first_alt) < 0 || new_field(r, group, &tail, &field) < 0) {
            return -1;
        }
        m->fields[field].node = child;
        m->fields[field].first_alt = first_alt;
        empty_ok &= field_holds_on_empty(m, &m->fields[field]);
        if (peek(r) != ',') {
            break;
        }
        r->p++;
    }
    m->groups[group].holds_on_empty = (uint8_t)empty_ok;
    return expect(r, '}', "expected ',' or '}'");
}


static int
parse_group(rparser *r, uint32_t node, int depth, uint32_t *group)
{
    relay_matcher *m = r->m;

    if (expect(r, '{', "a group must be an object") < 0) {
        return -1;
    }
    if (peek(r) == '}') {
        return rfail(r, "empty group");
    }
    if (mgrow(&m->groups, &m->groups_cap, m->ngroups + 1, sizeof(*m->groups)) < 0) {
        return oom(r);
    }
    *group = (uint32_t)m->ngroups++;
    m->groups[*group].node = node;
    m->groups[*group].first_field = MNONE;
    return parse_fields(r, *group, depth);
}


int
mrule_parse(relay_matcher *m, const char *json, size_t len, int validated, uint32_t *group, char *err, size_t errlen)
{
    rparser r = {m, json, json, json + len, err, errlen};
    char why[128];

    if (!validated && relay_json_validate_object(json, len, SIZE_MAX, why, sizeof(why)) < 0) {
        if (err && errlen) {
            snprintf(err, errlen, "invalid rule: %s", why);
        }
        return -1;
    }
    return parse_group(&r, 0, 1, group);
}
