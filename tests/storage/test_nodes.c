/*
 * The replicated client URLs of a Raft group's nodes (store.h, "the client
 * URLs of the group's nodes") on a real RocksDB database: an entry sets,
 * replaces and removes a URL with the applied index, a replay changes
 * nothing, both survive a reopen and a checkpoint, the checker sees no
 * problem; malformed entries are refused and write nothing; a store
 * prepared as a seed keeps none.
 */
#define _GNU_SOURCE /* asprintf */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "testutil.h"
#include "tlcheck.h"

static char *dir;
static tt_clock clk;

static void
setup(void)
{
	dir = tt_mkdtemp("nodes");
	tt_clock_init(&clk, 1700000000000LL);
}

static void
teardown(void)
{
	tt_rmtree_free(&dir);
}

TestSuite(nodes, .init = setup, .fini = teardown);

/* What tli_store_node_urls lists, as "id=url;" pairs. */
typedef struct listing {
	char text[1024];
} listing;

static void
list_one(void *arg, uint64_t id, const char *url)
{
	listing *l = arg;
	size_t n = strlen(l->text);

	snprintf(l->text + n, sizeof(l->text) - n, "%llu=%s;",
	    (unsigned long long) id, url);
}

static const char *
urls(tli_store *s, listing *l)
{
	l->text[0] = '\0';
	TL_PASS(tli_store_node_urls(s, list_one, l));
	return l->text;
}

static int
set_url(tli_store *s, uint64_t index, uint64_t id, const char *url)
{
	uint8_t e[TLI_REPL_NODE_MAX];
	size_t n = tli_store_node_entry(id, url, e);

	cr_assert_gt(n, 0);
	return tli_store_node_apply(s, index, e, n);
}

static char *
sub(const char *name)
{
	char *p = NULL;

	cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

Test(nodes, set_replace_remove_and_survive_a_reopen)
{
	char *path = sub("store"), *cp = sub("copy");
	tli_store *s = tt_store_open(path, &clk);
	uint64_t index = 0;
	listing l;

	cr_assert_str_eq(urls(s, &l), "");
	TL_PASS(set_url(s, 1, 4, "tcp://127.0.0.1:7404"));
	TL_PASS(set_url(s, 2, 5, "ipc:///tmp/node5"));
	TL_PASS(set_url(s, 3, 4, "tls+tcp://n4.example:7400"));
	cr_assert_eq(tli_store_applied_index(s), 3);
	/* a replay (index at or below the applied one) changes nothing */
	TL_PASS(set_url(s, 2, 5, "tcp://elsewhere:1"));
	cr_assert_str_eq(
	    urls(s, &l), "4=tls+tcp://n4.example:7400;5=ipc:///tmp/node5;");
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);

	s = tt_store_open(path, &clk);
	cr_assert_eq(tli_store_applied_index(s), 3);
	cr_assert_str_eq(
	    urls(s, &l), "4=tls+tcp://n4.example:7400;5=ipc:///tmp/node5;");
	TL_PASS(set_url(s, 4, 5, "")); /* removed */
	TL_PASS(set_url(s, 5, 9, "")); /* removing none is fine */
	cr_assert_eq(tli_store_applied_index(s), 5);
	cr_assert_str_eq(urls(s, &l), "4=tls+tcp://n4.example:7400;");
	/* a snapshot is a checkpoint: it carries them */
	TL_PASS(tli_store_checkpoint(s, cp, &index));
	cr_assert_eq(index, 5);
	tli_store_close(s);
	s = tt_store_open(cp, &clk);
	cr_assert_str_eq(urls(s, &l), "4=tls+tcp://n4.example:7400;");
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);
	free(path);
	free(cp);
}

