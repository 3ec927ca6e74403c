/*
 * wh/wh_review.h - AdmissionReview v1 in, AdmissionReview v1 out.
 *
 * The API server posts an AdmissionReview (admission.k8s.io/v1) whose
 * `request` carries a uid, the object's kind, the operation and the object;
 * it expects the same envelope back with `response.uid` echoed, `allowed`,
 * a `status` with the reason when denied, and for mutations a base64
 * JSONPatch. Anything else (another kind, another API version, a missing
 * uid or object) is a clear error, never a guess.
 *
 * Ownership: wh_review_parse() fills a struct that owns the parsed body;
 * its pointers are valid until wh_review_clear(). wh_review_response()
 * returns a new reference.
 */
#ifndef GPUSCHED_WH_REVIEW_H
#define GPUSCHED_WH_REVIEW_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

#define WH_REVIEW_API "admission.k8s.io/v1"

struct wh_review {
    json_t *root;          /* the whole body (owned) */
    const char *uid;       /* request.uid */
    const char *operation; /* CREATE, UPDATE, DELETE, CONNECT */
    const char *group;     /* request.kind.group ("" for core) */
    const char *kind;      /* request.kind.kind ("Pod") */
    const char *ns;        /* request.namespace, "" when absent */
    const char *name;      /* request.name, "" when absent */
    json_t *object;        /* request.object; NULL for DELETE */
    json_t *old_object;    /* request.oldObject (UPDATE, DELETE), or NULL */
    const char *user;      /* request.userInfo.username, "" when absent */
};

/* Parses and checks a body of `len` bytes. Errors name the field. */
int wh_review_parse(const char *body, size_t len, struct wh_review *r, struct gs_err *e);
void wh_review_clear(struct wh_review *r);

/* The answer to `r`: allowed or denied (with `code`, e.g. 403, and `msg`),
 * with an optional JSONPatch array (not stolen) for mutations and an
 * optional warning (NULL or "": none), which kubectl prints as
 * "Warning: ..." (response.warnings, Kubernetes 1.19+). */
json_t *wh_review_response(const struct wh_review *r, int allowed, int code, const char *msg,
                           const json_t *patch, const char *warning);

#endif
