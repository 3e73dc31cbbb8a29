/* Full evaluation of one rule against the values collected during the scan.
 * Recursion follows the rule's group nesting (capped at compile time), never
 * the event's: nested arrays were already flattened into occurrence lists. */
#include "matcher_internal.h"
#include "relay/json_scan.h"

#include <string.h>

static int eval_group(const relay_match_state *st, uint32_t group, int32_t inst);


static int
compare(double value, double limit, cmp_op op)
{
    switch (op) {
    case CMP_GT:
        return value > limit;
    case CMP_GTE:
        return value >= limit;
    case CMP_LT:
        return value < limit;
    default:
        return value <= limit;
    }
}


/* Compare an RFC3339 string with now + offset at nanosecond precision. */
static int
temporal(const relay_match_state *st, const malt *a, const mocc *o)
{
    int64_t sec, cutoff_ms, csec;
    int32_t nsec, cnsec;
    int beyond, order;

    if (o->type != RELAY_JSON_STRING || mtime_parse(o->str, o->len, &sec, &nsec, &beyond) < 0) {
        return 0;
    }
    if (__builtin_add_overflow(st->now_ms, a->offset_ms, &cutoff_ms)) {
        cutoff_ms = a->offset_ms > 0 ? INT64_MAX : INT64_MIN;
    }
    csec = cutoff_ms / 1000;
    cnsec = (int32_t)(cutoff_ms % 1000) * 1000000;
    if (cnsec < 0) {
        csec--;
        cnsec += 1000000000;
    }
    if (sec != csec) {
        order = sec < csec ? -1 : 1;
    } else if (nsec != cnsec) {
        order = nsec < cnsec ? -1 : 1;
    } else {
        order = beyond;
    }
    return compare((double)order, 0.0, (cmp_op)a->op);
}


static int
value_matches(const relay_match_state *st, const malt *a, const mocc *o)
{
    const relay_matcher *m = st->m;
    const char *lit = m->pool + a->str_off;

    switch (a->kind) {
    case ALT_EQ_STR:
        return o->type == RELAY_JSON_STRING && o->len == a->str_len && same_bytes(o->str, lit, o->len);
    case ALT_EQ_NUM:
        return o->type == RELAY_JSON_NUMBER && o->num == a->num;
    case ALT_EQ_TRUE:
        return o->type == RELAY_JSON_TRUE;
    case ALT_EQ_FALSE:
        return o->type == RELAY_JSON_FALSE;
    case ALT_EQ_NULL:
        return o->type == RELAY_JSON_NULL;
    case ALT_PREFIX:
        return o->type == RELAY_JSON_STRING && o->len >= a->str_len && same_bytes(o->str, lit, a->str_len);
    case ALT_SUFFIX:
        return o->type == RELAY_JSON_STRING && o->len >= a->str_len
               && same_bytes(o->str + o->len - a->str_len, lit, a->str_len);
    case ALT_CMP_NUM:
        return o->type == RELAY_JSON_NUMBER && compare(o->num, a->num, (cmp_op)a->op);
    case ALT_CMP_TIME:
        return temporal(st, a, o);
    default:
        return 0;
    }
}


/* A group alternative: some element (or the value itself) satisfies it;
 * non-object values act as {}. */
static int
group_matches(const relay_match_state *st, const malt *a, const mslot *s)
{
    const relay_matcher *m = st->m;
    uint32_t o;

    if (!s || !s->present) {
        return m->groups[a->group].holds_on_empty;
    }
    for (o = s->head; o != MNONE; o = st->occs[o].next) {
        const mocc *occ = &st->occs[o];

        if (occ->type == RELAY_JSON_OBJECT && occ->inst >= 0 ? eval_group(st, a->group, occ->inst)
                                                             : m->groups[a->group].holds_on_empty) {
            return 1;
        }
    }
    return 0;
}


static int
alt_matches(const relay_match_state *st, const malt *a, const mslot *s)
{
    uint32_t o;

    if (a->kind == ALT_EXISTS) {
        return (s && s->present) == a->exists;
    }
    if (a->kind == ALT_GROUP) {
        return group_matches(st, a, s);
    }
    if (!s || !s->present) {
        return 0;
    }
    for (o = s->head; o != MNONE; o = st->occs[o].next) {
        if (value_matches(st, a, &st->occs[o])) {
            return 1;
        }
    }
    return 0;
}


static int
eval_group(const relay_match_state *st, uint32_t group, int32_t inst)
{
    const relay_matcher *m = st->m;
    const mgroup *g = &m->groups[group];
    uint32_t f, a;

    if (inst < 0) {
        return g->holds_on_empty;
    }
    for (f = g->first_field; f != MNONE; f = m->fields[f].next) {
        const mfield *field = &m->fields[f];
        const mslot *s = &st->slots[st->insts[inst].slot_base + m->nodes[field->node].child_index];
        int ok = 0;

        for (a = field->first_alt; a != MNONE && !ok; a = m->alts[a].next) {
            ok = alt_matches(st, &m->alts[a], s);
        }
        if (!ok) {
            return 0;
        }
    }
    return 1;
}


int
meval_rule(const relay_match_state *st, uint32_t rule)
{
    const relay_matcher *m = st->m;
    return eval_group(st, m->rules[rule], st->ninst ? 0 : -1);
}