Test(nodes, malformed_entries_are_refused_and_write_nothing)
{
	char *path = sub("store");
	tli_store *s = tt_store_open(path, &clk);
	uint8_t e[TLI_REPL_NODE_MAX + 64], good[TLI_REPL_NODE_MAX];
	char big[TLI_NODE_URL_CAP + 1];
	size_t n;
	listing l;

	TL_PASS(set_url(s, 1, 4, "tcp://127.0.0.1:7404"));
	n = tli_store_node_entry(2, "tcp://127.0.0.1:7402", good);

	/* cut short: inside the id, then without the URL's NUL */
	TL_FAIL(
	    tli_store_node_apply(s, 2, good, TLI_REPL_HEADER + 4), TL_ECORRUPT);
	TL_FAIL(tli_store_node_apply(s, 2, good, n - 1), TL_ECORRUPT);
	cr_assert(strstr(tli_store_last_error(s), "NUL") != NULL, "%s",
	    tli_store_last_error(s));
	/* a NUL inside the URL */
	memcpy(e, good, n);
	e[TLI_REPL_HEADER + 8 + 3] = '\0';
	TL_FAIL(tli_store_node_apply(s, 2, e, n), TL_ECORRUPT);
	/* bytes after the NUL */
	memcpy(e, good, n);
	e[n] = 'x';
	TL_FAIL(tli_store_node_apply(s, 2, e, n + 1), TL_ECORRUPT);
	/* a URL over the 256-byte field */
	memcpy(e, good, TLI_REPL_HEADER + 8);
	memset(e + TLI_REPL_HEADER + 8, 'a', TLI_NODE_URL_CAP);
	e[TLI_REPL_HEADER + 8 + TLI_NODE_URL_CAP] = '\0';
	TL_FAIL(tli_store_node_apply(
	            s, 2, e, TLI_REPL_HEADER + 8 + TLI_NODE_URL_CAP + 1),
	    TL_ECORRUPT);
	cr_assert(strstr(tli_store_last_error(s), "bytes") != NULL, "%s",
	    tli_store_last_error(s));
	/* node 0, another version, another kind */
	memcpy(e, good, n);
	memset(e + TLI_REPL_HEADER, 0, 8);
	TL_FAIL(tli_store_node_apply(s, 2, e, n), TL_ECORRUPT);
	memcpy(e, good, n);
	e[0] = TLI_REPL_VERSION + 1;
	TL_FAIL(tli_store_node_apply(s, 2, e, n), TL_ECORRUPT);
	memcpy(e, good, n);
	e[1] = TLI_REPL_OPS;
	TL_FAIL(tli_store_node_apply(s, 2, e, n), TL_ECORRUPT);
	/* and the ordinary apply refuses a node entry */
	TL_FAIL(tli_store_apply_entry(s, 2, good, n), TL_ECORRUPT);

	cr_assert_eq(tli_store_applied_index(s), 1, "a refusal wrote");
	cr_assert_str_eq(urls(s, &l), "4=tcp://127.0.0.1:7404;");
	/* the builder refuses what the field cannot hold */
	memset(big, 'a', TLI_NODE_URL_CAP);
	big[TLI_NODE_URL_CAP] = '\0';
	cr_assert_eq(tli_store_node_entry(3, big, e), 0);
	big[TLI_NODE_URL_CAP - 1] = '\0';
	cr_assert_eq(tli_store_node_entry(3, big, e),
	    TLI_REPL_HEADER + 8 + TLI_NODE_URL_CAP);
	cr_assert_eq(tli_store_node_entry(0, "tcp://a:1", e), 0);
	/* the good one still applies */
	TL_PASS(tli_store_node_apply(s, 2, good, n));
	cr_assert_str_eq(
	    urls(s, &l), "2=tcp://127.0.0.1:7402;4=tcp://127.0.0.1:7404;");
	tli_store_close(s);
	free(path);
}

/* A store prepared to seed a new group keeps no URL of the old group's
 * nodes (the new group may give those ids to other nodes). */
Test(nodes, seed_preparation_drops_them)
{
	char *path = sub("store");
	tli_store *s = tt_store_open(path, &clk);
	uint64_t was = 0, id = 0;
	char why[256];
	listing l;

	TL_PASS(set_url(s, 1, 4, "tcp://127.0.0.1:7404"));
	tli_store_close(s);
	TL_PASS(tli_store_seed(path, &was, &id, why, sizeof(why)), "%s", why);
	cr_assert_eq(was, 1);
	s = tt_store_open(path, &clk);
	cr_assert_str_eq(urls(s, &l), "");
	cr_assert_eq(tli_store_applied_index(s), 0);
	tli_store_close(s);
	free(path);
}
