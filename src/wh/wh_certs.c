/* wh/wh_certs.c - see wh_certs.h. */
#include <arpa/inet.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wh/wh_certs.h"

char *wh_base64(const void *data, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char *out = malloc(4 * ((len + 2) / 3) + 1), *o = out;
    size_t i;

    if (!out)
        return NULL;
    for (i = 0; i + 2 < len; i += 3) {
        *o++ = tab[p[i] >> 2];
        *o++ = tab[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
        *o++ = tab[((p[i + 1] & 15) << 2) | (p[i + 2] >> 6)];
        *o++ = tab[p[i + 2] & 63];
    }
    if (i < len) {
        *o++ = tab[p[i] >> 2];
        if (i + 1 < len) {
            *o++ = tab[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
            *o++ = tab[(p[i + 1] & 15) << 2];
        } else {
            *o++ = tab[(p[i] & 3) << 4];
            *o++ = '=';
        }
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

#define TRY(call, what)                                                        \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ < 0) {                                                         \
            gs_errf(e, GS_EIO, "%s: %s", what, gnutls_strerror(rc_));          \
            goto out;                                                          \
        }                                                                      \
    } while (0)

static char *export_pem(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key)
{
    gnutls_datum_t d = {NULL, 0};
    char *s;
    if ((crt ? gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d)
             : gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &d)) < 0)
        return NULL;
    s = malloc(d.size + 1);
    if (s) {
        memcpy(s, d.data, d.size);
        s[d.size] = '\0';
    }
    gnutls_free(d.data);
    return s;
}

/* Version, serial, validity and subject common to both certificates. */
static int cert_base(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, const char *cn, int days,
                     struct gs_err *e)
{
    unsigned char serial[16];
    time_t now = time(NULL);
    int ok = -1;

    TRY(gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof serial), "random serial");
    serial[0] &= 0x7f; /* positive */
    TRY(gnutls_x509_crt_set_version(crt, 3), "certificate version");
    TRY(gnutls_x509_crt_set_serial(crt, serial, sizeof serial), "certificate serial");
    TRY(gnutls_x509_crt_set_activation_time(crt, now - 300), "activation time");
    TRY(gnutls_x509_crt_set_expiration_time(crt, now + (time_t)days * 86400), "expiration time");
    TRY(gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn, strlen(cn)),
        "subject");
    TRY(gnutls_x509_crt_set_key(crt, key), "public key");
    ok = 0;
out:
    return ok;
}

/* Imports the existing CA of o into ca / ca_key: both parse, the
 * certificate may sign certificates, the key is its own, and it is valid
 * now. -1 with *e naming what is wrong. */
static int load_ca(const struct wh_certs_opts *o, gnutls_x509_crt_t ca,
                   gnutls_x509_privkey_t ca_key, struct gs_err *e)
{
    gnutls_datum_t c = {(unsigned char *)o->ca_crt, (unsigned)strlen(o->ca_crt)};
    gnutls_datum_t k = {(unsigned char *)o->ca_key, (unsigned)strlen(o->ca_key)};
    unsigned char a[64], b[64];
    size_t an = sizeof a, bn = sizeof b;
    unsigned critical;
    int rc;
    time_t now = time(NULL);
    if ((rc = gnutls_x509_crt_import(ca, &c, GNUTLS_X509_FMT_PEM)) < 0)
        return gs_errf(e, GS_EINVAL, "ca.crt: not a PEM certificate (%s)", gnutls_strerror(rc));
    if ((rc = gnutls_x509_privkey_import(ca_key, &k, GNUTLS_X509_FMT_PEM)) < 0)
        return gs_errf(e, GS_EINVAL, "ca.key: not a PEM private key (%s)", gnutls_strerror(rc));
    if (gnutls_x509_crt_get_basic_constraints(ca, &critical, NULL, NULL) != 1)
        return gs_errf(e, GS_EINVAL, "ca.crt: not a CA certificate (basic constraints)");
    if (gnutls_x509_crt_get_key_id(ca, 0, a, &an) < 0 ||
        gnutls_x509_privkey_get_key_id(ca_key, 0, b, &bn) < 0 || an != bn || memcmp(a, b, an))
        return gs_errf(e, GS_EINVAL, "ca.key is not the key of ca.crt");
    if (gnutls_x509_crt_get_expiration_time(ca) <= now + 86400)
        return gs_errf(e, GS_EINVAL, "ca.crt expires within a day: make a new CA");
    return 0;
}

