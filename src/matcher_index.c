/* The literal index. Each rule gets one anchor: a field that must hold for
 * the rule to match (reached through top-level fields and single-group
 * alternatives only, so it is ANDed with the rest) whose alternatives are all
 * literals, prefixes or suffixes. An event value at the anchor's node that
 * hits one of those literals makes the rule a candidate; only candidates and
 * rules without an anchor are evaluated in full. */
#include "matcher_internal.h"

#include <stdlib.h>
#include <string.h>


/* How selective an alternative is as an anchor; 0 means not indexable. */
static int
alt_score(const malt *a)
{
    switch (a->kind) {
    case ALT_EQ_STR:
    case ALT_EQ_NUM:
        return 4;
    case ALT_PREFIX:
        return a->str_len ? 3 : 1;
    case ALT_SUFFIX:
        return a->str_len ? 2 : 1;
    case ALT_EQ_TRUE:
    case ALT_EQ_FALSE:
    case ALT_EQ_NULL:
        return 1;
    default:
        return 0;
    }
}


static int
field_score(const relay_matcher *m, const mfield *f)
{
    int best = 4, s;
    uint32_t a;

    for (a = f->first_alt; a != MNONE; a = m->alts[a].next) {
        s = alt_score(&m->alts[a]);
        if (s < best) {
            best = s;
        }
    }
    return best;
}


static void
find_anchor(const relay_matcher *m, uint32_t group, uint32_t *best, int *best_score)
{
    uint32_t f;

    for (f = m->groups[group].first_field; f != MNONE; f = m->fields[f].next) {
        const mfield *field = &m->fields[f];
        const malt *first = &m->alts[field->first_alt];
        int s = field_score(m, field);

        if (s > *best_score) {
            *best = f;
            *best_score = s;
        }
        if (first->kind == ALT_GROUP && first->next == MNONE) {
            find_anchor(m, first->group, best, best_score);
        }
    }
}


static uint32_t
alt_tag(const malt *a)
{
    static const uint32_t tags[] = {
        [ALT_EQ_STR] = TAG_STR,   [ALT_EQ_NUM] = TAG_NUM,    [ALT_EQ_TRUE] = TAG_TRUE,  [ALT_EQ_FALSE] = TAG_FALSE,
        [ALT_EQ_NULL] = TAG_NULL, [ALT_PREFIX] = TAG_PREFIX, [ALT_SUFFIX] = TAG_SUFFIX,
    };

    return tags[a->kind];
}


/* Add a distinct length to a node's ascending prefix or suffix list. */
static int
add_length(uint32_t **lens, uint32_t *n, uint32_t len)
{
    uint32_t i, *grown;

    for (i = 0; i < *n && (*lens)[i] < len; i++) {
        ;
    }
    if (i < *n && (*lens)[i] == len) {
        return 0;
    }
    if (!(grown = realloc(*lens, (*n + 1) * sizeof(**lens)))) {
        return -1;
    }
    memmove(grown + i + 1, grown + i, (*n - i) * sizeof(*grown));
    grown[i] = len;
    *lens = grown;
    (*n)++;
    return 0;
}


/* Register one anchor alternative. In the counting pass only entries and
 * counts are made; in the filling pass postings are written. */
static int
index_alt(relay_matcher *m, uint32_t node, const malt *a, uint32_t rule, int fill)
{
    uint32_t tag = alt_tag(a);
    const char *key = m->pool + a->str_off;
    uint64_t h = mindex_hash(node, tag, key, a->str_len);
    mentry *e = mtable_find(&m->index, h, node, tag, m->pool, key, a->str_len);
    mnode *n = &m->nodes[node];

    if (fill) {
        if (e->count == 0 || m->postings[e->value + e->count - 1] != rule) {
            m->postings[e->value + e->count++] = rule;
        }
        return 0;
    }
    if (!e) {
        if (!(e = mtable_insert(&m->index, h))) {
            return -1;
        }
        e->node = node;
        e->tag = tag;
        e->key_off = a->str_off;
        e->key_len = a->str_len;
        e->value = MNONE; /* last rule counted, to count each rule once */
    }
    if (e->value != rule) {
        e->value = rule;
        e->count++;
    }
    n->indexed |= (uint8_t)(1u << tag);
    if (tag == TAG_PREFIX) {
        return add_length(&n->prefix_lens, &n->nprefix, a->str_len);
    }
    if (tag == TAG_SUFFIX) {
        return add_length(&n->suffix_lens, &n->nsuffix, a->str_len);
    }
    return 0;
}


