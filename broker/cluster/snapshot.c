/*
 * The replicated store's snapshots (snapshot.h).
 *
 * The manifest (libraft's snapshot buffer), integers little endian:
 *   "TLSNAP02", index (8), taker's node id (8), name length (4), name,
 *   file count (4), then per file its name length (4), name and size (8).
 * A snapshot of format 1 ("TLSNAP01": index, file count, then per file its
 * name, size and bytes) is still installed: a node upgraded from it has one
 * in its Raft directory.
 */
#define _GNU_SOURCE /* O_CLOEXEC */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <raft.h>

#include "base.h"
#include "broker.h"
#include "clock.h"
#include "msgs.h"
#include "peer.h"
#include "snapshot.h"
#include "store.h"
#include "tlb_log.h"

#include "cluster.h"

static const char magic1[8] = {'T', 'L', 'S', 'N', 'A', 'P', '0', '1'};
static const char magic2[8] = {'T', 'L', 'S', 'N', 'A', 'P', '0', '2'};

/* Snapshots kept besides those being fetched: libraft keeps two. */
#define KEEP 2
/* A snapshot read by another node within this is not removed. */
#define SERVED_MS 60000
/* One request of a fetch (connect, HELLO, a part) may take this long. */
#define FETCH_IO_MS 10000

typedef struct snap_file {
	char name[256];
	uint64_t size;
} snap_file;

/* A parsed manifest (pointing into the buffer). */
typedef struct manifest {
	uint64_t index;
	uint64_t taker;
	char name[48];
	snap_file *files;
	uint32_t nfiles;
	uint64_t bytes;
} manifest;

/* ---- names ---- */

/* A snapshot's name: ID-INDEX, both decimal. */
static bool
name_ok(const char *name, uint64_t *index)
{
	const char *dash = strchr(name, '-');
	char *end;

	if (dash == NULL || dash == name || dash[1] == '\0' ||
	    strlen(name) >= sizeof(((manifest *) 0)->name)) {
		return false;
	}
	for (const char *p = name; *p != '\0'; p++) {
		if (p != dash && (*p < '0' || *p > '9')) {
			return false;
		}
	}
	errno = 0;
	*index = strtoull(dash + 1, &end, 10);
	return errno == 0 && *end == '\0';
}

/* A file of a checkpoint: a plain name, not hidden. */
static bool
file_ok(const char *file)
{
	return file[0] != '\0' && file[0] != '.' && strchr(file, '/') == NULL &&
	    strlen(file) < sizeof(((snap_file *) 0)->name);
}

/* ---- files ---- */

/* Write n bytes to fd. */
static int
write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);

		if (k < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -1;
		}
		p += k;
		n -= (size_t) k;
	}
	return 0;
}

static int
fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rv;

	if (fd < 0) {
		return -1;
	}
	rv = fsync(fd);
	close(fd);
	return rv;
}

/* Copy file from to to (created), fsynced. */
static int
copy_file(const char *from, const char *to)
{
	uint8_t buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out;
	ssize_t k;
	int rv = 0;

	if (in < 0) {
		return -1;
	}
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		close(in);
		return -1;
	}
	while (rv == 0 && (k = read(in, buf, sizeof(buf))) != 0) {
		if (k < 0) {
			rv = errno == EINTR ? 0 : -1;
			continue;
		}
		rv = write_all(out, buf, (size_t) k);
	}
	if (rv == 0) {
		rv = fsync(out);
	}
	close(in);
	if (close(out) != 0) {
		rv = -1;
	}
	return rv;
}

/* The regular files of dir with their sizes (*out: free). */
static int
list_files(const char *dir, snap_file **out, uint32_t *n, uint64_t *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	snap_file *v = NULL;
	uint32_t k = 0, cap = 0;

	*bytes = 0;
	if (d == NULL) {
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		char path[1024];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (!file_ok(e->d_name) || stat(path, &st) != 0 ||
		    !S_ISREG(st.st_mode)) {
			continue;
		}
		if (k == cap) {
			snap_file *w;

			cap = cap == 0 ? 16 : cap * 2;
			if ((w = realloc(v, cap * sizeof(*v))) == NULL) {
				free(v);
				closedir(d);
				return -1;
			}
			v = w;
		}
		snprintf(v[k].name, sizeof(v[k].name), "%s", e->d_name);
		v[k].size = (uint64_t) st.st_size;
		*bytes += v[k].size;
		k++;
	}
	closedir(d);
	*out = v;
	*n = k;
	return 0;
}

