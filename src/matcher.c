/* The matcher's public API and the scan visitor that collects, for one event,
 * the values below key paths some rule uses. See include/relay/matcher.h. */
#include "matcher_internal.h"
#include "relay/json_scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slot 0 is a pseudo key holding the top-level value. */
#define ROOT_SLOT 0


static int
set_message(char *buf, size_t len, const char *text)
{
    if (buf && len) {
        snprintf(buf, len, "%s", text);
    }
    return -1;
}


relay_matcher *
relay_matcher_new(void)
{
    relay_matcher *m = calloc(1, sizeof(*m));

    if (!m) {
        return NULL;
    }
    /* Node 0 is the event's top-level object. */
    if (mgrow(&m->nodes, &m->nodes_cap, 1, sizeof(*m->nodes)) < 0) {
        free(m);
        return NULL;
    }
    memset(&m->nodes[0], 0, sizeof(m->nodes[0]));
    m->nodes[0].parent = MNONE;
    m->nnodes = 1;
    return m;
}


int
relay_matcher_add(relay_matcher *m, const char *rule_json, size_t len, char *err, size_t errlen)
{
    size_t groups = m->ngroups, fields = m->nfields, alts = m->nalts;
    uint32_t group;

    if (m->nrules >= INT32_MAX) {
        return set_message(err, errlen, "too many rules");
    }
    if (mgrow(&m->rules, &m->rules_cap, m->nrules + 1, sizeof(*m->rules)) < 0) {
        return set_message(err, errlen, "out of memory");
    }
    if (mrule_parse(m, rule_json, len, &group, err, errlen) < 0) {
        /* Nodes made for the failed rule stay; they only widen tracking. */
        m->ngroups = groups;
        m->nfields = fields;
        m->nalts = alts;
        return -1;
    }
    m->rules[m->nrules] = group;
    m->compiled = 0;
    return (int)m->nrules++;
}


int
relay_matcher_compile(relay_matcher *m, char *err, size_t errlen)
{
    uint32_t *stamp;

    if (m->compiled) {
        return 0;
    }
    mindex_clear(m);
    stamp = realloc(m->stamp, (m->nrules ? m->nrules : 1) * sizeof(*stamp));
    if (!stamp) {
        return set_message(err, errlen, "out of memory");
    }
    m->stamp = stamp;
    memset(m->stamp, 0, (m->nrules ? m->nrules : 1) * sizeof(*stamp));
    m->generation = 0;
    if (mindex_build(m) < 0) {
        mindex_clear(m);
        return set_message(err, errlen, "out of memory");
    }
    m->compiled = 1;
    return 0;
}


size_t
relay_matcher_count(const relay_matcher *m)
{
    return m->nrules;
}


/* Append a value to slot s; returns its index or MNONE when out of memory. */
static uint32_t
add_occ(relay_matcher *m, int32_t s, relay_json_type type)
{
    mslot *slot = &m->slots[s];
    mocc *o;
    uint32_t id;

    if (mgrow(&m->occs, &m->occ_cap, m->nocc + 1, sizeof(*m->occs)) < 0) {
        m->oom = 1;
        return MNONE;
    }
    id = (uint32_t)m->nocc++;
    o = &m->occs[id];
    o->type = (uint8_t)type;
    o->next = MNONE;
    o->inst = -1;
    o->str = NULL;
    o->len = 0;
    if (slot->tail == MNONE) {
        slot->head = id;
    } else {
        m->occs[slot->tail].next = id;
    }
    slot->tail = id;
    return id;
}


static int32_t
visit_key(void *ctx, int32_t object, const char *key, size_t len, int escaped)
{
    relay_matcher *m = ctx;
    const minst *inst = &m->insts[object];
    uint32_t child;
    mslot *s;

    if (escaped) {
        char *out = m->arena + m->arena_len;

        len = relay_json_unescape(key, len, out);
        m->arena_len += len;
        key = out;
    }
    if (!(m->nodes[inst->node].child_lens & UINT64_C(1) << (len < 63 ? len : 63))) {
        return -1;
    }
    child = mnode_child(m, inst->node, key, len);
    if (child == MNONE) {
        return -1;
    }
    /* A repeated key starts over: the last one wins. */
    s = &m->slots[inst->slot_base + m->nodes[child].child_index];
    s->node = child;
    s->present = 1;
    s->head = s->tail = MNONE;
    return (int32_t)(inst->slot_base + m->nodes[child].child_index);
}


static void
index_string(relay_matcher *m, uint32_t node, const mocc *o)
{
    const mnode *n = &m->nodes[node];
    uint32_t i;

    if (n->indexed & 1u << TAG_STR) {
        mindex_candidates(m, node, TAG_STR, o->str, o->len);
    }
    for (i = 0; i < n->nprefix && n->prefix_lens[i] <= o->len; i++) {
        mindex_candidates(m, node, TAG_PREFIX, o->str, n->prefix_lens[i]);
    }
    for (i = 0; i < n->nsuffix && n->suffix_lens[i] <= o->len; i++) {
        mindex_candidates(m, node, TAG_SUFFIX, o->str + o->len - n->suffix_lens[i], n->suffix_lens[i]);
    }
}


static void
index_literal(relay_matcher *m, uint32_t node, relay_json_type type)
{
    uint32_t tag = type == RELAY_JSON_TRUE ? TAG_TRUE : type == RELAY_JSON_FALSE ? TAG_FALSE : TAG_NULL;

    if (m->nodes[node].indexed & 1u << tag) {
        mindex_candidates(m, node, tag, "", 0);
    }
}


