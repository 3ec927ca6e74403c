/*
 * wh/wh_certs.h - a CA and a serving certificate for the admission webhook.
 *
 * The API server only calls webhooks over TLS and checks the serving
 * certificate against the caBundle of the webhook configuration. This
 * module makes that pair without openssl on the path: an ECDSA P-256 CA,
 * and a serving certificate signed by it for the Service's DNS names
 * (NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local) plus any extra
 * names and IP addresses. `gpusched webhook gen-certs` writes them out.
 * Given an existing CA (its certificate and key), it signs a new serving
 * pair with it instead, valid at most as long as the CA: a rotation that
 * keeps every caBundle (and every extender replica's tls_ca) valid.
 *
 * Ownership: wh_certs_generate() fills a struct whose strings (PEM text,
 * NUL-terminated, malloc'd) are freed by wh_certs_free().
 */
#ifndef GPUSCHED_WH_CERTS_H
#define GPUSCHED_WH_CERTS_H

#include "util/err.h"

#define WH_CERTS_MAX_NAMES 16

struct wh_certs_opts {
    const char *service;           /* "gpusched-webhook" */
    const char *ns;                /* "gpusched" */
    int n_dns;                     /* extra DNS names */
    const char *dns[WH_CERTS_MAX_NAMES];
    int n_ips;                     /* IP addresses ("127.0.0.1", "::1") */
    const char *ips[WH_CERTS_MAX_NAMES];
    int days;                      /* validity, 1..3650 */
    const char *ca_crt, *ca_key;   /* PEM of an existing CA to sign with, or NULL: a new CA */
};

struct wh_certs {
    char *ca_crt, *ca_key;   /* the CA (keep the key to re-issue, or drop it) */
    char *tls_crt, *tls_key; /* the webhook's serving pair */
    char *ca_bundle;         /* base64 of ca_crt: the caBundle field */
    int days;                /* the serving certificate's validity (cut to the CA's) */
};

int wh_certs_generate(const struct wh_certs_opts *o, struct wh_certs *out, struct gs_err *e);
void wh_certs_free(struct wh_certs *c);

/* Standard base64 without line breaks; returns a malloc'd string or NULL. */
char *wh_base64(const void *data, size_t len);

#endif