/* ---- keeping and removing ---- */

static bool
served_lately(tlc_snaps *s, const char *name)
{
	int64_t now = tli_mono_ms();
	bool yes = false;

	pthread_mutex_lock(&s->mtx);
	for (int i = 0; i < TLC_SNAPS_SERVED; i++) {
		if (strcmp(s->served[i].name, name) == 0 &&
		    now - s->served[i].ms < SERVED_MS) {
			yes = true;
		}
	}
	pthread_mutex_unlock(&s->mtx);
	return yes;
}

static void
served_now(tlc_snaps *s, const char *name)
{
	int64_t now = tli_mono_ms();
	int slot = 0;

	pthread_mutex_lock(&s->mtx);
	for (int i = 0; i < TLC_SNAPS_SERVED; i++) {
		if (strcmp(s->served[i].name, name) == 0) {
			slot = i;
			break;
		}
		if (s->served[i].ms < s->served[slot].ms) {
			slot = i;
		}
	}
	snprintf(
	    s->served[slot].name, sizeof(s->served[slot].name), "%s", name);
	s->served[slot].ms = now;
	pthread_mutex_unlock(&s->mtx);
}

/* Remove every snapshot but the KEEP newest (by index) and those being
 * fetched; with leftovers, also what an interrupted take or fetch left. */
static void
prune(tlc_snaps *s, bool leftovers)
{
	uint64_t keep[KEEP] = {0};
	DIR *d = opendir(s->dir);
	struct dirent *e;

	if (d == NULL) {
		return;
	}
	while ((e = readdir(d)) != NULL) {
		uint64_t ix;

		if (name_ok(e->d_name, &ix)) {
			/* the KEEP largest indexes, largest first */
			for (int i = 0; i < KEEP; i++) {
				if (ix > keep[i]) {
					memmove(&keep[i + 1], &keep[i],
					    (KEEP - 1 - i) * sizeof(keep[0]));
					keep[i] = ix;
					break;
				}
				if (ix == keep[i]) {
					break;
				}
			}
		}
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		char path[1024];
		uint64_t ix;
		bool drop;

		if (e->d_name[0] == '.') {
			continue;
		}
		if (name_ok(e->d_name, &ix)) {
			drop =
			    ix < keep[KEEP - 1] && !served_lately(s, e->d_name);
		} else {
			drop = leftovers; /* NAME.part, take.tmp */
		}
		if (drop) {
			snprintf(
			    path, sizeof(path), "%s/%s", s->dir, e->d_name);
			(void) tli_rmtree(path);
		}
	}
	closedir(d);
}

int
tlc_snaps_init(tlc_snaps *s, tlb_broker *b)
{
	memset(s, 0, sizeof(*s));
	s->b = b;
	s->self = b->conf.nodes[b->conf.self].id;
	snprintf(s->dir, sizeof(s->dir), "%s/snapshots", b->conf.data_dir);
	snprintf(s->restore_dir, sizeof(s->restore_dir), "%s/restore.tmp",
	    b->conf.data_dir);
	pthread_mutex_init(&s->mtx, NULL);
	pthread_mutex_init(&s->take_mtx, NULL);
	if (mkdir(s->dir, 0755) != 0 && errno != EEXIST) {
		tlb_log(TLB_ERROR, "R010", "cannot create %s: %s", s->dir,
		    strerror(errno));
		return -1;
	}
	prune(s, true);
	(void) tli_rmtree(s->restore_dir);
	return 0;
}

void
tlc_snaps_fini(tlc_snaps *s)
{
	pthread_mutex_destroy(&s->mtx);
	pthread_mutex_destroy(&s->take_mtx);
}

