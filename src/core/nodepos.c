/* core/nodepos.c - core_node_pos (core.h): a node's position in its
 * cluster, for callers outside the core that remember nodes by position. */
#include "core/core.h"
#include "core/internal.h"

int core_node_pos(const struct core_node *n) { return n->priv->pos; }
