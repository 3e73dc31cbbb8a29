/* libFuzzer target for the matcher and the JSON scanner.
 * Input: up to four lines of rules in normal form, then the event (the rest
 * of the input, newlines included). Rules may fail to compile; nothing may
 * crash, leak or hit undefined behaviour, and matching must agree with plain
 * validation about which events are malformed. */
#include "relay/json_scan.h"
#include "relay/matcher.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RULES 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *nl;
    relay_matcher *m = relay_matcher_new();
    uint32_t ids[8];
    char err[256];
    int i, n, valid;

    if (!m)
        return 0;
    for (i = 0; i < MAX_RULES && (nl = memchr(p, '\n', (size_t)(end - p))); i++) {
        relay_matcher_add(m, p, (size_t)(nl - p), err, sizeof err);
        p = nl + 1;
    }
    n = relay_matcher_match(m, p, (size_t)(end - p), 4096, INT64_C(1767225600000), ids, 8, err,
                            sizeof err);
    valid = relay_json_validate_object(p, (size_t)(end - p), 4096, err, sizeof err) == 0;
    if ((n >= 0) != valid)
        abort();
    for (i = 1; i < n && i < 8; i++)
        if (ids[i - 1] >= ids[i])
            abort();
    relay_matcher_free(m);
    return 0;
}
