/*
 * ext/sched_prioritize.c - the extender's /prioritize verb (kube-scheduler's
 * Score extension point): the policy's score of each node, on
 * kube-scheduler's 0..10 scale, kept while the cluster does not change.
 */
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "ext/memo.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "ext/sched_int.h"
#include "ext/namelist.h"
#include "util/buf.h"

int ext_sched_prioritize(struct ext_sched *s, const char *body, size_t len, struct ext_reply *out)
{
    json_t **reply = &out->json;
    struct gs_err e = GS_ERR_INIT;
    struct sched_verb v;
    int rc = sched_verb_start(s, "prioritize", body, len, 1, &v, out);
    if (rc)
        return rc;
    struct ext_args *a = &v.a;
    struct core_pod *pod = &v.pod;
    const int memo = v.memo;
    int gpu = pod->req.kind != CORE_REQ_NONE;
    /* answered from a kept reply while the cluster's version (and the
     * labels of the pods placed) has not moved: scores are normalised over
     * all feasible nodes, so any change starts the answer again */
    struct ext_memo_entry *en = NULL;
    struct ext_memo_col *col = NULL; /* the filters' verdicts by node position */
    unsigned long epoch = 0, col_epoch = 0;
    uint64_t ver = 0;

    pthread_mutex_lock(&s->mu);
    if (gpu) {
        sched_remember(s, a->pod, 0);
        sched_expect_bind_again(s, pod->uid);
    }
    if (memo && (col = ext_memo_col_get(s->memo, v.key, v.klen, core_cluster_node_count(s->c))))
        col_epoch = col->epoch;
    if (memo && (en = sched_verb_memo(s, &v, EXT_MEMO_PRIORITIZE))) {
        if (en->reply && en->version == sched_score_version(s))
            out->shared = ext_text_ref(en->reply);
        epoch = en->epoch;
    }
    pthread_mutex_unlock(&s->mu);
    if (out->shared) {
        metric_inc(s->m_kept, (const char *[]){"prioritize"});
        sched_decision(s, "prioritize", "scored");
        sched_verb_end(&v);
        return 200;
    }

    struct core_node **nodes = calloc((size_t)a->n + 1, sizeof *nodes);
    int *pos = calloc((size_t)a->n + 1, sizeof *pos), *sc = calloc((size_t)a->n + 1, sizeof *sc);
    int *at = calloc((size_t)a->n + 1, sizeof *at); /* node positions of the known nodes */
    int *out_scores = calloc((size_t)a->n + 1, sizeof *out_scores);
    unsigned char *fit = calloc((size_t)a->n + 1, 1);
    int k = 0, scored = 0;

    if (!nodes || !pos || !at || !sc || !out_scores || !fit) {
        *reply = ext_error("out of memory");
        sched_decision(s, "prioritize", "error");
        rc = 500;
        goto done;
    }
    pthread_mutex_lock(&s->mu);
    if (gpu) {
        /* by position: a list's positions are kept with it, so a node
         * whose verdict and score are kept is never dereferenced */
        const int *lp = a->list ? sched_list_positions(s, a->list) : NULL;
        if (!lp)
            sched_resolve(s, a, nodes);
        for (int i = 0; i < a->n; i++)
            if (lp ? lp[i] >= 0 : nodes[i] != NULL) {
                pos[k] = i;
                at[k++] = lp ? lp[i] : core_node_pos(nodes[i]);
            }
        /* the filters' verdicts kept in the column (by node position, with
         * the node's state stamp): only the nodes whose state moved since
         * are filtered again; scores are normalised over all, so all are
         * scored (the core's score columns keep the raw scores) */
        const uint64_t *stamps = core_cluster_stamps(s->c);
        int keep = col && col->epoch == col_epoch && col->cap >= core_cluster_node_count(s->c);
        for (int j = 0; j < k && keep; j++) {
            int p = at[j];
            if (col->fit[p] && col->stamp[p] == stamps[p])
                fit[j] = col->fit[p];
        }
        scored = !k || core_score_fit_at(s->c, v.pol, pod, at, k, fit, sc, &e) == 0;
        int best = scored ? core_choice_at(s->c, pod, at, sc, fit, k) : -1;
        for (int j = 0; j < k && scored; j++) /* 0..100 -> kube-scheduler's 0..10 */
            out_scores[pos[j]] = sched_extender_score(sc[j], best < 0 ? 0 : sc[best], j == best);
        for (int j = 0; j < k && keep; j++) {
            int p = at[j];
            col->fit[p] = scored ? fit[j] : 0;
            col->stamp[p] = stamps[p];
        }
        ver = sched_score_version(s);
    }
    pthread_mutex_unlock(&s->mu);

    struct gs_buf r = {0};
    size_t need = 2; /* the whole reply, so that it is allocated once */
    for (int i = 0; i < a->n; i++)
        need += (a->list ? a->list->len[i] : strlen(a->names[i])) +
                sizeof ",{\"Host\":\"\",\"Score\":10}";
    if (gs_buf_reserve(&r, need) == 0) {
        /* written in place: the buffer holds the whole reply */
        static const char host[] = "{\"Host\":\"", score[] = "\",\"Score\":";
        char *w = r.buf + r.len;
        *w++ = '[';
        for (int i = 0; i < a->n; i++) {
            size_t nl = a->list ? a->list->len[i] : strlen(a->names[i]);
            if (i)
                *w++ = ',';
            memcpy(w, host, sizeof host - 1);
            w += sizeof host - 1;
            memcpy(w, a->names[i], nl);
            w += nl;
            memcpy(w, score, sizeof score - 1);
            w += sizeof score - 1;
            if (out_scores[i] >= 10) /* scores are 0..10: two digits at most */
                *w++ = (char)('0' + out_scores[i] / 10);
            *w++ = (char)('0' + out_scores[i] % 10);
            *w++ = '}';
        }
        r.len = (size_t)(w - r.buf);
    }
    gs_buf_put(&r, "]", 1);
    if (en && scored && !r.oom) {
        /* kept while nothing changes: the same entry, the same version */
        if (!(out->shared = ext_text_wrap(r.buf, r.len))) {
            *reply = ext_error("out of memory");
        } else {
            pthread_mutex_lock(&s->mu);
            if (en->epoch == epoch && sched_score_version(s) == ver) {
                en->version = ver;
                ext_memo_set_reply(en, ext_text_ref(out->shared));
            }
            pthread_mutex_unlock(&s->mu);
        }
    } else {
        sched_reply_text(out, &r);
    }
    sched_decision(s, "prioritize", gpu ? "scored" : "no_gpu");
    rc = 200;
done:
    free(nodes);
    free(pos);
    free(at);
    free(sc);
    free(out_scores);
    free(fit);
    sched_verb_end(&v);
    return rc;
}