/* Turn counts into offsets into m->postings and reset counts for filling. */
static int
layout_postings(relay_matcher *m)
{
    size_t i, total = 0;

    for (i = 0; i < m->index.cap; i++) {
        mentry *e = &m->index.slots[i];

        if (!e->used) {
            continue;
        }
        e->value = (uint32_t)total;
        total += e->count;
        e->count = 0;
    }
    m->npostings = total;
    return mgrow(&m->postings, &m->postings_cap, total ? total : 1, sizeof(*m->postings));
}


/* One pass over all rules: index anchors, or list the rule as always-on. */
static int
index_pass(relay_matcher *m, uint32_t *anchors, int fill)
{
    uint32_t r, a;

    for (r = 0; r < m->nrules; r++) {
        const mfield *f;

        if (anchors[r] == MNONE) {
            if (fill) {
                m->always[m->nalways++] = r;
            }
            continue;
        }
        f = &m->fields[anchors[r]];
        for (a = f->first_alt; a != MNONE; a = m->alts[a].next) {
            if (index_alt(m, f->node, &m->alts[a], r, fill) < 0) {
                return -1;
            }
        }
    }
    return 0;
}


int
mindex_build(relay_matcher *m)
{
    uint32_t *anchors, r;
    int score, rc = -1;

    if (!(anchors = malloc((m->nrules ? m->nrules : 1) * sizeof(*anchors)))) {
        return -1;
    }
    for (r = 0; r < m->nrules; r++) {
        anchors[r] = MNONE;
        score = 0;
        find_anchor(m, m->rules[r], &anchors[r], &score);
    }
    free(m->always);
    m->nalways = 0;
    if ((m->always = malloc((m->nrules ? m->nrules : 1) * sizeof(*m->always))) && index_pass(m, anchors, 0) == 0
        && layout_postings(m) == 0 && index_pass(m, anchors, 1) == 0) {
        rc = 0;
    }
    free(anchors);
    return rc;
}


void
mindex_clear(relay_matcher *m)
{
    size_t i;

    for (i = 0; i < m->nnodes; i++) {
        mnode *n = &m->nodes[i];

        free(n->prefix_lens);
        free(n->suffix_lens);
        n->prefix_lens = n->suffix_lens = NULL;
        n->nprefix = n->nsuffix = 0;
        n->indexed = 0;
    }
    mtable_free(&m->index);
    m->npostings = 0;
    m->nalways = 0;
}


/* Mark the rules whose anchor literal (node, tag, key) was seen. */
void
mindex_candidates(relay_match_state *s, uint32_t node, uint32_t tag, const char *key, size_t len)
{
    const relay_matcher *m = s->m;
    mentry *e = mtable_find(&m->index, mindex_hash(node, tag, key, len), node, tag, m->pool, key, len);
    uint32_t i, rule;

    if (!e) {
        return;
    }
    for (i = 0; i < e->count; i++) {
        rule = m->postings[e->value + i];
        if (s->stamp[rule] == s->generation) {
            continue;
        }
        s->stamp[rule] = s->generation;
        if (mgrow(&s->cands, &s->cand_cap, s->ncand + 1, sizeof(*s->cands)) < 0) {
            s->oom = 1;
            return;
        }
        s->cands[s->ncand++] = rule;
    }
}
