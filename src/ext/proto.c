/* ext/proto.c - see proto.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ext/proto.h"

json_t *ext_iget(const json_t *obj, const char *key)
{
    const char *k;
    json_t *v;
    if (!json_is_object(obj))
        return NULL;
    if ((v = json_object_get(obj, key)))
        return v;
    json_object_foreach((json_t *)obj, k, v)
    {
        if (strcasecmp(k, key) == 0)
            return v;
    }
    return NULL;
}

static int load(const char *body, size_t len, json_t **doc, struct gs_err *e)
{
    json_error_t je;
    if (!(*doc = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je)))
        return gs_errf(e, GS_EINVAL, "request body is not valid JSON: %s (line %d column %d)",
                       je.text, je.line, je.column);
    if (!json_is_object(*doc)) {
        json_decref(*doc);
        *doc = NULL;
        return gs_errf(e, GS_EINVAL, "request body must be a JSON object");
    }
    return 0;
}

static int check_pod(const json_t *p, const json_t **pod, struct gs_err *e)
{
    const json_t *md;
    if (!p || json_is_null(p))
        return gs_errf(e, GS_EINVAL, "Pod: missing");
    if (!json_is_object(p))
        return gs_errf(e, GS_EINVAL, "Pod: not an object");
    md = json_object_get(p, "metadata");
    if (!json_is_object(md))
        return gs_errf(e, GS_EINVAL, "Pod.metadata: missing or not an object");
    if (!json_is_string(json_object_get(md, "name")) || !*json_string_value(json_object_get(md, "name")))
        return gs_errf(e, GS_EINVAL, "Pod.metadata.name: missing or not a string");
    *pod = p;
    return 0;
}

static int get_pod(const json_t *doc, const json_t **pod, struct gs_err *e)
{
    return check_pod(ext_iget(doc, "Pod"), pod, e);
}

/* ---- a strict scanner for the top level of ExtenderArgs ------------------ */

struct scan {
    const char *p, *end, *base;
    struct gs_err *e;
};

#define SCAN_MAX_DEPTH 64

static int scan_err(struct scan *sc, const char *what)
{
    return gs_errf(sc->e, GS_EINVAL, "request body is not valid JSON: %s at byte %ld", what,
                   (long)(sc->p - sc->base));
}

static void ws(struct scan *sc)
{
    while (sc->p < sc->end && (*sc->p == ' ' || *sc->p == '\t' || *sc->p == '\n' || *sc->p == '\r'))
        sc->p++;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* Scans a string at sc->p ('"'); when out is set, writes the unescaped
 * bytes there (at most the raw length) and the length to *olen. */
static int scan_string(struct scan *sc, char *out, size_t *olen)
{
    size_t o = 0;
    if (sc->p >= sc->end || *sc->p != '"')
        return scan_err(sc, "expected a string");
    sc->p++;
    for (;;) {
        if (sc->p >= sc->end)
            return scan_err(sc, "unterminated string");
        unsigned char c = (unsigned char)*sc->p;
        if (c == '"') {
            sc->p++;
            break;
        }
        if (c < 0x20)
            return scan_err(sc, "control character in a string");
        if (c != '\\') {
            if (out)
                out[o] = (char)c;
            o++;
            sc->p++;
            continue;
        }
        if (sc->p + 1 >= sc->end)
            return scan_err(sc, "unterminated escape");
        char x = sc->p[1];
        sc->p += 2;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, x);
        if (x && k) {
            if (out)
                out[o] = to[k - from];
            o++;
            continue;
        }
        unsigned u, lo;
        if (x != 'u' || sc->end - sc->p < 4 || hex4(sc->p, &u) < 0)
            return scan_err(sc, "bad escape");
        sc->p += 4;
        if (u >= 0xd800 && u < 0xdc00) {
            if (sc->end - sc->p < 6 || sc->p[0] != '\\' || sc->p[1] != 'u' ||
                hex4(sc->p + 2, &lo) < 0 || lo < 0xdc00 || lo >= 0xe000)
                return scan_err(sc, "bad surrogate pair");
            sc->p += 6;
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        } else if (u >= 0xdc00 && u < 0xe000) {
            return scan_err(sc, "bad surrogate pair");
        }
        /* UTF-8: at most 4 bytes, never longer than the 6-byte escape */
        char buf[4];
        int n;
        if (u < 0x80)
            buf[0] = (char)u, n = 1;
        else if (u < 0x800)
            buf[0] = (char)(0xc0 | (u >> 6)), buf[1] = (char)(0x80 | (u & 0x3f)), n = 2;
        else if (u < 0x10000)
            buf[0] = (char)(0xe0 | (u >> 12)), buf[1] = (char)(0x80 | ((u >> 6) & 0x3f)),
            buf[2] = (char)(0x80 | (u & 0x3f)), n = 3;
        else
            buf[0] = (char)(0xf0 | (u >> 18)), buf[1] = (char)(0x80 | ((u >> 12) & 0x3f)),
            buf[2] = (char)(0x80 | ((u >> 6) & 0x3f)), buf[3] = (char)(0x80 | (u & 0x3f)), n = 4;
        if (out)
            memcpy(out + o, buf, (size_t)n);
        o += (size_t)n;
    }
    if (olen)
        *olen = o;
    return 0;
}

