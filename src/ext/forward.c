/* ext/forward.c - see forward.h. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ext/forward.h"
#include "http/http_server.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"

#define MAX_REPLY (32 << 20) /* a /filter answer names every node, with reasons */
#define MAX_ID 256
#define DOWN_S 5.0 /* a leader that did not answer is not asked /filter etc. for this long */

struct ext_forward {
    int (*leader)(void *ud, char *out, size_t cap);
    void *ud;
    char self[MAX_ID];
    long timeout_ms;
    struct metric *m_forwarded;
    pthread_mutex_t mu;
    char down[MAX_ID]; /* the leader that last did not answer, until down_until */
    double down_until;
    int tls;           /* ext_forward_tls: HTTPS to a leader serving the key pinned here */
    char pin[256];     /* "sha256//KEY" or "sha256//KEY;sha256//PREVIOUS", under mu */
    char *ca;          /* or to one whose certificate this CA file signed (ext_forward_ca) */
};

int ext_forward_new(int (*leader)(void *ud, char *out, size_t cap), void *ud, const char *self,
                    double timeout_s, struct metrics *m, struct ext_forward **out,
                    struct gs_err *e)
{
    struct ext_forward *f;
    if (!leader || !self || strlen(self) >= MAX_ID)
        return gs_errf(e, GS_EINVAL, "forward: a leader callback and an identity under %d "
                                     "bytes are needed", MAX_ID);
    if (!(f = calloc(1, sizeof *f)))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    f->leader = leader;
    f->ud = ud;
    snprintf(f->self, sizeof f->self, "%s", self);
    f->timeout_ms = timeout_s > 0 ? (long)(timeout_s * 1000) : 9000;
    if (m && !(f->m_forwarded = metrics_add(
                   m, METRIC_COUNTER, "gpusched_extender_forwarded_total",
                   "Requests this replica handed to the leader, by verb and the leader's "
                   "status (0: it did not answer).",
                   "verb,code", NULL, 0, e))) {
        free(f);
        return -GS_EINVAL;
    }
    pthread_mutex_init(&f->mu, NULL);
    *out = f;
    return 0;
}

int ext_forward_tls(struct ext_forward *f, const char *cert_file, struct gs_err *e)
{
    char pin[128], prev[128];
    int rc = http_tls_pin(cert_file, pin, sizeof pin, e);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&f->mu);
    snprintf(prev, sizeof prev, "%.*s", (int)strcspn(f->pin, ";"), f->pin);
    if (f->tls && strcmp(prev, pin) != 0)
        snprintf(f->pin, sizeof f->pin, "%s;%s", pin, prev);
    else
        snprintf(f->pin, sizeof f->pin, "%s", pin);
    f->tls = 1;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

int ext_forward_ca(struct ext_forward *f, const char *ca_file, struct gs_err *e)
{
    FILE *fp = fopen(ca_file, "r");
    if (!fp)
        return gs_errf(e, GS_EIO, "tls_ca '%s': %m", ca_file);
    fclose(fp);
    if (!(f->ca = strdup(ca_file)))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    return 0;
}

void ext_forward_free(struct ext_forward *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->mu);
    free(f->ca);
    free(f);
}

static int port_ok(const char *p)
{
    long v = 0;
    if (!*p || strlen(p) > 5)
        return 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (*p - '0');
    }
    return v >= 1 && v <= 65535;
}

static int host_ok(const char *h, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    if (h[0] == '[') { /* [IPv6] */
        if (n < 3 || h[n - 1] != ']')
            return 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (!strchr("0123456789abcdefABCDEF:.", h[i]))
                return 0;
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-", h[i]))
            return 0;
    return 1;
}

int ext_forward_addr(const char *identity, char *out, size_t cap, struct gs_err *e)
{
    const char *at = strrchr(identity, '@'), *colon;
    if (!at)
        return 1;
    const char *addr = at + 1;
    if (strlen(addr) >= cap || strlen(addr) > 260)
        return gs_errf(e, GS_EINVAL, "leader identity %.80s: address after '@' too long",
                       identity);
    colon = strrchr(addr, ':');
    if (!colon || (addr[0] == '[' && colon < strchr(addr, ']')))
        return gs_errf(e, GS_EINVAL, "leader identity %.80s: address after '@' has no :PORT",
                       identity);
    /* an IPv6 address without brackets (POD_NAME@$(POD_IP):PORT on an
     * IPv6 cluster): the port is after the last ':' */
    char v6[INET6_ADDRSTRLEN + 1];
    struct in6_addr a6;
    size_t hn = (size_t)(colon - addr);
    int bare6 = addr[0] != '[' && memchr(addr, ':', hn) && hn < sizeof v6;
    if (bare6) {
        memcpy(v6, addr, hn);
        v6[hn] = '\0';
        bare6 = inet_pton(AF_INET6, v6, &a6) == 1;
    }
    if (!bare6 && !host_ok(addr, hn))
        return gs_errf(e, GS_EINVAL, "leader identity %.80s: bad host before the port",
                       identity);
    if (!port_ok(colon + 1))
        return gs_errf(e, GS_EINVAL, "leader identity %.80s: port is not 1..65535", identity);
    if (bare6 && strlen(addr) + 2 >= cap)
        return gs_errf(e, GS_EINVAL, "leader identity %.80s: address after '@' too long",
                       identity);
    if (bare6)
        snprintf(out, cap, "[%s]%s", v6, colon);
    else
        snprintf(out, cap, "%s", addr);
    return 0;
}

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    struct gs_buf *b = ud;
    if (b->len + sz * n > MAX_REPLY)
        return 0; /* curl fails the transfer */
    gs_buf_put(b, p, sz * n);
    return b->oom ? 0 : sz * n;
}

