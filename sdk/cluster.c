/*
 * Cluster administration through the SDK (timeline.h, "cluster"): the
 * CLUSTER operation's four actions. Status is the answering node's own
 * view; the changes go to the leader (the client follows a TL_ENOTLEADER
 * like any request's).
 */
#include <string.h>

#include "internal.h"

static void
copy_str(char *out, size_t cap, tlp_str s)
{
	size_t n = s.n < cap - 1 ? s.n : cap - 1;

	if (n > 0) {
		memcpy(out, s.p, n);
	}
	out[n] = '\0';
}

static int
status_dec(void *arg, tlp_r *r)
{
	tl_cluster_info *out = arg;
	tlp_cluster_status m;
	int rv = tlp_dec_cluster_status(r, &m);

	if (rv != TL_OK) {
		return rv;
	}
	out->self_id = m.self_id;
	out->leader_id = m.leader_id;
	out->term = m.term;
	out->commit_index = m.commit_index;
	out->applied_index = m.applied_index;
	out->last_index = m.last_index;
	copy_str(out->state, sizeof(out->state), m.state);
	out->serving = m.serving;
	out->degraded = m.degraded;
	out->majority_offset_ms = m.majority_offset_ms;
	out->nodes = tli_zalloc(sizeof(*out->nodes) * (m.n + 1));
	if (out->nodes == NULL) {
		tlp_cluster_status_fini(&m);
		return TL_ENOMEM;
	}
	for (size_t i = 0; i < m.n; i++) {
		tl_cluster_node *o = &out->nodes[i];
		const tlp_cluster_node *n = &m.nodes[i];

		o->id = n->id;
		copy_str(o->raft, sizeof(o->raft), n->raft);
		copy_str(o->url, sizeof(o->url), n->url);
		copy_str(o->role, sizeof(o->role), n->role);
		o->match_index = n->match;
		o->clock_known = n->clock_known;
		o->clock_offset_ms = n->clock_offset_ms;
	}
	out->n = m.n;
	tlp_cluster_status_fini(&m);
	return TL_OK;
}

static int
cluster_call(tl_client *c, const char *action, uint64_t id, const char *raft,
    const char *url, tli_dec_fn dec, void *arg)
{
	tlp_cluster_req m = {TLP_STR(action), id, TLP_STR(raft), TLP_STR(url)};
	tli_buf b;
	tlp_w w;

	if (c == NULL) {
		return TL_EINVAL;
	}
	tli_frame_start(&b, &w, TLP_OP_CLUSTER);
	tlp_enc_cluster_req(&w, &m);
	return tli_call(c, &b, TLP_OP_CLUSTER, dec, arg);
}

int
tl_cluster_status(tl_client *c, tl_cluster_info *out)
{
	tl_cluster_info st;
	int rv;

	if (out == NULL) {
		return TL_EINVAL;
	}
	memset(&st, 0, sizeof(st));
	if ((rv = cluster_call(c, "status", 0, "", "", status_dec, &st)) ==
	    TL_OK) {
		*out = st;
	} else {
		tli_free(st.nodes);
	}
	return rv;
}

void
tl_cluster_info_free(tl_cluster_info *s)
{
	if (s != NULL) {
		tli_free(s->nodes);
		s->nodes = NULL;
		s->n = 0;
	}
}

int
tl_cluster_transfer(tl_client *c, uint64_t id)
{
	return cluster_call(c, "transfer", id, "", "", NULL, NULL);
}

int
tl_cluster_add(tl_client *c, uint64_t id, const char *raft, const char *url)
{
	if (raft == NULL || id == 0) {
		return TL_EINVAL;
	}
	return cluster_call(
	    c, "add", id, raft, url != NULL ? url : "", NULL, NULL);
}

int
tl_cluster_remove(tl_client *c, uint64_t id)
{
	if (id == 0) {
		return TL_EINVAL;
	}
	return cluster_call(c, "remove", id, "", "", NULL, NULL);
}
