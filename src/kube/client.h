/*
 * kube/client.h - a small Kubernetes API client on libcurl.
 *
 * Every gpusched service that talks to the API server (extender, device
 * plugin, webhook, status) uses this one client: configuration from a
 * kubeconfig file or from the in-cluster service account, and JSON requests
 * (GET, LIST, POST, PUT, PATCH in its three flavours, DELETE). Watches are in
 * kube/watch.h, leader election in kube/lease.h.
 *
 * TLS verification is on unless the kubeconfig says
 * insecure-skip-tls-verify: true. Service-account tokens rotate, so a token
 * read from a file is re-read every minute.
 *
 * Threads: a client may be shared by any number of threads; each request
 * takes an idle connection from a small pool (or opens one).
 *
 * Errors: functions return 0 on a 2xx answer, else a negative code:
 * -GS_ENOENT (404), -GS_ECONFLICT (409, 410), -GS_EUNAVAIL (connection
 * failures, 429, 5xx), -GS_EINVAL (other 4xx; a 401 after the token
 * file was read again), -GS_EPROTO (reply is not
 * JSON), with e->msg carrying the verb, path, status and the API server's
 * own message. The HTTP status is also returned where asked for.
 *
 * Ownership: kube_config_* fill a struct freed by kube_config_clear();
 * kube_client_new() copies what it needs from the config. Returned json_t
 * objects belong to the caller (json_decref).
 */
#ifndef GPUSCHED_KUBE_CLIENT_H
#define GPUSCHED_KUBE_CLIENT_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct kube_config {
    char *server;      /* "https://10.0.0.1:6443", no trailing slash */
    char *token;       /* bearer token, or NULL */
    char *token_file;  /* re-read periodically when set */
    char *ca_file;     /* PEM file, or NULL */
    char *ca_data;     /* PEM bytes (decoded certificate-authority-data) */
    size_t ca_len;
    char *cert_file, *key_file; /* client certificate, PEM files */
    char *cert_data, *key_data; /* ... or PEM bytes */
    size_t cert_len, key_len;
    int insecure;      /* insecure-skip-tls-verify */
    char *namespace;   /* the context's / service account's namespace */
};

/* Reads a kubeconfig file; `context` NULL = current-context. Relative file
 * paths in it are taken relative to the file's directory. */
int kube_config_load_file(const char *path, const char *context, struct kube_config *cfg,
                          struct gs_err *e);
/* In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account files in
 * sa_dir (NULL = KUBE_SA_DIR). */
int kube_config_in_cluster(const char *sa_dir, struct kube_config *cfg, struct gs_err *e);
void kube_config_clear(struct kube_config *cfg);

enum kube_patch {
    KUBE_PATCH_MERGE,     /* application/merge-patch+json */
    KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json */
    KUBE_PATCH_JSON,      /* application/json-patch+json (an array of ops) */
};

struct kube_client;

struct kube_client_opts {
    long timeout_ms;         /* per request; 0 = 10 s */
    size_t max_response;     /* bytes; 0 = 512 MiB */
    const char *user_agent;  /* NULL = "gpusched" */
};

int kube_client_new(const struct kube_config *cfg, const struct kube_client_opts *opts,
                    struct kube_client **out, struct gs_err *e);
void kube_client_free(struct kube_client *c);
/* The namespace from the config ("default" when it named none). */
const char *kube_client_namespace(const struct kube_client *c);

/* One request. `path` starts with "/" and may carry a query string; `body`
 * may be NULL. On return *out (if non-NULL) holds the parsed reply, also for
 * error statuses when the server sent JSON (a Status object), and *status
 * (if non-NULL) the HTTP status, 0 when no answer came. */
int kube_request(struct kube_client *c, const char *method, const char *path,
                 const char *content_type, const json_t *body, json_t **out, long *status,
                 struct gs_err *e);

int kube_get(struct kube_client *c, const char *path, json_t **out, struct gs_err *e);
int kube_create(struct kube_client *c, const char *path, const json_t *obj, json_t **out,
                struct gs_err *e);
int kube_replace(struct kube_client *c, const char *path, const json_t *obj, json_t **out,
                 struct gs_err *e);
int kube_patch(struct kube_client *c, const char *path, enum kube_patch type,
               const json_t *patch, json_t **out, struct gs_err *e);
int kube_delete(struct kube_client *c, const char *path, struct gs_err *e);

/* Percent-encodes a query value ("app=x,tier in (a)") into buf. Returns 0,
 * or -GS_ETOOBIG when it does not fit. */
int kube_escape(const char *s, char *buf, size_t cap, struct gs_err *e);

/* Posts a core/v1 Event about an object (`kind`, ns, name, uid) with
 * `type` "Normal" or "Warning", a CamelCase reason and a message (cut to
 * 1 KiB). The source component is "gpusched". */
int kube_event(struct kube_client *c, const char *kind, const char *ns, const char *name,
               const char *uid, const char *type, const char *reason, const char *message,
               struct gs_err *e);

/* "2026-11-22T15:20:01.123456Z" (RFC 3339 with microseconds, UTC) for now;
 * buf needs 32 bytes. */
void kube_now_micro(char *buf, size_t cap);
/* Parses RFC 3339 ("...Z" or with an offset, optional fraction) into
 * seconds since the epoch. */
int kube_parse_time(const char *s, double *out);

/* Case-sensitive helpers over Kubernetes objects: metadata fields as
 * borrowed strings, NULL when absent or not a string. */
const char *kube_meta_str(const json_t *obj, const char *field);
const char *kube_annotation(const json_t *obj, const char *key);
const char *kube_label(const json_t *obj, const char *key);

/* 1 when none of the pod's containers will run again: phase Succeeded or
 * Failed, or deleted (deletionTimestamp) with every container reported
 * terminated and no init container (a sidecar) running. kubelet counts the
 * latter as terminated too (1.20's
 * podIsTerminated) and hands its devices to the next pod while it removes
 * the pod's volumes and object, which takes seconds (more with volumes). */
int kube_pod_done(const json_t *pod);

#endif