static char *error_json(const char *fmt, const char *a, const char *b, size_t *len)
{
    char msg[600];
    struct gs_buf out = {0};
    snprintf(msg, sizeof msg, fmt, a, b);
    gs_buf_str(&out, "{\"error\":");
    gs_buf_json_str(&out, msg);
    gs_buf_str(&out, ",\"Error\":");
    gs_buf_json_str(&out, msg);
    gs_buf_str(&out, "}");
    if (out.oom) {
        gs_buf_free(&out);
        *len = 0;
        return NULL;
    }
    *len = out.len;
    return out.buf;
}

/* Was the leader who unreachable less than DOWN_S ago? */
static int leader_down(struct ext_forward *f, const char *who)
{
    pthread_mutex_lock(&f->mu);
    int down = strcmp(f->down, who) == 0 && gs_mono_s() < f->down_until;
    pthread_mutex_unlock(&f->mu);
    return down;
}

static void mark_down(struct ext_forward *f, const char *who)
{
    pthread_mutex_lock(&f->mu);
    snprintf(f->down, sizeof f->down, "%s", who);
    f->down_until = gs_mono_s() + DOWN_S;
    pthread_mutex_unlock(&f->mu);
}

/* POSTs body to http(s)://addr/verb: the CURLcode, with the status in *http
 * and the answer in *reply. */
static CURLcode post(struct ext_forward *f, const char *addr, const char *verb, const char *body,
                     size_t len, long *http, struct gs_buf *reply)
{
    char url[340], hdr[MAX_ID + 40], pin[sizeof f->pin];
    snprintf(url, sizeof url, "%s://%s/%s", f->tls ? "https" : "http", addr, verb);
    pthread_mutex_lock(&f->mu);
    memcpy(pin, f->pin, sizeof pin);
    pthread_mutex_unlock(&f->mu);
    snprintf(hdr, sizeof hdr, EXT_FORWARD_HEADER ": %s", f->self);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *h2 = hdrs ? curl_slist_append(hdrs, hdr) : NULL;
    CURL *h = curl_easy_init();
    CURLcode cc = CURLE_OUT_OF_MEMORY;
    *http = 0;
    if (h && h2) {
        hdrs = h2;
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, f->tls ? "https" : "http");
        if (f->tls && f->ca) {
            /* the leader's address is a pod IP, which its certificate need not
             * name: it is trusted for a certificate the CA signed (read anew
             * for each call, so a CA bundle's update counts at once) */
            curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
            curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
            curl_easy_setopt(h, CURLOPT_CAINFO, f->ca);
        } else if (f->tls) {
            /* ... or for holding this replica's own key */
            curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
            curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
            curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, pin);
        }
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, f->timeout_ms);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, reply);
        cc = curl_easy_perform(h);
        if (cc == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, http);
    }
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    return cc;
}

int ext_forward_elsewhere(struct ext_forward *f)
{
    char who[MAX_ID];
    return f->leader(f->ud, who, sizeof who) && strrchr(who, '@') != NULL;
}

int ext_forward(struct ext_forward *f, const char *verb, const char *body, size_t len,
                int *status, char **out, size_t *out_len)
{
    char who[MAX_ID], addr[300], code[8];
    struct gs_err e = GS_ERR_INIT;
    int bind = strcmp(verb, "bind") == 0;
    if (!f->leader(f->ud, who, sizeof who))
        return 0;
    int rc = ext_forward_addr(who, addr, sizeof addr, &e);
    if (rc == 1 || (!bind && (rc < 0 || leader_down(f, who))))
        return 0;
    *status = 503;
    if (rc < 0) {
        *out = error_json("this replica is not the leader and cannot forward: %s%s", e.msg, "",
                          out_len);
        return 1;
    }
    struct gs_buf reply = {0};
    long http;
    CURLcode cc = post(f, addr, verb, body, len, &http, &reply);
    snprintf(code, sizeof code, "%ld", cc == CURLE_OK ? http : 0L);
    metric_inc(f->m_forwarded, (const char *[]){verb, code});
    if (cc != CURLE_OK || reply.oom || http < 100 || http > 599) {
        const char *why = cc == CURLE_OK ? "bad answer" : curl_easy_strerror(cc);
        gs_buf_free(&reply);
        if (!leader_down(f, who))
            log_warn("extender", "forwarding /%s to the leader %s at %s: %s%s", verb, who, addr,
                     why, bind ? "" : " (answering /filter, /prioritize, /preempt here for a while)");
        mark_down(f, who);
        if (!bind)
            return 0;
        *out = error_json("this replica is not the leader, and the leader %s did not answer: %s",
                          who, why, out_len);
        return 1;
    }
    *status = (int)http;
    *out_len = reply.len;
    *out = reply.buf;
    return 1;
}