int wh_certs_generate(const struct wh_certs_opts *o, struct wh_certs *out, struct gs_err *e)
{
    gnutls_x509_privkey_t ca_key = NULL, key = NULL;
    gnutls_x509_crt_t ca = NULL, crt = NULL;
    unsigned char kid[64];
    size_t kid_len = sizeof kid;
    char name[4][600], cn[600];
    int rc = -GS_EIO;

    memset(out, 0, sizeof *out);
    if (!o->service || !o->service[0] || !o->ns || !o->ns[0] || strlen(o->service) > 253 ||
        strlen(o->ns) > 253)
        return gs_errf(e, GS_EINVAL, "service and namespace names must be 1..253 characters");
    if (o->days < 1 || o->days > 3650)
        return gs_errf(e, GS_EINVAL, "--days: %d is out of range 1..3650", o->days);
    if (o->n_dns > WH_CERTS_MAX_NAMES || o->n_ips > WH_CERTS_MAX_NAMES)
        return gs_errf(e, GS_EINVAL, "at most %d extra DNS names and IPs", WH_CERTS_MAX_NAMES);

    if ((o->ca_crt == NULL) != (o->ca_key == NULL))
        return gs_errf(e, GS_EINVAL, "an existing CA needs both its certificate and its key");
    TRY(gnutls_x509_privkey_init(&ca_key), "CA key");
    TRY(gnutls_x509_crt_init(&ca), "CA certificate");
    if (o->ca_crt) {
        if (load_ca(o, ca, ca_key, e) < 0) {
            rc = -GS_EINVAL;
            goto out;
        }
    } else {
        TRY(gnutls_x509_privkey_generate(ca_key, GNUTLS_PK_ECDSA,
                                         GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0),
            "CA key");
        snprintf(cn, sizeof cn, "%s-ca", o->service);
        if (cert_base(ca, ca_key, cn, o->days, e) < 0)
            goto out;
        TRY(gnutls_x509_crt_set_basic_constraints(ca, 1, 0), "CA constraints");
        TRY(gnutls_x509_crt_set_key_usage(ca, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN |
                                                  GNUTLS_KEY_DIGITAL_SIGNATURE),
            "CA key usage");
        TRY(gnutls_x509_crt_get_key_id(ca, 0, kid, &kid_len), "CA key id");
        TRY(gnutls_x509_crt_set_subject_key_id(ca, kid, kid_len), "CA key id");
        TRY(gnutls_x509_crt_sign2(ca, ca, ca_key, GNUTLS_DIG_SHA256, 0), "signing the CA");
    }
    kid_len = sizeof kid;
    TRY(gnutls_x509_crt_get_key_id(ca, 0, kid, &kid_len), "CA key id");

    TRY(gnutls_x509_privkey_init(&key), "serving key");
    TRY(gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                     GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0),
        "serving key");
    TRY(gnutls_x509_crt_init(&crt), "serving certificate");
    snprintf(name[0], sizeof name[0], "%s", o->service);
    snprintf(name[1], sizeof name[1], "%s.%s", o->service, o->ns);
    snprintf(name[2], sizeof name[2], "%s.%s.svc", o->service, o->ns);
    snprintf(name[3], sizeof name[3], "%s.%s.svc.cluster.local", o->service, o->ns);
    if (cert_base(crt, key, name[2], o->days, e) < 0)
        goto out;
    /* a certificate is no use past its CA's end */
    time_t ca_end = gnutls_x509_crt_get_expiration_time(ca), end = time(NULL) +
                                                                  (time_t)o->days * 86400;
    if (ca_end != (time_t)-1 && ca_end < end)
        TRY(gnutls_x509_crt_set_expiration_time(crt, end = ca_end), "expiration time");
    out->days = (int)((end - time(NULL) + 43200) / 86400);
    for (int i = 0; i < 4; i++)
        TRY(gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, name[i],
                                                 (unsigned)strlen(name[i]), GNUTLS_FSAN_APPEND),
            "DNS names");
    for (int i = 0; i < o->n_dns; i++)
        TRY(gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, o->dns[i],
                                                 (unsigned)strlen(o->dns[i]), GNUTLS_FSAN_APPEND),
            "DNS names");
    for (int i = 0; i < o->n_ips; i++) {
        unsigned char ip[16];
        unsigned len = 4;
        if (inet_pton(AF_INET, o->ips[i], ip) != 1) {
            len = 16;
            if (inet_pton(AF_INET6, o->ips[i], ip) != 1) {
                rc = gs_errf(e, GS_EINVAL, "--ip: '%s' is not an IP address", o->ips[i]);
                goto out;
            }
        }
        TRY(gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, ip, len,
                                                 GNUTLS_FSAN_APPEND),
            "IP addresses");
    }
    TRY(gnutls_x509_crt_set_basic_constraints(crt, 0, -1), "constraints");
    TRY(gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE |
                                               GNUTLS_KEY_KEY_ENCIPHERMENT),
        "key usage");
    TRY(gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0), "key purpose");
    TRY(gnutls_x509_crt_set_authority_key_id(crt, kid, kid_len), "authority key id");
    TRY(gnutls_x509_crt_sign2(crt, ca, ca_key, GNUTLS_DIG_SHA256, 0), "signing the certificate");

    out->ca_crt = export_pem(ca, NULL);
    out->ca_key = export_pem(NULL, ca_key);
    out->tls_crt = export_pem(crt, NULL);
    out->tls_key = export_pem(NULL, key);
    out->ca_bundle = out->ca_crt ? wh_base64(out->ca_crt, strlen(out->ca_crt)) : NULL;
    if (!out->ca_crt || !out->ca_key || !out->tls_crt || !out->tls_key || !out->ca_bundle) {
        wh_certs_free(out);
        rc = gs_errf(e, GS_ENOMEM, "cannot export the certificates");
        goto out;
    }
    rc = 0;
out:
    if (ca)
        gnutls_x509_crt_deinit(ca);
    if (crt)
        gnutls_x509_crt_deinit(crt);
    if (ca_key)
        gnutls_x509_privkey_deinit(ca_key);
    if (key)
        gnutls_x509_privkey_deinit(key);
    return rc;
}

void wh_certs_free(struct wh_certs *c)
{
    free(c->ca_crt);
    free(c->ca_key);
    free(c->tls_crt);
    free(c->tls_key);
    free(c->ca_bundle);
    memset(c, 0, sizeof *c);
}
