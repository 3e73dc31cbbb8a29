/*
 * yaml_fast: the plain shape of app templates, parsed without libyaml (see
 * src/yaml_fast.c for exactly which shape). relay_yaml_parse tries it first.
 */
#ifndef RELAY_YAML_FAST_H
#define RELAY_YAML_FAST_H

#include "relay/yaml_doc.h"

#include <stddef.h>

/* 1 with *root set to the same tree libyaml would give (freed with
 * relay_yaml_free); 0 when the text is not of the plain shape, or memory ran
 * out, and libyaml must parse it. */
int relay_yaml_fast_parse(const char *text, size_t len, relay_yaml_node **root);

#endif
