/* wh/wh_review.c - see wh_review.h. */
#include <stdlib.h>
#include <string.h>

#include "wh/wh_certs.h"
#include "wh/wh_review.h"

static const char *opt_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int wh_review_parse(const char *body, size_t len, struct wh_review *r, struct gs_err *e)
{
    json_error_t je;
    json_t *req, *kind, *v;
    const char *av, *k;

    memset(r, 0, sizeof *r);
    if (len == 0)
        return gs_errf(e, GS_EINVAL, "empty body: expected an AdmissionReview");
    r->root = json_loadb(body, len, JSON_ALLOW_NUL, &je);
    if (!r->root)
        return gs_errf(e, GS_EINVAL, "body is not JSON (line %d: %s)", je.line, je.text);
    if (!json_is_object(r->root)) {
        gs_errf(e, GS_EINVAL, "body: expected an AdmissionReview object");
        goto fail;
    }
    k = opt_str(r->root, "kind");
    av = opt_str(r->root, "apiVersion");
    if (!k || strcmp(k, "AdmissionReview") != 0) {
        gs_errf(e, GS_EINVAL, "kind: '%.64s' is not AdmissionReview", k ? k : "");
        goto fail;
    }
    if (!av || strcmp(av, WH_REVIEW_API) != 0) {
        gs_errf(e, GS_EINVAL, "apiVersion: '%.64s' is not supported; configure "
                              "admissionReviewVersions: [\"v1\"]", av ? av : "");
        goto fail;
    }
    req = json_object_get(r->root, "request");
    if (!json_is_object(req)) {
        gs_errf(e, GS_EINVAL, "request: missing");
        goto fail;
    }
    r->uid = opt_str(req, "uid");
    if (!r->uid || !r->uid[0] || strlen(r->uid) > 128) {
        gs_errf(e, GS_EINVAL, "request.uid: missing or longer than 128 characters");
        goto fail;
    }
    kind = json_object_get(req, "kind");
    r->kind = opt_str(kind, "kind");
    r->group = opt_str(kind, "group");
    if (!r->kind || !r->kind[0]) {
        gs_errf(e, GS_EINVAL, "request.kind.kind: missing");
        goto fail;
    }
    if (!r->group)
        r->group = "";
    r->operation = opt_str(req, "operation");
    if (!r->operation || (strcmp(r->operation, "CREATE") != 0 &&
                          strcmp(r->operation, "UPDATE") != 0 &&
                          strcmp(r->operation, "DELETE") != 0 &&
                          strcmp(r->operation, "CONNECT") != 0)) {
        gs_errf(e, GS_EINVAL, "request.operation: '%.32s' is not CREATE, UPDATE, DELETE or "
                              "CONNECT", r->operation ? r->operation : "");
        goto fail;
    }
    r->ns = opt_str(req, "namespace");
    r->name = opt_str(req, "name");
    if (!r->ns)
        r->ns = "";
    if (!r->name)
        r->name = "";
    v = json_object_get(req, "object");
    if (strcmp(r->operation, "CREATE") == 0 || strcmp(r->operation, "UPDATE") == 0) {
        if (!json_is_object(v)) {
            gs_errf(e, GS_EINVAL, "request.object: missing for %s", r->operation);
            goto fail;
        }
    }
    r->object = json_is_object(v) ? v : NULL;
    v = json_object_get(req, "oldObject");
    r->old_object = json_is_object(v) ? v : NULL;
    r->user = opt_str(json_object_get(req, "userInfo"), "username");
    if (!r->user) /* any length: compared whole, quoted cut short */
        r->user = "";
    if (!r->name[0] && r->object) { /* pods made by controllers have only generateName */
        json_t *meta = json_object_get(r->object, "metadata");
        const char *n = opt_str(meta, "name");
        r->name = n ? n : opt_str(meta, "generateName") ? opt_str(meta, "generateName") : "";
    }
    return 0;
fail:
    wh_review_clear(r);
    return -GS_EINVAL;
}

void wh_review_clear(struct wh_review *r)
{
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

json_t *wh_review_response(const struct wh_review *r, int allowed, int code, const char *msg,
                           const json_t *patch, const char *warning)
{
    json_t *resp = json_pack("{s:s, s:b}", "uid", r->uid, "allowed", allowed);
    if (!resp)
        return NULL;
    if (warning && warning[0])
        json_object_set_new(resp, "warnings", json_pack("[s]", warning));
    if (!allowed || msg)
        json_object_set_new(resp, "status",
                            json_pack("{s:i, s:s, s:s}", "code", code ? code : 403, "message",
                                      msg ? msg : "", "reason", allowed ? "" : code == 403 ? "Forbidden" : "Invalid"));
    if (patch && json_array_size(patch) > 0) {
        char *text = json_dumps(patch, JSON_COMPACT);
        char *b64 = text ? wh_base64(text, strlen(text)) : NULL;
        free(text);
        if (!b64) {
            json_decref(resp);
            return NULL;
        }
        json_object_set_new(resp, "patchType", json_string("JSONPatch"));
        json_object_set_new(resp, "patch", json_string(b64));
        free(b64);
    }
    return json_pack("{s:s, s:s, s:o}", "apiVersion", WH_REVIEW_API, "kind", "AdmissionReview",
                     "response", resp);
}