static int scan_value(struct scan *sc, int depth);

static int scan_literal(struct scan *sc, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, lit, n) != 0)
        return scan_err(sc, "unexpected character");
    sc->p += n;
    return 0;
}

static int scan_number(struct scan *sc)
{
    const char *s = sc->p;
    if (sc->p < sc->end && *sc->p == '-')
        sc->p++;
    if (sc->p >= sc->end || *sc->p < '0' || *sc->p > '9')
        return scan_err(sc, "bad number");
    if (*sc->p == '0')
        sc->p++;
    else
        while (sc->p < sc->end && *sc->p >= '0' && *sc->p <= '9')
            sc->p++;
    if (sc->p < sc->end && *sc->p == '.') {
        sc->p++;
        if (sc->p >= sc->end || *sc->p < '0' || *sc->p > '9')
            return scan_err(sc, "bad number");
        while (sc->p < sc->end && *sc->p >= '0' && *sc->p <= '9')
            sc->p++;
    }
    if (sc->p < sc->end && (*sc->p == 'e' || *sc->p == 'E')) {
        sc->p++;
        if (sc->p < sc->end && (*sc->p == '+' || *sc->p == '-'))
            sc->p++;
        if (sc->p >= sc->end || *sc->p < '0' || *sc->p > '9')
            return scan_err(sc, "bad number");
        while (sc->p < sc->end && *sc->p >= '0' && *sc->p <= '9')
            sc->p++;
    }
    return sc->p > s ? 0 : scan_err(sc, "bad number");
}

