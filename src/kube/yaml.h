/*
 * kube/yaml.h - YAML documents (kubeconfig, service config files) as JSON.
 *
 * Kubernetes configuration is YAML, while all of gpusched works on jansson
 * trees; this converts the first document of a YAML text into a json_t.
 * Quoted scalars stay strings; plain scalars become integers, reals,
 * booleans (true/false) or null (null, ~, empty) when they read as one, else
 * strings. Anchors and aliases are refused (no billion laughs), nesting is
 * bounded to 64 levels and input to 4 MiB. Errors give the line and column.
 *
 * Ownership: *out is a new reference for the caller.
 */
#ifndef GPUSCHED_KUBE_YAML_H
#define GPUSCHED_KUBE_YAML_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

#define KUBE_YAML_MAX (4u << 20)

int kube_yaml_parse(const char *text, size_t len, json_t **out, struct gs_err *e);
/* Reads and parses a file; errors are prefixed with its path. */
int kube_yaml_load(const char *path, json_t **out, struct gs_err *e);

#endif
