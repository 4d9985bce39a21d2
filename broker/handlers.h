/*
 * Request handling: the frame header checks, the dispatch table expanded
 * from ops.def and one handler per operation. Runs on the request worker
 * (one thread, requests in arrival order), except the scans of long reads,
 * which run on a reader thread (tlb_session_read); store completions of write
 * batches run on the store's writer thread and reply from there. Takes no
 * lock of its own: it calls the dispatcher (whose lock comes first) and
 * sends on sessions.
 */
#ifndef TL_BROKER_HANDLERS_H
#define TL_BROKER_HANDLERS_H

#include "server.h"

/* Handle one request frame (the server's request worker): answer it or
 * submit it to the store, then free j and release its session. */
void tlb_handle(tlb_broker *b, tlb_job *j);

#endif
