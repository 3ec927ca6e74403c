/*
 * core/registry.c - policies by name (the k8s in-tree registry as a table).
 *
 * The built-in rows come first, in the order --list-policies prints them;
 * core_policy_register() appends more at start-up. Names are unique.
 */
#include <stdio.h>
#include <string.h>

#include "core/builtin.h"

#define EXTRA_MAX 16

static const struct core_policy *const builtin[] = {
    &core_policy_random,  &core_policy_dotprod, &core_policy_clustering,
    &core_policy_packing, &core_policy_bestfit, &core_policy_fgd,
    &core_policy_binpack, &core_policy_spread,  &core_policy_topology, &core_policy_cpufrag,
};
#define N_BUILTIN ((int)(sizeof builtin / sizeof builtin[0]))

static const struct core_policy *extra[EXTRA_MAX];
static int n_extra;

int core_policy_count(void)
{
    return N_BUILTIN + n_extra;
}

const struct core_policy *core_policy_at(int i)
{
    if (i < 0 || i >= core_policy_count())
        return NULL;
    return i < N_BUILTIN ? builtin[i] : extra[i - N_BUILTIN];
}

const struct core_policy *core_policy_find(const char *name)
{
    for (int i = 0; name && i < core_policy_count(); i++)
        if (strcmp(core_policy_at(i)->name, name) == 0)
            return core_policy_at(i);
    return NULL;
}

const struct core_policy *core_policy_need(const char *name, const char *field, struct gs_err *e)
{
    const struct core_policy *p = core_policy_find(name);
    char known[400] = "";
    size_t at = 0;
    if (p)
        return p;
    for (int i = 0; i < core_policy_count() && at < sizeof known; i++)
        at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "",
                               core_policy_at(i)->name);
    gs_errf(e, GS_EINVAL, "%s: '%.64s' is not a known policy (%s)", field, name ? name : "",
            known);
    return NULL;
}

int core_policy_register(const struct core_policy *p, struct gs_err *e)
{
    if (!p || !p->name || !p->name[0] || !p->score)
        return gs_errf(e, GS_EINVAL, "policy: a name and a score function are required");
    if (core_policy_find(p->name))
        return gs_errf(e, GS_ECONFLICT, "policy %s: already registered", p->name);
    if (n_extra >= EXTRA_MAX)
        return gs_errf(e, GS_ETOOBIG, "policy %s: registry full (%d extra policies)", p->name,
                       EXTRA_MAX);
    extra[n_extra++] = p;
    return 0;
}