static void
visit_scalar(void *ctx, int32_t s, relay_json_type type, const char *text, size_t len, int escaped)
{
    relay_matcher *m = ctx;
    uint32_t node = m->slots[s].node, id = add_occ(m, s, type);
    const mnode *n = &m->nodes[node];
    mocc *o;

    if (id == MNONE) {
        return;
    }
    o = &m->occs[id];
    if (type == RELAY_JSON_STRING && escaped) {
        o->str = m->arena + m->arena_len;
        len = relay_json_unescape(text, len, m->arena + m->arena_len);
        m->arena_len += len;
    } else {
        o->str = text;
    }
    o->len = (uint32_t)len;
    o->num = 0;
    if (type == RELAY_JSON_NUMBER && n->needs_number) {
        o->num = relay_json_number(text, len);
        if (o->num == 0) {
            o->num = 0; /* -0 indexes like 0 */
        }
    }
    if (!n->indexed) {
        return;
    }
    if (type == RELAY_JSON_STRING) {
        index_string(m, node, o);
    } else if (type == RELAY_JSON_NUMBER && n->indexed & 1u << TAG_NUM) {
        mindex_candidates(m, node, TAG_NUM, (const char *)&o->num, sizeof(o->num));
    } else if (type == RELAY_JSON_TRUE || type == RELAY_JSON_FALSE || type == RELAY_JSON_NULL) {
        index_literal(m, node, type);
    }
}


static int32_t
visit_object(void *ctx, int32_t s)
{
    relay_matcher *m = ctx;
    uint32_t node = m->slots[s].node, id = add_occ(m, s, RELAY_JSON_OBJECT);
    uint32_t nchildren = m->nodes[node].nchildren, i;
    minst *inst;

    if (id == MNONE || nchildren == 0) {
        return -1;
    }
    if (mgrow(&m->insts, &m->inst_cap, m->ninst + 1, sizeof(*m->insts)) < 0 || m->nslot + nchildren > INT32_MAX
        || mgrow(&m->slots, &m->slot_cap, m->nslot + nchildren, sizeof(*m->slots)) < 0) {
        m->oom = 1;
        return -1;
    }
    inst = &m->insts[m->ninst];
    inst->node = node;
    inst->slot_base = (uint32_t)m->nslot;
    for (i = 0; i < nchildren; i++) {
        m->slots[m->nslot + i].present = 0;
        m->slots[m->nslot + i].head = m->slots[m->nslot + i].tail = MNONE;
    }
    m->nslot += nchildren;
    m->occs[id].inst = (int32_t)m->ninst;
    return (int32_t)m->ninst++;
}


/* Arrays are transparent: elements belong to the same key. */
static int32_t
visit_array(void *ctx, int32_t s)
{
    (void)ctx;
    return s;
}


/* Reset the per-event scratch; the arena gets room for every unescaped byte. */
static int
begin_event(relay_matcher *m, size_t len, int64_t now_ms)
{
    if (mgrow(&m->arena, &m->arena_cap, len + 1, 1) < 0 || mgrow(&m->slots, &m->slot_cap, 1, sizeof(*m->slots)) < 0) {
        return -1;
    }
    m->nocc = m->ninst = m->ncand = m->arena_len = 0;
    m->oom = 0;
    m->now_ms = now_ms;
    if (++m->generation == 0) {
        memset(m->stamp, 0, (m->nrules ? m->nrules : 1) * sizeof(*m->stamp));
        m->generation = 1;
    }
    m->slots[ROOT_SLOT].node = 0;
    m->slots[ROOT_SLOT].present = 1;
    m->slots[ROOT_SLOT].head = m->slots[ROOT_SLOT].tail = MNONE;
    m->nslot = 1;
    return 0;
}


static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}


/* Evaluate candidates and always-on rules in ascending id order. */
static int
collect_hits(relay_matcher *m, uint32_t *ids, size_t ids_cap)
{
    size_t c = 0, a = 0, count = 0;
    uint32_t rule;

    if (m->ncand > 1) {
        qsort(m->cands, m->ncand, sizeof(*m->cands), cmp_u32);
    }
    while (c < m->ncand || a < m->nalways) {
        if (a == m->nalways || (c < m->ncand && m->cands[c] < m->always[a])) {
            rule = m->cands[c++];
        } else {
            rule = m->always[a++];
        }
        if (!meval_rule(m, rule)) {
            continue;
        }
        if (count < ids_cap) {
            ids[count] = rule;
        }
        count++;
    }
    return (int)count;
}


int
relay_matcher_match(relay_matcher *m, const char *event, size_t len, size_t max_bytes, int64_t now_ms, uint32_t *ids,
                    size_t ids_cap, char *reason, size_t reasonlen)
{
    relay_json_visitor v = {m, visit_key, visit_scalar, visit_object, visit_array};

    if (len > max_bytes) {
        return relay_json_validate_object(event, len, max_bytes, reason, reasonlen);
    }
    if (relay_matcher_compile(m, NULL, 0) < 0 || begin_event(m, len, now_ms) < 0) {
        return set_message(reason, reasonlen, "out of memory");
    }
    if (relay_json_scan_object(event, len, max_bytes, &v, ROOT_SLOT, reason, reasonlen) < 0) {
        return -1;
    }
    if (m->oom) {
        return set_message(reason, reasonlen, "out of memory");
    }
    return collect_hits(m, ids, ids_cap);
}


void
relay_matcher_free(relay_matcher *m)
{
    if (!m) {
        return;
    }
    mindex_clear(m);
    mtable_free(&m->edges);
    free(m->pool);
    free(m->nodes);
    free(m->groups);
    free(m->fields);
    free(m->alts);
    free(m->rules);
    free(m->postings);
    free(m->always);
    free(m->occs);
    free(m->slots);
    free(m->insts);
    free(m->arena);
    free(m->stamp);
    free(m->cands);
    free(m);
}
