/* ext/bindq.c - see bindq.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ext/bindq.h"
#include "util/clock.h"

struct job {
    struct job *next;
    void *token;
    char *body;
    size_t len;
    int status;
    struct ext_reply reply;
    double handed;          /* when it was handed over (gs_mono_s) */
};

struct ext_bindq {
    ext_bind_fn bind;
    void *ud;
    void (*wake)(void *token);
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* a job was queued, or stopping */
    struct job *head, **tail;      /* handed over, not started: FIFO */
    struct job *done;              /* finished, reply not taken yet */
    int stopping;
    int nthreads;
    pthread_t *threads;
};

static void *run(void *arg)
{
    struct ext_bindq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stopping)
            pthread_cond_wait(&q->cv, &q->mu);
        struct job *j = q->head;
        if (!j)
            break; /* stopping, and nothing left */
        if (!(q->head = j->next))
            q->tail = &q->head;
        pthread_mutex_unlock(&q->mu);
        j->status = q->bind(q->ud, j->body, j->len, &j->reply);
        void *token = j->token;
        pthread_mutex_lock(&q->mu);
        j->next = q->done;
        q->done = j;
        pthread_mutex_unlock(&q->mu);
        q->wake(token); /* the reply is there before the handler runs again */
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

int ext_bindq_new(ext_bind_fn bind, void *ud, void (*wake)(void *token), int threads,
                  struct ext_bindq **out, struct gs_err *e)
{
    struct ext_bindq *q = calloc(1, sizeof *q);
    if (!q || threads <= 0 || !(q->threads = calloc((size_t)threads, sizeof *q->threads))) {
        free(q);
        return threads <= 0 ? gs_errf(e, GS_EINVAL, "bind threads: %d is not > 0", threads)
                            : gs_errf(e, GS_ENOMEM, "out of memory");
    }
    q->bind = bind;
    q->ud = ud;
    q->wake = wake;
    q->tail = &q->head;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    for (; q->nthreads < threads; q->nthreads++)
        if (pthread_create(&q->threads[q->nthreads], NULL, run, q) != 0) {
            int started = q->nthreads;
            ext_bindq_free(q);
            return gs_errf(e, GS_ENOMEM, "cannot start bind thread %d of %d", started + 1,
                           threads);
        }
    *out = q;
    return 0;
}

int ext_bindq_submit(struct ext_bindq *q, void *token, const char *body, size_t len)
{
    struct job *j = calloc(1, sizeof *j);
    if (!j || !(j->body = malloc(len + 1))) {
        free(j);
        return -GS_ENOMEM;
    }
    memcpy(j->body, body, len);
    j->body[len] = '\0';
    j->len = len;
    j->token = token;
    j->handed = gs_mono_s();
    pthread_mutex_lock(&q->mu);
    if (q->stopping) {
        pthread_mutex_unlock(&q->mu);
        free(j->body);
        free(j);
        return -GS_EUNAVAIL;
    }
    *q->tail = j;
    q->tail = &j->next;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

static void job_free(struct job *j)
{
    size_t len;
    free(ext_reply_take(&j->reply, &len));
    free(j->body);
    free(j);
}

/* The finished job of token, unlinked; NULL when none. */
static struct job *done_of(struct ext_bindq *q, void *token)
{
    struct job **p, *j = NULL;
    pthread_mutex_lock(&q->mu);
    for (p = &q->done; *p; p = &(*p)->next)
        if ((*p)->token == token) {
            j = *p;
            *p = j->next;
            break;
        }
    pthread_mutex_unlock(&q->mu);
    return j;
}

int ext_bindq_take(struct ext_bindq *q, void *token, int *status, struct ext_reply *r,
                   double *since_s)
{
    struct job *j = done_of(q, token);
    if (!j)
        return 0;
    *since_s = gs_mono_s() - j->handed;
    *status = j->status;
    *r = j->reply;
    free(j->body);
    free(j);
    return 1;
}

void ext_bindq_forget(struct ext_bindq *q, void *token)
{
    struct job *j = q ? done_of(q, token) : NULL;
    if (j)
        job_free(j);
}

void ext_bindq_stop(struct ext_bindq *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    int joined = q->stopping;
    q->stopping = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (joined)
        return;
    for (int i = 0; i < q->nthreads; i++)
        pthread_join(q->threads[i], NULL);
}

void ext_bindq_free(struct ext_bindq *q)
{
    if (!q)
        return;
    ext_bindq_stop(q);
    while (q->done) {
        struct job *j = q->done;
        q->done = j->next;
        job_free(j);
    }
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q->threads);
    free(q);
}