/* ---- taking ---- */

/* The manifest of the checkpoint s->dir/NAME (taken by node taker, the
 * store at index), its files listed from the disk: *p allocated with
 * alloc (raft_malloc for libraft, malloc for a reply). */
static int
manifest_of(tlc_snaps *s, const char *name, uint64_t taker, uint64_t index,
    void *(*alloc)(size_t), uint8_t **pp, size_t *lenp, uint32_t *nfilesp,
    uint64_t *bytesp)
{
	char dir[700];
	snap_file *files = NULL;
	uint32_t nfiles = 0;
	uint64_t bytes = 0;
	size_t len, off, nl = strlen(name);
	uint8_t *p;

	snprintf(dir, sizeof(dir), "%s/%s", s->dir, name);
	if (list_files(dir, &files, &nfiles, &bytes) != 0) {
		return errno == ENOENT ? TL_ENOTFOUND : TL_EIO;
	}
	len = 8 + 8 + 8 + 4 + nl + 4;
	for (uint32_t i = 0; i < nfiles; i++) {
		len += 4 + strlen(files[i].name) + 8;
	}
	if ((p = alloc(len)) == NULL) {
		free(files);
		return TL_ENOMEM;
	}
	memcpy(p, magic2, 8);
	tlc_put_u64(p + 8, index);
	tlc_put_u64(p + 16, taker);
	tlc_put_u32(p + 24, (uint32_t) nl);
	memcpy(p + 28, name, nl);
	off = 28 + nl;
	tlc_put_u32(p + off, nfiles);
	off += 4;
	for (uint32_t i = 0; i < nfiles; i++) {
		size_t fl = strlen(files[i].name);

		tlc_put_u32(p + off, (uint32_t) fl);
		memcpy(p + off + 4, files[i].name, fl);
		tlc_put_u64(p + off + 4 + fl, files[i].size);
		off += 4 + fl + 8;
	}
	free(files);
	*pp = p;
	*lenp = len;
	*nfilesp = nfiles;
	*bytesp = bytes;
	return TL_OK;
}

/* Checkpoint the store into s->dir/NAME (NAME = SELF-INDEX, the store's
 * index in it) under s->take_mtx: TL_OK and name set, or an error. */
static int
checkpoint(tlc_snaps *s, char *name, size_t cap, uint64_t *index)
{
	char tmp[700], dir[700];
	int rv;

	pthread_mutex_lock(&s->take_mtx);
	snprintf(tmp, sizeof(tmp), "%s/take.tmp", s->dir);
	(void) tli_rmtree(tmp);
	rv = tli_store_checkpoint(s->b->store, tmp, index);
	snprintf(name, cap, "%" PRIu64 "-%" PRIu64, s->self, *index);
	snprintf(dir, sizeof(dir), "%s/%s", s->dir, name);
	if (rv == TL_OK) {
		struct stat sb;

		if (stat(dir, &sb) == 0) {
			/* the same index again (nothing applied since): the
			 * same store, kept as it is, for a node may be
			 * fetching it right now */
			(void) tli_rmtree(tmp);
		} else if (rename(tmp, dir) != 0 || fsync_path(s->dir) != 0) {
			rv = TL_EIO;
		}
	}
	if (rv != TL_OK) {
		tlb_log(TLB_ERROR, "R010", "cannot take a snapshot in %s: %s",
		    dir, tl_strerror(rv));
		(void) tli_rmtree(tmp);
	}
	pthread_mutex_unlock(&s->take_mtx);
	return rv;
}