/* Skips one container; sc->p is at '{' or '['. */
static int scan_container(struct scan *sc, int depth)
{
    char close = *sc->p == '{' ? '}' : ']';
    int first = 1, rc;
    if (depth > SCAN_MAX_DEPTH)
        return scan_err(sc, "nested too deeply");
    sc->p++;
    for (;;) {
        ws(sc);
        if (sc->p < sc->end && *sc->p == close && first) {
            sc->p++;
            return 0;
        }
        if (close == '}') {
            if ((rc = scan_string(sc, NULL, NULL)) < 0)
                return rc;
            ws(sc);
            if (sc->p >= sc->end || *sc->p != ':')
                return scan_err(sc, "expected ':'");
            sc->p++;
        }
        if ((rc = scan_value(sc, depth + 1)) < 0)
            return rc;
        ws(sc);
        first = 0;
        if (sc->p < sc->end && *sc->p == ',') {
            sc->p++;
            continue;
        }
        if (sc->p < sc->end && *sc->p == close) {
            sc->p++;
            return 0;
        }
        return scan_err(sc, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int scan_value(struct scan *sc, int depth)
{
    ws(sc);
    if (sc->p >= sc->end)
        return scan_err(sc, "unexpected end");
    switch (*sc->p) {
    case '"': return scan_string(sc, NULL, NULL);
    case '{':
    case '[': return scan_container(sc, depth);
    case 't': return scan_literal(sc, "true");
    case 'f': return scan_literal(sc, "false");
    case 'n': return scan_literal(sc, "null");
    default: return scan_number(sc);
    }
}

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return 0;
    }
    return 1;
}

/* NodeNames: an array of strings, unescaped into a->arena. */
static int scan_names(struct scan *sc, struct ext_args *a, size_t raw_len)
{
    size_t cap = 64, used = 0;
    int rc;
    if (!(a->arena = malloc(raw_len + 1)) || !(a->names = malloc(cap * sizeof *a->names)))
        return gs_errf(sc->e, GS_ENOMEM, "out of memory");
    sc->p++; /* '[' */
    ws(sc);
    if (sc->p < sc->end && *sc->p == ']') {
        sc->p++;
        return 0;
    }
    for (;;) {
        size_t n;
        ws(sc);
        if (sc->p >= sc->end || *sc->p != '"')
            return gs_errf(sc->e, GS_EINVAL, "NodeNames[%d]: not a string", a->n);
        if ((rc = scan_string(sc, a->arena + used, &n)) < 0)
            return rc;
        if (!name_ok(a->arena + used, n))
            return gs_errf(sc->e, GS_EINVAL, "NodeNames[%d]: not a node name", a->n);
        if ((size_t)a->n == cap) {
            const char **nn = realloc(a->names, 2 * cap * sizeof *nn);
            if (!nn)
                return gs_errf(sc->e, GS_ENOMEM, "out of memory");
            a->names = nn;
            cap *= 2;
        }
        a->arena[used + n] = '\0';
        a->names[a->n++] = a->arena + used;
        used += n + 1;
        ws(sc);
        if (sc->p < sc->end && *sc->p == ',') {
            sc->p++;
            continue;
        }
        if (sc->p < sc->end && *sc->p == ']') {
            sc->p++;
            return 0;
        }
        return scan_err(sc, "expected ',' or ']' in NodeNames");
    }
}

/* Replaces freshly scanned names by a list, which the cache keeps unless
 * the array is longer than EXT_NAMELIST_KEEP_MAX. */
static int keep_names(struct ext_namecache *cache, struct ext_args *a, const char *s,
                      const char *end, struct gs_err *e)
{
    struct ext_namelist *l = ext_namelist_new(s, (size_t)(end - s), a->names, a->n);
    if (!l)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    if ((size_t)(end - s) <= EXT_NAMELIST_KEEP_MAX)
        ext_namecache_add(cache, l);
    free(a->names);
    free(a->arena);
    a->arena = NULL;
    a->list = l;
    a->names = l->names;
    return 0;
}

int ext_args_parse(const char *body, size_t len, struct ext_args *a, struct gs_err *e)
{
    return ext_args_parse_cached(NULL, body, len, a, e);
}

int ext_args_parse_cached(struct ext_namecache *cache, const char *body, size_t len,
                          struct ext_args *a, struct gs_err *e)
{
    struct scan sc = {body, body + len, body, e};
    const char *pod_s = NULL, *pod_e = NULL, *nodes_s = NULL, *nodes_e = NULL;
    const char *names_s = NULL, *names_e = NULL;
    int seen_pod = 0, seen_names = 0, seen_nodes = 0, have_names = 0, rc;
    char key[16];

    memset(a, 0, sizeof *a);
    ws(&sc);
    if (sc.p >= sc.end || *sc.p != '{') {
        rc = sc.p >= sc.end ? scan_err(&sc, "empty body")
                            : gs_errf(e, GS_EINVAL, "request body must be a JSON object");
        goto fail;
    }
    sc.p++;
    ws(&sc);
    if (sc.p < sc.end && *sc.p == '}') {
        sc.p++;
    } else {
        for (;;) {
            const char *ks;
            size_t kl;
            ws(&sc);
            ks = sc.p;
            if ((rc = scan_string(&sc, NULL, &kl)) < 0)
                goto fail;
            /* the keys that matter are short; longer ones are skipped */
            key[0] = '\0';
            if (kl < sizeof key) {
                struct scan k2 = {ks, sc.end, sc.base, e};
                scan_string(&k2, key, &kl);
                key[kl] = '\0';
            }
            ws(&sc);
            if (sc.p >= sc.end || *sc.p != ':') {
                rc = scan_err(&sc, "expected ':'");
                goto fail;
            }
            sc.p++;
            ws(&sc);
            int which = strcasecmp(key, "pod") == 0         ? 1
                        : strcasecmp(key, "nodenames") == 0 ? 2
                        : strcasecmp(key, "nodes") == 0     ? 3
                                                            : 0;
            int *seen = which == 1 ? &seen_pod : which == 2 ? &seen_names : &seen_nodes;
            if (which && (*seen)++) {
                rc = gs_errf(e, GS_EINVAL, "%s: given twice", key);
                goto fail;
            }
            const char *vs = sc.p;
            if (which == 2 && sc.p < sc.end && *sc.p == '[') {
                size_t span;
                if (cache && (a->list = ext_namecache_match(cache, sc.p,
                                                            (size_t)(sc.end - sc.p), &span))) {
                    sc.p += span;
                    a->n = a->list->n;
                    a->names = a->list->names;
                } else if ((rc = scan_names(&sc, a, len)) < 0) {
                    goto fail;
                } else {
                    names_s = vs, names_e = sc.p;
                }
                have_names = 1;
            } else if (which == 2 && sc.p < sc.end && *sc.p != 'n') {
                rc = gs_errf(e, GS_EINVAL, "NodeNames: not an array");
                goto fail;
            } else if ((rc = scan_value(&sc, 1)) < 0) {
                goto fail;
            }
            if (which == 1)
                pod_s = vs, pod_e = sc.p;
            else if (which == 3)
                nodes_s = vs, nodes_e = sc.p;
            ws(&sc);
            if (sc.p < sc.end && *sc.p == ',') {
                sc.p++;
                continue;
            }
            if (sc.p < sc.end && *sc.p == '}') {
                sc.p++;
                break;
            }
            rc = scan_err(&sc, "expected ',' or '}'");
            goto fail;
        }
    }
    ws(&sc);
    if (sc.p != sc.end) {
        rc = scan_err(&sc, "trailing characters");
        goto fail;
    }
    if (!pod_s || (pod_e - pod_s == 4 && memcmp(pod_s, "null", 4) == 0)) {
        rc = gs_errf(e, GS_EINVAL, "Pod: missing");
        goto fail;
    }
    json_error_t je;
    if (!(a->pod_doc = json_loadb(pod_s, (size_t)(pod_e - pod_s),
                                  JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je))) {
        rc = gs_errf(e, GS_EINVAL, "Pod: %s", je.text);
        goto fail;
    }
    if ((rc = check_pod(a->pod_doc, &a->pod, e)) < 0)
        goto fail;
    if (have_names) {
        if (cache && names_s && (rc = keep_names(cache, a, names_s, names_e, e)) < 0)
            goto fail;
        return 0;
    }
    if (a->list)
        ext_namelist_put(a->list);
    else
        free(a->names);
    a->list = NULL;
    a->names = NULL;
    if (nodes_s && !(nodes_e - nodes_s == 4 && memcmp(nodes_s, "null", 4) == 0)) {
        const json_t *nodes, *items;
        if (!(a->nodes_doc = json_loadb(nodes_s, (size_t)(nodes_e - nodes_s),
                                        JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je))) {
            rc = gs_errf(e, GS_EINVAL, "Nodes: %s", je.text);
            goto fail;
        }
        nodes = a->nodes_doc;
        items = json_is_object(nodes) ? ext_iget(nodes, "items") : NULL;
        if (!json_is_object(nodes) || (items && !json_is_array(items) && !json_is_null(items))) {
            rc = gs_errf(e, GS_EINVAL, "Nodes: not a NodeList with an items array");
            goto fail;
        }
        a->from_nodes = 1;
        a->n = (int)json_array_size(items);
        if (a->n && (!(a->names = calloc((size_t)a->n, sizeof *a->names)) ||
                     !(a->nodes = calloc((size_t)a->n, sizeof *a->nodes)))) {
            rc = gs_errf(e, GS_ENOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < a->n; i++) {
            const json_t *n = json_array_get(items, (size_t)i);
            const json_t *nm = json_object_get(json_object_get(n, "metadata"), "name");
            if (!json_is_object(n) || !json_is_string(nm) ||
                !name_ok(json_string_value(nm), json_string_length(nm))) {
                rc = gs_errf(e, GS_EINVAL, "Nodes.items[%d].metadata.name: missing or not a node "
                                           "name", i);
                goto fail;
            }
            a->names[i] = json_string_value(nm);
            a->nodes[i] = n;
        }
        return 0;
    }
    rc = gs_errf(e, GS_EINVAL, "NodeNames and Nodes: both missing or null");
fail:
    ext_args_clear(a);
    return rc;
}

void ext_args_clear(struct ext_args *a)
{
    if (a->list)
        ext_namelist_put(a->list);
    else
        free(a->names);
    free(a->nodes);
    free(a->arena);
    json_decref(a->pod_doc);
    json_decref(a->nodes_doc);
    memset(a, 0, sizeof *a);
}

static int req_str(const json_t *doc, const char *key, const char **out, struct gs_err *e)
{
    const json_t *v = ext_iget(doc, key);
    if (!v || json_is_null(v))
        return gs_errf(e, GS_EINVAL, "%s: missing", key);
    if (!json_is_string(v) || !*json_string_value(v))
        return gs_errf(e, GS_EINVAL, "%s: not a non-empty string", key);
    if (json_string_length(v) > 253)
        return gs_errf(e, GS_EINVAL, "%s: longer than 253 characters", key);
    *out = json_string_value(v);
    return 0;
}

int ext_bind_parse(const char *body, size_t len, struct ext_bind *b, struct gs_err *e)
{
    int rc;
    memset(b, 0, sizeof *b);
    if ((rc = load(body, len, &b->doc, e)) < 0)
        return rc;
    if ((rc = req_str(b->doc, "PodName", &b->pod_name, e)) < 0 ||
        (rc = req_str(b->doc, "PodNamespace", &b->pod_namespace, e)) < 0 ||
        (rc = req_str(b->doc, "PodUID", &b->pod_uid, e)) < 0 ||
        (rc = req_str(b->doc, "Node", &b->node, e)) < 0) {
        ext_bind_clear(b);
        return rc;
    }
    return 0;
}

void ext_bind_clear(struct ext_bind *b)
{
    json_decref(b->doc);
    memset(b, 0, sizeof *b);
}

/* One victims entry: {"Pods": [{"UID": ...} or full pods], "NumPDBViolations": n}. */
static int parse_victims(const char *node, const json_t *v, int meta, struct ext_victims *out,
                         struct gs_err *e)
{
    const json_t *pods = ext_iget(v, "Pods"), *pdb = ext_iget(v, "NumPDBViolations");
    out->node = node;
    if (!json_is_object(v))
        return gs_errf(e, GS_EINVAL, "victims of node %s: not an object", node);
    if (pods && !json_is_null(pods) && !json_is_array(pods))
        return gs_errf(e, GS_EINVAL, "victims of node %s: Pods is not an array", node);
    if (pdb && !json_is_null(pdb) && !json_is_integer(pdb))
        return gs_errf(e, GS_EINVAL, "victims of node %s: NumPDBViolations is not an integer",
                       node);
    out->pdb_violations = json_is_integer(pdb) ? (long)json_integer_value(pdb) : 0;
    out->n = (int)json_array_size(pods);
    if (out->n && !(out->uids = calloc((size_t)out->n, sizeof *out->uids)))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    for (int i = 0; i < out->n; i++) {
        const json_t *p = json_array_get(pods, (size_t)i);
        const json_t *uid = meta ? ext_iget(p, "UID")
                                 : json_object_get(json_object_get(p, "metadata"), "uid");
        if (!json_is_string(uid) || !*json_string_value(uid))
            return gs_errf(e, GS_EINVAL, "victims of node %s: Pods[%d]: %s missing", node, i,
                           meta ? "UID" : "metadata.uid");
        out->uids[i] = json_string_value(uid);
    }
    return 0;
}

int ext_preempt_parse(const char *body, size_t len, struct ext_preempt *p, struct gs_err *e)
{
    const json_t *map, *v;
    const char *k;
    int rc, meta = 1;

    memset(p, 0, sizeof *p);
    if ((rc = load(body, len, &p->doc, e)) < 0)
        return rc;
    if ((rc = get_pod(p->doc, &p->pod, e)) < 0)
        goto fail;
    map = ext_iget(p->doc, "NodeNameToMetaVictims");
    if (!map || json_is_null(map)) {
        map = ext_iget(p->doc, "NodeNameToVictims");
        meta = 0;
    }
    if (!map || json_is_null(map)) {
        rc = gs_errf(e, GS_EINVAL, "NodeNameToMetaVictims and NodeNameToVictims: both missing");
        goto fail;
    }
    if (!json_is_object(map)) {
        rc = gs_errf(e, GS_EINVAL, "%s: not an object",
                     meta ? "NodeNameToMetaVictims" : "NodeNameToVictims");
        goto fail;
    }
    if (json_object_size(map) &&
        !(p->nodes = calloc(json_object_size(map), sizeof *p->nodes))) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto fail;
    }
    json_object_foreach((json_t *)map, k, v)
    {
        if ((rc = parse_victims(k, v, meta, &p->nodes[p->n++], e)) < 0)
            goto fail;
    }
    return 0;
fail:
    ext_preempt_clear(p);
    return rc;
}

void ext_preempt_clear(struct ext_preempt *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->nodes[i].uids);
    free(p->nodes);
    json_decref(p->doc);
    memset(p, 0, sizeof *p);
}
