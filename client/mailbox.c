/*
 * The client's side of the submission mailbox (common/completion.h): a
 * pending transfer written into the shared page instead of sent as a
 * Transfer frame, used while the daemon says it polls the mailbox. The
 * request names the last sequence number sent before it, so the daemon
 * starts it only after those frames. If the daemon stopped polling by the
 * time the request is written, a MailboxDoorbell frame wakes it. The answer
 * (accepted, or a refusal with its reason) comes back in the mailbox.
 */
#include <string.h>

#include "client/internal.h"

/* How long the client polls for the daemon's answer before it sleeps. */
#define ANSWER_SPIN_US 200u

int tf__mailbox_usable(const tf_client *c) {
    const tf__mailbox *m = c->mailbox;
    return m && __atomic_load_n(&m->daemon_polling, __ATOMIC_RELAXED) &&
           __atomic_load_n(&m->state, __ATOMIC_RELAXED) == TF__MAILBOX_IDLE;
}

tf_status tf__mailbox_submit(tf_client *c, uint32_t direction, uint64_t buffer, tf_tensor t,
                             size_t bytes, uint32_t slot) {
    tf__mailbox *m = c->mailbox;
    m->direction = direction;
    m->buffer = buffer;
    m->tensor = t;
    m->offset = 0;
    m->bytes = bytes;
    m->slot = slot;
    m->after_seq = c->last_socket_seq; /* ring requests before it are answered already */
    m->client_sleeping = 0;
    __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_SUBMITTED, __ATOMIC_SEQ_CST);
    return tf__doorbell_if_asleep(c);
}

tf_status tf__doorbell_if_asleep(tf_client *c) {
    if (__atomic_load_n(&c->mailbox->daemon_polling, __ATOMIC_SEQ_CST)) return TF_OK;
    /* The daemon may have gone to sleep before it saw the request: ring. */
    Tenferro__Frame bell = TENFERRO__FRAME__INIT;
    Tenferro__MailboxDoorbell body = TENFERRO__MAILBOX_DOORBELL__INIT;
    bell.body_case = TENFERRO__FRAME__BODY_MAILBOX_DOORBELL;
    bell.mailbox_doorbell = &body;
    return tf__send(c, &bell);
}

tf_status tf__mailbox_answer(tf_client *c) {
    tf__mailbox *m = c->mailbox;
    tf_status st = tf__await_change(c, &m->state, TF__MAILBOX_SUBMITTED, ANSWER_SPIN_US,
                                    &m->client_sleeping);
    if (st != TF_OK) return st;
    tf_status answer = (tf_status)__atomic_load_n(&m->status, __ATOMIC_ACQUIRE);
    char why[sizeof m->message];
    memcpy(why, m->message, sizeof why);
    why[sizeof why - 1] = '\0';
    __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_IDLE, __ATOMIC_RELEASE);
    if (answer == TF_OK) return TF_OK;
    return tf__fail(c, answer, "%s", why[0] ? why : tf_strerror(answer));
}