int
tlc_snaps_take(tlc_snaps *s, uint64_t raft_index, struct raft_buffer *out)
{
	int64_t t0 = tli_mono_ms();
	char name[48];
	uint32_t nfiles = 0;
	uint64_t index = 0, bytes = 0;
	uint8_t *p = NULL;
	size_t len = 0;
	int rv;

	if (checkpoint(s, name, sizeof(name), &index) != TL_OK) {
		return RAFT_IOERR;
	}
	rv = manifest_of(
	    s, name, s->self, index, raft_malloc, &p, &len, &nfiles, &bytes);
	if (rv != TL_OK) {
		tlb_log(TLB_ERROR, "R010",
		    "cannot take a snapshot in %s/%s: %s", s->dir, name,
		    tl_strerror(rv));
		return rv == TL_ENOMEM ? RAFT_NOMEM : RAFT_IOERR;
	}
	if (s->b->conf.cluster_snapshot_max > 0 &&
	    bytes > (uint64_t) s->b->conf.cluster_snapshot_max) {
		char dir[700];

		tlb_log(TLB_ERROR, "R006",
		    "snapshot at index %llu refused: %llu bytes is over "
		    "cluster_snapshot_max (%lld); the Raft log is kept instead",
		    (unsigned long long) index, (unsigned long long) bytes,
		    (long long) s->b->conf.cluster_snapshot_max);
		raft_free(p);
		snprintf(dir, sizeof(dir), "%s/%s", s->dir, name);
		(void) tli_rmtree(dir);
		return RAFT_TOOBIG;
	}
	out->base = p;
	out->len = len;
	prune(s, false);
	tlb_log(TLB_INFO, "R004",
	    "snapshot taken at index %llu (the store at %llu): %s, %u files, "
	    "%llu bytes in %lld ms, kept on disk",
	    (unsigned long long) raft_index, (unsigned long long) index, name,
	    nfiles, (unsigned long long) bytes,
	    (long long) (tli_mono_ms() - t0));
	return 0;
}

/* ---- reading a manifest ---- */

bool
tlc_snaps_index(const void *p, size_t n, uint64_t *index)
{
	if (n < 16 ||
	    (memcmp(p, magic1, 8) != 0 && memcmp(p, magic2, 8) != 0)) {
		return false;
	}
	*index = tlc_get_u64((const uint8_t *) p + 8);
	return true;
}

/* Parse a format 2 manifest; m->files allocated. */
static int
parse(const uint8_t *p, size_t n, manifest *m)
{
	size_t off, nl;

	memset(m, 0, sizeof(*m));
	if (n < 32 || memcmp(p, magic2, 8) != 0) {
		return TL_EFORMAT;
	}
	m->index = tlc_get_u64(p + 8);
	m->taker = tlc_get_u64(p + 16);
	nl = tlc_get_u32(p + 24);
	if (nl >= sizeof(m->name) || n - 28 < nl + 4) {
		return TL_EFORMAT;
	}
	memcpy(m->name, p + 28, nl);
	m->name[nl] = '\0';
	off = 28 + nl;
	m->nfiles = tlc_get_u32(p + off);
	off += 4;
	if (!name_ok(m->name, &(uint64_t){0}) || m->nfiles > 1u << 20 ||
	    (m->files = calloc(m->nfiles + 1, sizeof(*m->files))) == NULL) {
		return TL_EFORMAT;
	}
	for (uint32_t i = 0; i < m->nfiles; i++) {
		snap_file *f = &m->files[i];

		if (n - off < 4 || (nl = tlc_get_u32(p + off)) == 0 ||
		    nl >= sizeof(f->name) || n - off - 4 < nl + 8) {
			return TL_EFORMAT;
		}
		memcpy(f->name, p + off + 4, nl);
		f->name[nl] = '\0';
		f->size = tlc_get_u64(p + off + 4 + nl);
		off += 4 + nl + 8;
		if (!file_ok(f->name)) {
			return TL_EFORMAT;
		}
		m->bytes += f->size;
	}
	return off == n ? TL_OK : TL_EFORMAT;
}

/* ---- fetching ---- */

/* Whether dir holds every file of m at its size. */
static bool
complete(const char *dir, const manifest *m)
{
	for (uint32_t i = 0; i < m->nfiles; i++) {
		char path[1024];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, m->files[i].name);
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
		    (uint64_t) st.st_size != m->files[i].size) {
			return false;
		}
	}
	return true;
}

