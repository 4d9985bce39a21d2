/*
 * The one intrusive FIFO: an entry embeds a tli_qnode and is queued at the
 * tail, taken at the head, without allocating. The tail is kept as the
 * address of the last `next` pointer, so pushing never tests for an empty
 * queue. Not thread-safe: the owner's lock covers it.
 *
 *	struct job { tli_qnode qn; ... };
 *	tli_queue_push(&q, &job->qn);
 *	job = TLI_CONTAINER(tli_queue_pop(&q), struct job, qn);
 */
#ifndef TL_BASE_QUEUE_H
#define TL_BASE_QUEUE_H

#include <stddef.h>

typedef struct tli_qnode {
	struct tli_qnode *next;
} tli_qnode;

typedef struct tli_queue {
	tli_qnode *head;
	tli_qnode **tailp; /* &head when empty, else &last->next */
} tli_queue;

static inline void
tli_queue_init(tli_queue *q)
{
	q->head = NULL;
	q->tailp = &q->head;
}

static inline void
tli_queue_push(tli_queue *q, tli_qnode *n)
{
	n->next = NULL;
	*q->tailp = n;
	q->tailp = &n->next;
}

/* The oldest entry, unlinked, or NULL when empty. */
static inline tli_qnode *
tli_queue_pop(tli_queue *q)
{
	tli_qnode *n = q->head;

	if (n != NULL && (q->head = n->next) == NULL) {
		q->tailp = &q->head;
	}
	return n;
}

#endif
