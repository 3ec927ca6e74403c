/* kube/config.c - kubeconfig and in-cluster configuration (see client.h). */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/yaml.h"
#include "util/buf.h"

void kube_config_clear(struct kube_config *cfg)
{
    free(cfg->server);
    free(cfg->token);
    free(cfg->token_file);
    free(cfg->ca_file);
    free(cfg->ca_data);
    free(cfg->cert_file);
    free(cfg->key_file);
    free(cfg->cert_data);
    free(cfg->key_data);
    free(cfg->namespace);
    memset(cfg, 0, sizeof *cfg);
}

static int b64val(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decodes standard base64 (whitespace ignored, '=' padding optional). */
static int b64_decode(const char *in, char **out, size_t *outlen, const char *field,
                      struct gs_err *e)
{
    size_t n = strlen(in), o = 0;
    unsigned acc = 0;
    int bits = 0;
    char *buf = malloc(n / 4 * 3 + 4);

    if (!buf)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    for (const char *p = in; *p; p++) {
        if (*p == '=' || *p == '\n' || *p == '\r' || *p == ' ' || *p == '\t')
            continue;
        int v = b64val((unsigned char)*p);
        if (v < 0) {
            free(buf);
            return gs_errf(e, GS_EINVAL, "%s: not base64 (character '%c')", field, *p);
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    buf[o] = '\0';
    *out = buf;
    *outlen = o;
    return 0;
}

static const char *str_at(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Finds the entry named `name` in a kubeconfig list (clusters, users,
 * contexts) and returns its inner object (entry[field]). */
static const json_t *named(const json_t *doc, const char *list, const char *name,
                           const char *field)
{
    const json_t *arr = json_object_get(doc, list), *it;
    size_t i;
    json_array_foreach(arr, i, it)
    {
        const char *n = str_at(it, "name");
        if (n && strcmp(n, name) == 0)
            return json_object_get(it, field);
    }
    return NULL;
}

/* Duplicates a path, resolving it against dir when relative. */
static char *resolve(const char *dir, const char *p)
{
    char *out;
    if (p[0] == '/')
        return strdup(p);
    if (asprintf(&out, "%s/%s", dir, p) < 0)
        return NULL;
    return out;
}

int kube_config_load_file(const char *path, const char *context, struct kube_config *cfg,
                          struct gs_err *e)
{
    json_t *doc;
    const json_t *ctx, *cl, *us;
    const char *v;
    char *pathcopy, *dir;
    int rc;

    memset(cfg, 0, sizeof *cfg);
    if ((rc = kube_yaml_load(path, &doc, e)) < 0)
        return rc;
    if (!json_is_object(doc)) {
        json_decref(doc);
        return gs_errf(e, GS_EINVAL, "%s: not a kubeconfig (top level is not a mapping)", path);
    }
    if (!context)
        context = str_at(doc, "current-context");
    if (!context || !*context) {
        json_decref(doc);
        return gs_errf(e, GS_EINVAL, "%s: no current-context", path);
    }
    if (!(ctx = named(doc, "contexts", context, "context"))) {
        rc = gs_errf(e, GS_EINVAL, "%s: context '%s' not found", path, context);
        json_decref(doc);
        return rc;
    }
    const char *clname = str_at(ctx, "cluster"), *usname = str_at(ctx, "user");
    if (!clname || !(cl = named(doc, "clusters", clname, "cluster"))) {
        rc = gs_errf(e, GS_EINVAL, "%s: context '%s': cluster '%s' not found", path, context,
                     clname ? clname : "");
        json_decref(doc);
        return rc;
    }
    us = usname ? named(doc, "users", usname, "user") : NULL;
    if (usname && *usname && !us) {
        rc = gs_errf(e, GS_EINVAL, "%s: context '%s': user '%s' not found", path, context,
                     usname);
        json_decref(doc);
        return rc;
    }
    /* credentials we cannot use would send every request anonymous: say so */
    static const char *const creds[] = {"token", "tokenFile", "client-certificate",
                                        "client-key", "client-certificate-data",
                                        "client-key-data"};
    static const char *const unsupported[] = {"exec", "auth-provider", "username", "password"};
    for (size_t i = 0; us && i < sizeof creds / sizeof creds[0]; i++)
        if (json_object_get(us, creds[i]) && !json_is_string(json_object_get(us, creds[i]))) {
            rc = gs_errf(e, GS_EINVAL, "%s: user '%s': %s must be a string (quote it)", path,
                         usname, creds[i]);
            json_decref(doc);
            return rc;
        }
    for (size_t i = 0; us && i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (json_object_get(us, unsupported[i]) && !str_at(us, "token") &&
            !str_at(us, "tokenFile") && !str_at(us, "client-certificate") &&
            !str_at(us, "client-certificate-data")) {
            rc = gs_errf(e, GS_EINVAL, "%s: user '%s': %s credentials are not supported; "
                         "give it a token, tokenFile or client certificate (a service "
                         "account's: kubectl create token NAME)", path, usname, unsupported[i]);
            json_decref(doc);
            return rc;
        }
    if (!(v = str_at(cl, "server")) || (strncmp(v, "https://", 8) && strncmp(v, "http://", 7))) {
        rc = gs_errf(e, GS_EINVAL, "%s: cluster '%s': server must be an http(s) URL", path, clname);
        json_decref(doc);
        return rc;
    }
    if (!(pathcopy = strdup(path))) {
        json_decref(doc);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    dir = dirname(pathcopy);
    cfg->server = strdup(v);
    if (cfg->server[strlen(cfg->server) - 1] == '/')
        cfg->server[strlen(cfg->server) - 1] = '\0';
    cfg->insecure = json_is_true(json_object_get(cl, "insecure-skip-tls-verify"));
    if ((v = str_at(cl, "certificate-authority")))
        cfg->ca_file = resolve(dir, v);
    if ((v = str_at(cl, "certificate-authority-data")) &&
        (rc = b64_decode(v, &cfg->ca_data, &cfg->ca_len, "certificate-authority-data", e)) < 0)
        goto fail;
    if (us) {
        if ((v = str_at(us, "token")))
            cfg->token = strdup(v);
        if ((v = str_at(us, "tokenFile")))
            cfg->token_file = resolve(dir, v);
        if ((v = str_at(us, "client-certificate")))
            cfg->cert_file = resolve(dir, v);
        if ((v = str_at(us, "client-key")))
            cfg->key_file = resolve(dir, v);
        if ((v = str_at(us, "client-certificate-data")) &&
            (rc = b64_decode(v, &cfg->cert_data, &cfg->cert_len, "client-certificate-data", e)) < 0)
            goto fail;
        if ((v = str_at(us, "client-key-data")) &&
            (rc = b64_decode(v, &cfg->key_data, &cfg->key_len, "client-key-data", e)) < 0)
            goto fail;
    }
    v = str_at(ctx, "namespace");
    cfg->namespace = strdup(v && *v ? v : "default");
    free(pathcopy);
    json_decref(doc);
    return 0;
fail:
    gs_err_prefix(e, "%s: context '%s'", path, context);
    free(pathcopy);
    json_decref(doc);
    kube_config_clear(cfg);
    return rc;
}

/* The file's text without trailing blanks; NULL (and *e) when it cannot be
 * read, is larger than max or is empty. */
static char *slurp_small(const char *path, size_t max, struct gs_err *e)
{
    struct gs_buf b = {0};
    if (gs_buf_read_file(&b, path, max, e) < 0 || !b.buf) {
        if (!b.buf)
            gs_errf(e, GS_EIO, "%s: empty", path);
        gs_buf_free(&b);
        return NULL;
    }
    while (b.len && (b.buf[b.len - 1] == '\n' || b.buf[b.len - 1] == '\r' || b.buf[b.len - 1] == ' '))
        b.buf[--b.len] = '\0';
    return b.buf;
}

int kube_config_in_cluster(const char *sa_dir, struct kube_config *cfg, struct gs_err *e)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    char path[4096];

    memset(cfg, 0, sizeof *cfg);
    if (!sa_dir)
        sa_dir = KUBE_SA_DIR;
    if (!host || !*host || !port || !*port)
        return gs_errf(e, GS_EINVAL,
                       "not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set");
    if (strchr(host, ':'))
        (void)!asprintf(&cfg->server, "https://[%s]:%s", host, port);
    else
        (void)!asprintf(&cfg->server, "https://%s:%s", host, port);
    snprintf(path, sizeof path, "%s/token", sa_dir);
    cfg->token_file = strdup(path);
    if (!(cfg->token = slurp_small(path, 64 << 10, e))) {
        kube_config_clear(cfg);
        return -GS_EIO;
    }
    snprintf(path, sizeof path, "%s/ca.crt", sa_dir);
    cfg->ca_file = strdup(path);
    snprintf(path, sizeof path, "%s/namespace", sa_dir);
    cfg->namespace = slurp_small(path, 1024, NULL);
    if (!cfg->namespace)
        cfg->namespace = strdup("default");
    return 0;
}