/* One request and its reply; why set on failure. */
static int
call(nng_aio *aio, nng_stream *st, tli_buf *b, uint32_t reqid, uint8_t *reply,
    size_t cap, tlp_r *r, const char **why)
{
	tlp_str detail;
	size_t nf = 0;
	int err = -1;

	if (tlp_frame_end(b, 0) != TL_OK ||
	    tlc_peer_call(aio, st, b, reqid, reply, cap, r) != 0) {
		*why = "no answer";
		return -1;
	}
	if (tlp_dec_reply_head(r, &err, &detail, &nf) != TL_OK) {
		*why = "a malformed answer";
		return -1;
	}
	if (err != TL_OK) {
		*why = tl_strerror(err);
		return -1;
	}
	return 0;
}

/* A session with another node, HELLO said: the stream, its aio, the
 * request buffer and room for a reply (a part of a file). */
typedef struct peer_sess {
	nng_aio *aio;
	nng_stream *st;
	uint32_t reqid;
	tli_buf b;
	uint8_t *reply;
	size_t cap;
} peer_sess;

static void
sess_close(peer_sess *x)
{
	tli_buf_fini(&x->b);
	tlc_peer_close(&x->st);
	nng_aio_free(x->aio);
	free(x->reply);
	memset(x, 0, sizeof(*x));
}

static int
sess_open(tlc_snaps *s, peer_sess *x, const char *url, const char **why)
{
	tlp_r r;

	memset(x, 0, sizeof(*x));
	tli_buf_init(&x->b);
	x->cap = TLP_SNAP_PART + 4096;
	*why = "out of memory";
	if ((x->reply = malloc(x->cap)) == NULL ||
	    nng_aio_alloc(&x->aio, NULL, NULL) != 0) {
		sess_close(x);
		return -1;
	}
	nng_aio_set_timeout(x->aio, FETCH_IO_MS);
	if (tlc_peer_dial(x->aio, url, &x->st) != 0) {
		*why = "cannot connect";
		sess_close(x);
		return -1;
	}
	tlc_peer_hello(
	    &x->b, s->b, ++x->reqid, "snapshot", tlb_clock_now_us() / 1000);
	if (call(x->aio, x->st, &x->b, x->reqid, x->reply, x->cap, &r, why) !=
	    0) {
		sess_close(x);
		return -1;
	}
	return 0;
}

/* Fetch file f of m from the session into dir. */
static int
fetch_file(tlc_snaps *s, peer_sess *x, const manifest *m, const snap_file *f,
    const char *dir, const char **why)
{
	char path[1024];
	uint64_t off = 0;
	int fd, rv = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, f->name);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) <
	    0) {
		*why = strerror(errno);
		return -1;
	}
	while (rv == 0 && off < f->size) {
		tlp_snap_read q = {{m->name, strlen(m->name)},
		    {f->name, strlen(f->name)}, off, TLP_SNAP_PART};
		tlp_snap_chunk c;
		tlp_w w;
		tlp_r r;

		x->b.len = 0;
		tlp_frame_begin(&x->b, &w, TLP_OP_SNAPSHOT_READ, 0, ++x->reqid);
		tlp_enc_snap_read(&w, &q);
		if ((rv = call(x->aio, x->st, &x->b, x->reqid, x->reply, x->cap,
		         &r, why)) != 0) {
			break;
		}
		if (tlp_dec_snap_chunk(&r, &c) != TL_OK || c.size != f->size ||
		    c.data_len == 0 || c.data_len > f->size - off) {
			*why = "a part that does not fit the file";
			rv = -1;
		} else if (write_all(fd, c.data, c.data_len) != 0) {
			*why = strerror(errno);
			rv = -1;
		} else {
			off += c.data_len;
			s->fetched_bytes += c.data_len;
		}
	}
	if (rv == 0 && fsync(fd) != 0) {
		*why = strerror(errno);
		rv = -1;
	}
	close(fd);
	return rv;
}

/* Fetch every file of m from url into dir. */
static int
fetch_from(tlc_snaps *s, const char *url, const manifest *m, const char *dir,
    const char **why)
{
	peer_sess x;
	int rv = 0;

	if (sess_open(s, &x, url, why) != 0) {
		return -1;
	}
	for (uint32_t i = 0; rv == 0 && i < m->nfiles; i++) {
		rv = fetch_file(s, &x, m, &m->files[i], dir, why);
	}
	sess_close(&x);
	return rv;
}

