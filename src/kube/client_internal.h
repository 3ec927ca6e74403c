/*
 * kube/client_internal.h - what kube/watch.c and kube/lease.c need from the
 * client beyond its public API: pooled curl handles already set up for TLS,
 * and request headers with the current bearer token. Not for other modules.
 */
#ifndef GPUSCHED_KUBE_CLIENT_INTERNAL_H
#define GPUSCHED_KUBE_CLIENT_INTERNAL_H

#include <curl/curl.h>

#include "kube/client.h"

CURL *kube_client_handle(struct kube_client *c);
void kube_client_release(struct kube_client *c, CURL *h);
struct curl_slist *kube_client_headers(struct kube_client *c, const char *content_type);
/* The token's generation (bumped when a read of the token file brings
 * another), and, for a request sent with generation gen that got 401, a
 * read of the token file at the next request (kube/watch.c). */
unsigned long kube_client_token_gen(struct kube_client *c);
void kube_client_token_refused(struct kube_client *c, unsigned long gen);
const char *kube_client_server(const struct kube_client *c);
long kube_client_timeout_ms(const struct kube_client *c);
/* Fills *e for a non-2xx status, with the Status message from `reply`. */
int kube_status_error(long status, const char *method, const char *path, const json_t *reply,
                      struct gs_err *e);

#endif
