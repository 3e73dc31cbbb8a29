/* The words of the pattern language (include/relay/matcher.h): one table, read
 * by the rule reader here, by pattern_compile.c and, through the binding, by
 * lua/relay/pattern.lua. Rows sit at their op_code (matcher_internal.h), so the
 * reader dispatches on the row it found instead of comparing spellings. */
#include "matcher_internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define ROW(name, operand, written)              \
    {                                            \
        name, sizeof(name) - 1, operand, written \
    }

const relay_matcher_op relay_matcher_ops[] = {
    [OP_EQ] = ROW("eq", RELAY_OPERAND_LITERAL, 0),
    [OP_PREFIX] = ROW("prefix", RELAY_OPERAND_STRING, 1),
    [OP_SUFFIX] = ROW("suffix", RELAY_OPERAND_STRING, 1),
    [OP_EXISTS] = ROW("exists", RELAY_OPERAND_BOOLEAN, 1),
    [OP_GT] = ROW("gt", RELAY_OPERAND_THRESHOLD, 1),
    [OP_GTE] = ROW("gte", RELAY_OPERAND_THRESHOLD, 1),
    [OP_LT] = ROW("lt", RELAY_OPERAND_THRESHOLD, 1),
    [OP_LTE] = ROW("lte", RELAY_OPERAND_THRESHOLD, 1),
    [OP_GROUP] = ROW("group", RELAY_OPERAND_GROUP, 0),
    [OP_FOREIGN] = ROW("numeric", RELAY_OPERAND_FOREIGN, 0),
    ROW("anything-but", RELAY_OPERAND_FOREIGN, 0),
    ROW("wildcard", RELAY_OPERAND_FOREIGN, 0),
    ROW("equals-ignore-case", RELAY_OPERAND_FOREIGN, 0),
    ROW("cidr", RELAY_OPERAND_FOREIGN, 0),
    ROW("$or", RELAY_OPERAND_FOREIGN, 0),
    {NULL, 0, 0, 0},
};


/* Bit (x % 64) for each name length and, apart, each first byte of the
 * table's names: most lookups are of field names, and these turn nearly all
 * of them away without a walk of the table. Worked out on first use; threads
 * that race store the same masks. */
static _Atomic uint64_t name_lengths, first_bytes;

static int
may_name_op(const char *name, size_t len)
{
    uint64_t lengths = atomic_load_explicit(&name_lengths, memory_order_acquire), firsts = 0;
    const relay_matcher_op *op;

    if (lengths != 0) {
        firsts = atomic_load_explicit(&first_bytes, memory_order_relaxed); /* stored before lengths */
    } else {
        for (op = relay_matcher_ops; op->name != NULL; op++) {
            lengths |= UINT64_C(1) << (op->len % 64);
            firsts |= UINT64_C(1) << ((unsigned char)op->name[0] % 64);
        }
        atomic_store_explicit(&first_bytes, firsts, memory_order_relaxed);
        atomic_store_explicit(&name_lengths, lengths, memory_order_release);
    }
    return len > 0 && (lengths >> (len % 64) & 1) && (firsts >> ((unsigned char)name[0] % 64) & 1);
}


const relay_matcher_op *
relay_matcher_op_find(const char *name, size_t len)
{
    const relay_matcher_op *op;

    if (!may_name_op(name, len)) {
        return NULL;
    }
    for (op = relay_matcher_ops; op->name != NULL; op++) {
        if (op->len == len && memcmp(op->name, name, len) == 0) {
            return op;
        }
    }
    return NULL;
}


const char *
relay_matcher_operand_name(relay_matcher_operand operand)
{
    switch (operand) {
    case RELAY_OPERAND_LITERAL:
        return "literal";
    case RELAY_OPERAND_STRING:
        return "string";
    case RELAY_OPERAND_BOOLEAN:
        return "boolean";
    case RELAY_OPERAND_THRESHOLD:
        return "threshold";
    case RELAY_OPERAND_GROUP:
        return "group";
    case RELAY_OPERAND_FOREIGN:
        break;
    }
    return "foreign";
}