/* Fetch m's files from url into s->dir/NAME (by way of NAME.part). */
static int
fetch_into(tlc_snaps *s, const char *url, const manifest *m, const char **why)
{
	char dir[700], part[720];

	snprintf(dir, sizeof(dir), "%s/%s", s->dir, m->name);
	snprintf(part, sizeof(part), "%s.part", dir);
	(void) tli_rmtree(part);
	if (mkdir(part, 0755) != 0) {
		*why = strerror(errno);
		return -1;
	}
	if (fetch_from(s, url, m, part, why) == 0 && complete(part, m) &&
	    fsync_path(part) == 0) {
		(void) tli_rmtree(dir);
		if (rename(part, dir) == 0 && fsync_path(s->dir) == 0) {
			return 0;
		}
		*why = strerror(errno);
	}
	(void) tli_rmtree(part);
	return -1;
}

/* Ask url for the manifest of a snapshot at store index min or later
 * (SNAPSHOT_LATEST) into *m (m->files allocated). */
static int
latest_from(
    tlc_snaps *s, const char *url, uint64_t min, manifest *m, const char **why)
{
	peer_sess x;
	tlp_snap_chunk c;
	tlp_w w;
	tlp_r r;
	int rv = -1;

	memset(m, 0, sizeof(*m));
	if (sess_open(s, &x, url, why) != 0) {
		return -1;
	}
	x.b.len = 0;
	tlp_frame_begin(&x.b, &w, TLP_OP_SNAPSHOT_LATEST, 0, ++x.reqid);
	tlp_enc_snap_latest(&w, &(tlp_snap_latest){min});
	if (call(x.aio, x.st, &x.b, x.reqid, x.reply, x.cap, &r, why) != 0) {
		/* why set */
	} else if (tlp_dec_snap_chunk(&r, &c) != TL_OK ||
	    parse(c.data, c.data_len, m) != TL_OK || m->index < min) {
		*why = "a malformed manifest";
		free(m->files);
		m->files = NULL;
	} else {
		rv = 0;
	}
	sess_close(&x);
	return rv;
}

/* Make s->dir/NAME hold m's files: already there, or fetched from the
 * sources (the taker first) into NAME.part, then renamed. When no node
 * keeps it (its taker died, or removed it since), a snapshot at the same
 * store index or later does as well: *m becomes the first such one a
 * node sends (SNAPSHOT_LATEST; the leader always has or makes one). */
static int
obtain(tlc_snaps *s, manifest *m, const tlc_snap_source *src, int nsrc,
    uint64_t *from)
{
	char dir[700];

	snprintf(dir, sizeof(dir), "%s/%s", s->dir, m->name);
	*from = s->self;
	if (complete(dir, m)) {
		return TL_OK;
	}
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < nsrc; i++) {
			const char *why = "";

			/* the taker on the first pass, the others after */
			if ((src[i].id == m->taker) != (pass == 0) ||
			    src[i].id == s->self || src[i].url[0] == '\0') {
				continue;
			}
			if (fetch_into(s, src[i].url, m, &why) == 0) {
				*from = src[i].id;
				return TL_OK;
			}
			tlb_log(TLB_WARN, "R023",
			    "cannot fetch snapshot %s from node %llu (%s): %s",
			    m->name, (unsigned long long) src[i].id, src[i].url,
			    why);
		}
	}
	for (int i = 0; i < nsrc; i++) {
		const char *why = "";
		manifest m2;

		if (src[i].id == s->self || src[i].url[0] == '\0') {
			continue;
		}
		if (latest_from(s, src[i].url, m->index, &m2, &why) != 0) {
			tlb_log(TLB_WARN, "R023",
			    "node %llu (%s) has no snapshot at index %llu or "
			    "later to send: %s",
			    (unsigned long long) src[i].id, src[i].url,
			    (unsigned long long) m->index, why);
			continue;
		}
		snprintf(dir, sizeof(dir), "%s/%s", s->dir, m2.name);
		if (complete(dir, &m2) ||
		    fetch_into(s, src[i].url, &m2, &why) == 0) {
			tlb_log(TLB_WARN, "R023",
			    "no node could send snapshot %s: installing %s "
			    "(store index %llu) from node %llu instead",
			    m->name, m2.name, (unsigned long long) m2.index,
			    (unsigned long long) src[i].id);
			free(m->files);
			*m = m2;
			*from = src[i].id;
			return TL_OK;
		}
		tlb_log(TLB_WARN, "R023",
		    "cannot fetch snapshot %s from node %llu (%s): %s", m2.name,
		    (unsigned long long) src[i].id, src[i].url, why);
		free(m2.files);
	}
	return TL_ENOTFOUND;
}

