/*
 * core/builtin.h - private to src/core: the built-in policy rows that the
 * registry lists, and the small scoring helpers they share.
 */
#ifndef GPUSCHED_CORE_BUILTIN_H
#define GPUSCHED_CORE_BUILTIN_H

#include "core/policy.h"

extern const struct core_policy core_policy_random, core_policy_dotprod,
    core_policy_clustering, core_policy_packing, core_policy_bestfit, core_policy_fgd,
    core_policy_binpack, core_policy_spread, core_policy_topology, core_policy_cpufrag;

/* The pod's total GPU share on node n (num_gpu x its share per GPU). */
int pol_req_total(const struct core_cycle *cy, const struct core_node *n);
/* Integer min-max rescale of n raw scores to 0..100; all equal -> all 0. */
void pol_minmax(const struct core_cycle *cy, int *s, int n);
/* The lowest and highest of s[0..n-1] (n >= 1). */
void pol_range(const int *s, int n, int *lo, int *hi);

#endif