/* The store-to-be: the table files linked (never changed once written:
 * the kept snapshot and the store share them), the rest copied. */
static int
stage(tlc_snaps *s, const manifest *m)
{
	(void) tli_rmtree(s->restore_dir);
	if (mkdir(s->restore_dir, 0755) != 0) {
		return -1;
	}
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const char *f = m->files[i].name;
		size_t fl = strlen(f);
		char from[1024], to[1024];

		snprintf(from, sizeof(from), "%s/%s/%s", s->dir, m->name, f);
		snprintf(to, sizeof(to), "%s/%s", s->restore_dir, f);
		if (fl > 4 && strcmp(f + fl - 4, ".sst") == 0
		        ? link(from, to) != 0
		        : copy_file(from, to) != 0) {
			return -1;
		}
	}
	return fsync_path(s->restore_dir);
}

/* ---- format 1: the files inside the buffer ---- */

static int
write_whole(const char *path, const uint8_t *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int rv;

	if (fd < 0) {
		return -1;
	}
	rv = write_all(fd, p, n);
	if (rv == 0) {
		rv = fsync(fd);
	}
	if (close(fd) != 0) {
		rv = -1;
	}
	return rv;
}

static int
unpack1(tlc_snaps *s, const uint8_t *p, size_t n)
{
	uint32_t nfiles;
	size_t off = 20;

	if (n < 20 || memcmp(p, magic1, 8) != 0) {
		return TL_EFORMAT;
	}
	nfiles = tlc_get_u32(p + 16);
	(void) tli_rmtree(s->restore_dir);
	if (mkdir(s->restore_dir, 0755) != 0) {
		return TL_EIO;
	}
	for (uint32_t i = 0; i < nfiles; i++) {
		char name[256], path[1024];
		uint32_t nl;
		uint64_t size;

		if (n - off < 4 || (nl = tlc_get_u32(p + off)) == 0 ||
		    nl >= sizeof(name) || n - off - 4 < (size_t) nl + 8) {
			return TL_EFORMAT;
		}
		memcpy(name, p + off + 4, nl);
		name[nl] = '\0';
		size = tlc_get_u64(p + off + 4 + nl);
		off += 4 + nl + 8;
		if (!file_ok(name) || size > n - off) {
			return TL_EFORMAT;
		}
		snprintf(path, sizeof(path), "%s/%s", s->restore_dir, name);
		if (write_whole(path, p + off, (size_t) size) != 0) {
			return TL_EIO;
		}
		off += (size_t) size;
	}
	return off == n ? TL_OK : TL_EFORMAT;
}

/* ---- installing ---- */

int
tlc_snaps_install(
    tlc_snaps *s, const void *p, size_t n, const tlc_snap_source *src, int nsrc)
{
	int64_t t0 = tli_mono_ms();
	uint64_t from = s->self;
	manifest m;
	int rv;

	s->fetched_bytes = 0;
	if (n >= 8 && memcmp(p, magic1, 8) == 0) {
		memset(&m, 0, sizeof(m));
		snprintf(m.name, sizeof(m.name), "(format 1)");
		m.bytes = n;
		rv = unpack1(s, p, n);
	} else if ((rv = parse(p, n, &m)) == TL_OK &&
	    (rv = obtain(s, &m, src, nsrc, &from)) == TL_OK &&
	    stage(s, &m) != 0) {
		rv = TL_EIO;
	}
	if (rv == TL_OK) {
		rv = tli_store_restore(s->b->store, s->restore_dir);
	}
	if (rv != TL_OK) {
		tlb_log(TLB_ERROR, "R009",
		    "cannot install the snapshot %s in %s: %s (%s)", m.name,
		    s->restore_dir, tl_strerror(rv),
		    rv == TL_ENOTFOUND ? "no node could send its files"
		                       : tli_store_last_error(s->b->store));
	} else {
		tlb_log(TLB_INFO, "R005",
		    "snapshot installed: %s, %llu bytes, %llu fetched from "
		    "node %llu, in %lld ms",
		    m.name, (unsigned long long) m.bytes,
		    (unsigned long long) s->fetched_bytes,
		    (unsigned long long) from,
		    (long long) (tli_mono_ms() - t0));
		prune(s, false);
	}
	(void) tli_rmtree(s->restore_dir);
	free(m.files);
	return rv;
}

/* ---- serving ---- */

int
tlc_snaps_latest(tlc_snaps *s, uint64_t min, tli_buf *out)
{
	char best[256] = "";
	uint64_t best_ix = 0, taker = 0, bytes = 0;
	uint32_t nfiles = 0;
	uint8_t *p = NULL;
	size_t len = 0;
	DIR *d = opendir(s->dir);
	struct dirent *e;
	bool taken = false;
	int rv;

	if (d == NULL) {
		return TL_EIO;
	}
	while ((e = readdir(d)) != NULL) {
		uint64_t ix;

		if (name_ok(e->d_name, &ix) && ix >= best_ix) {
			best_ix = ix;
			snprintf(best, sizeof(best), "%s", e->d_name);
		}
	}
	closedir(d);
	if (best[0] == '\0' || best_ix < min) {
		/* none kept that far: a new one, if the store is there */
		if (tli_store_applied_index(s->b->store) < min) {
			return TL_ENOTFOUND;
		}
		if ((rv = checkpoint(s, best, sizeof(best), &best_ix)) !=
		    TL_OK) {
			return rv;
		}
		tlb_log(TLB_INFO, "R004",
		    "snapshot %s taken for a node that asked for one at "
		    "index %llu or later",
		    best, (unsigned long long) min);
		taken = true;
	}
	served_now(s, best); /* kept while the node fetches it */
	if (taken) {
		prune(s, false); /* as after any snapshot taken */
	}
	taker = strtoull(best, NULL, 10);
	if ((rv = manifest_of(s, best, taker, best_ix, malloc, &p, &len,
	         &nfiles, &bytes)) != TL_OK) {
		return rv;
	}
	rv = tli_buf_append(out, p, len);
	free(p);
	return rv;
}

int
tlc_snaps_read(tlc_snaps *s, const char *name, const char *file,
    uint64_t offset, size_t max, tli_buf *out, uint64_t *size)
{
	char path[1024];
	struct stat st;
	uint64_t ix;
	size_t want;
	ssize_t k;
	int fd;

	if (!name_ok(name, &ix) || !file_ok(file)) {
		return TL_EINVAL;
	}
	snprintf(path, sizeof(path), "%s/%s/%s", s->dir, name, file);
	served_now(s, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		return errno == ENOENT ? TL_ENOTFOUND : TL_EIO;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return TL_ENOTFOUND;
	}
	*size = (uint64_t) st.st_size;
	want = offset >= *size
	    ? 0
	    : (size_t) (*size - offset < max ? *size - offset : max);
	if (want == 0) {
		close(fd);
		return TL_OK;
	}
	if (tli_buf_reserve(out, want) != TL_OK) {
		close(fd);
		return TL_ENOMEM;
	}
	while (
	    (k = pread(fd, out->data + out->len, want, (off_t) offset)) < 0 &&
	    errno == EINTR) {
	}
	close(fd);
	if (k < 0) {
		return TL_EIO;
	}
	out->len += (size_t) k;
	return TL_OK;
}
