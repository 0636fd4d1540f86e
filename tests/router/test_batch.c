/* test_batch.c - the batch create engine (router/src/batch.c) against a
 * fake adapter: the test plays every cluster, answering each create and
 * delete when it chooses (always from the test, never from inside the
 * call, as the real adapter answers from a later loop turn).
 *
 * Proves: spill to the next planned cluster on an explicit no-room signal;
 * all-or-nothing rollback; partial_ok; a batch nobody waits for rolls back;
 * the plan's reservations are handed back; the per-cluster in-flight
 * bound; the plan's budgets are followed before spilling; a batch whose
 * creates cannot even start ends at once; every create carries the batch's
 * id, which is held on each cluster used until the batch ends; the batch
 * commits only once every cluster that got pods took its commit marker;
 * a cluster that did not gets no more of it and its items are placed
 * elsewhere, and with nowhere left the batch rolls back.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

/* ------------------------------------------------------------ fake adapter */

struct fr_adapter {
  char name[32];
  int64_t reserved;
  int64_t warm_reserved;      /* of the one pool the tests use */
  int refuse;                 /* fr_adapter_sandbox_create returns -1 */
  int holds;                  /* fr_adapter_batch_hold balance */
  int commits;                /* commit markers asked for */
  int commit_status;          /* the answer to them (0: 201) */
  char batch[32];             /* the last batch id seen */
};

/* Commit markers are answered at once from inside the call unless
 * <defer_commits>: then the test answers them (answer_commits). The
 * engine must cope with both. */
static int defer_commits;
struct commit {
  struct fr_adapter *a;
  void (*cb)(int, const char *, void *);
  void *arg;
};
static struct commit commits[8];
static int ncommits;

struct call {
  struct fr_adapter *a;
  char name[80];              /* the sandbox name the create carried */
  fr_sandbox_cb cb;
  void *arg;
  int answered;
};

struct del {
  struct fr_adapter *a;
  char pod[64];
  void (*cb)(int, const char *, void *);
  void *arg;
  int answered;
};

static struct call calls[512];
static int ncalls;
static struct del dels[512];
static int ndels;

int fr_adapter_sandbox_create(struct fr_adapter *a, const struct fr_sandbox_spec *spec, fr_sandbox_cb cb,
                              void *arg) {
  struct call *c;

  if (a->refuse)
    return -1;
  ck_assert_int_lt(ncalls, 512);
  c = &calls[ncalls++];
  c->a = a;
  snprintf(c->name, sizeof(c->name), "%s", spec->name);
  ck_assert_ptr_nonnull(spec->batch);
  ck_assert_int_eq(strlen(spec->batch), BATCH_ID_LEN);
  snprintf(a->batch, sizeof(a->batch), "%s", spec->batch);
  c->cb = cb;
  c->arg = arg;
  c->answered = 0;
  return 0;
}

int fr_adapter_sandbox_delete(struct fr_adapter *a, const char *pod, const char *request_id,
                              void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct del *d = &dels[ndels++];

  (void)request_id;
  d->a = a;
  snprintf(d->pod, sizeof(d->pod), "%s", pod);
  d->cb = cb;
  d->arg = arg;
  d->answered = 0;
  return 0;
}

void fr_adapter_reserve(struct fr_adapter *a, int64_t delta) {
  a->reserved += delta;
  ck_assert_int_ge(a->reserved, 0);
}

void fr_adapter_reserve_warm(struct fr_adapter *a, const char *pool, int64_t delta) {
  ck_assert_str_eq(pool, "p");
  a->warm_reserved += delta;
  ck_assert_int_ge(a->warm_reserved, 0);
}

void fr_adapter_batch_hold(struct fr_adapter *a, const char *batch, int hold) {
  ck_assert_int_eq(strlen(batch), BATCH_ID_LEN);
  a->holds += hold ? 1 : -1;
  ck_assert_int_ge(a->holds, 0);
}

int fr_adapter_batch_commit(struct fr_adapter *a, const char *batch, int64_t expires_s,
                            void (*cb)(int status, const char *message, void *arg), void *arg) {
  ck_assert_str_eq(batch, a->batch);
  ck_assert_int_gt(expires_s, 0);
  a->commits++;
  if (defer_commits) {
    ck_assert_int_lt(ncommits, 8);
    commits[ncommits].a = a;
    commits[ncommits].cb = cb;
    commits[ncommits++].arg = arg;
    return 0;
  }
  cb(a->commit_status ? a->commit_status : 201, a->commit_status ? "refused" : "", arg);
  return 0;
}

static void answer_commits(void) {
  int i;

  for (i = 0; i < ncommits; i++)
    commits[i].cb(commits[i].a->commit_status ? commits[i].a->commit_status : 201,
                  commits[i].a->commit_status ? "marker refused" : "", commits[i].arg);
  ncommits = 0;
}

const char *fr_adapter_name(const struct fr_adapter *a) {
  return a->name;
}

/* Answers create <i> with <err>; on success the pod is named after the
 * sandbox. */
static void answer(int i, enum fr_sandbox_err err, int warm) {
  struct fr_sandbox_result r;
  struct fr_pod pod;
  char podname[96];

  ck_assert_int_lt(i, ncalls);
  ck_assert_int_eq(calls[i].answered, 0);
  calls[i].answered = 1;
  memset(&r, 0, sizeof(r));
  memset(&pod, 0, sizeof(pod));
  snprintf(podname, sizeof(podname), "pod-%s", calls[i].name);
  pod.name = podname;
  r.err = err;
  r.message = err == FR_SB_OK ? NULL : "test says so";
  r.pod = err == FR_SB_OK ? &pod : NULL;
  r.warm = warm;
  calls[i].cb(&r, calls[i].arg);
}

static void answer_deletes(void) {
  int i;

  for (i = 0; i < ndels; i++) {
    if (!dels[i].answered) {
      dels[i].answered = 1;
      if (dels[i].cb != NULL) /* may be NULL, as the adapter allows */
        dels[i].cb(200, "", dels[i].arg);
    }
  }
}

static int outstanding(const struct fr_adapter *a) {
  int i, n = 0;

  for (i = 0; i < ncalls; i++)
    n += !calls[i].answered && (a == NULL || calls[i].a == a);
  return n;
}

/* ------------------------------------------------------------ owner hooks */

struct owner {
  int items_seen, ok_seen;
  int wanted;
  int done_calls;
  enum batch_state final;
  int created_at_done;
  struct batch *b;
};

static void on_item_done(struct batch *b, struct batch_item *it, struct batch_cand *cd,
                         const struct fr_sandbox_result *res, void *arg) {
  struct owner *o = arg;

  (void)b;
  (void)cd;
  o->items_seen++;
  if (res->err == FR_SB_OK) {
    o->ok_seen++;
    it->user = strdup(res->pod->name); /* freed by item_free */
  }
}

static int on_wanted(void *arg) {
  return ((struct owner *)arg)->wanted;
}

static void on_done(struct batch *b, void *arg) {
  struct owner *o = arg;

  o->done_calls++;
  o->final = b->state;
  o->created_at_done = batch_created(b);
}

static const struct batch_hooks hooks = {on_item_done, on_wanted, on_done, free};

static struct fr_adapter ca, cb;

static struct batch *new_batch_pool(struct owner *o, int n, int partial_ok, const char *pool) {
  struct fr_sandbox_spec spec;
  struct batch *b;

  memset(&spec, 0, sizeof(spec));
  spec.pool = pool;
  spec.tenant = "t";
  spec.image = "img";
  spec.cpu_m = 1000;
  spec.mem_b = 1 << 30;
  spec.request_id = "rid";
  memset(o, 0, sizeof(*o));
  o->wanted = 1;
  b = batch_new(&spec, "run", n, partial_ok, 2, &hooks, o);
  ck_assert_ptr_nonnull(b);
  o->b = b;
  return b;
}

static struct batch *new_batch(struct owner *o, int n, int partial_ok) {
  return new_batch_pool(o, n, partial_ok, NULL);
}

static void setup(void) {
  memset(calls, 0, sizeof(calls));
  memset(dels, 0, sizeof(dels));
  ncalls = ndels = ncommits = 0;
  defer_commits = 0;
  memset(&ca, 0, sizeof(ca));
  memset(&cb, 0, sizeof(cb));
  snprintf(ca.name, sizeof(ca.name), "a");
  snprintf(cb.name, sizeof(cb.name), "b");
}

/* ------------------------------------------------------------ tests */

START_TEST(batch_no_room_spills_to_next_planned_cluster) {
  struct owner o;
  struct batch *b = new_batch(&o, 4, 0);
  int i;

  batch_add_cand(b, &ca, 4, 4);
  batch_add_cand(b, &cb, 4, 4);
  batch_start(b);
  ck_assert_int_eq(b->state, BATCH_RUNNING);
  /* The plan puts all four on a first. */
  ck_assert_int_eq(outstanding(&ca), 4);
  ck_assert_int_eq(outstanding(&cb), 0);
  ck_assert_str_eq(calls[0].name, "run-0001");
  ck_assert_str_eq(calls[3].name, "run-0004");
  answer(0, FR_SB_OK, 1);
  /* a says it is full: the item moves to b, and so does every later one. */
  answer(1, FR_SB_NO_ROOM, 0);
  ck_assert_int_eq(outstanding(&cb), 1);
  ck_assert_str_eq(calls[4].name, "run-0002");
  answer(2, FR_SB_OK, 0);   /* already on its way in a: still counts */
  answer(3, FR_SB_NO_ROOM, 0);
  ck_assert_int_eq(outstanding(&cb), 2);
  ck_assert_str_eq(calls[5].name, "run-0004");
  ck_assert_int_eq(o.done_calls, 0);
  answer(4, FR_SB_OK, 0);
  answer(5, FR_SB_OK, 0);
  ck_assert_int_eq(o.done_calls, 1);
  ck_assert_int_eq(o.final, BATCH_COMMITTED);
  ck_assert_int_eq(o.created_at_done, 4);
  ck_assert_int_eq(b->cands[0].created, 2);
  ck_assert_int_eq(b->cands[0].warm, 1);
  ck_assert_int_eq(b->cands[0].full, 1);
  ck_assert_ptr_nonnull(strstr(b->cands[0].reason, "no room"));
  ck_assert_int_eq(b->cands[1].created, 2);
  ck_assert_int_eq(ndels, 0);
  for (i = 0; i < 4; i++)
    ck_assert_int_eq(b->items[i].ok, 1);
  batch_free(b);
  /* Every reserved slot was either used by a started create or given back. */
  ck_assert_int_eq(ca.reserved, 0);
  ck_assert_int_eq(cb.reserved, 0);
}
END_TEST

START_TEST(batch_short_all_or_nothing_rolls_back_what_it_made) {
  struct owner o;
  struct batch *b = new_batch(&o, 3, 0);

  batch_add_cand(b, &ca, 3, 3);
  batch_start(b);
  answer(0, FR_SB_OK, 0);
  answer(1, FR_SB_FAILED, 0);
  answer(2, FR_SB_OK, 0);
  /* Short: the two it made are deleted before the owner hears. */
  ck_assert_int_eq(b->state, BATCH_ROLLING_BACK);
  ck_assert_int_eq(ndels, 2);
  ck_assert_str_eq(dels[0].pod, "pod-run-0001");
  ck_assert_str_eq(dels[1].pod, "pod-run-0003");
  ck_assert_int_eq(o.done_calls, 0);
  answer_deletes();
  ck_assert_int_eq(o.done_calls, 1);
  ck_assert_int_eq(o.final, BATCH_ROLLED_BACK);
  ck_assert_int_eq(b->failed, 1);
  batch_free(b);
  ck_assert_int_eq(ca.reserved, 0);
}
END_TEST

START_TEST(batch_short_partial_ok_commits_what_it_made) {
  struct owner o;
  struct batch *b = new_batch(&o, 3, 1);

  batch_add_cand(b, &ca, 3, 3);
  batch_start(b);
  answer(0, FR_SB_OK, 0);
  answer(1, FR_SB_NO_ROOM, 0); /* nowhere else to go */
  answer(2, FR_SB_OK, 0);
  ck_assert_int_eq(o.done_calls, 1);
  ck_assert_int_eq(o.final, BATCH_COMMITTED);
  ck_assert_int_eq(o.created_at_done, 2);
  ck_assert_int_eq(ndels, 0);
  ck_assert_int_eq(b->items[1].done, 1);
  ck_assert_int_eq(b->items[1].ok, 0);
  batch_free(b);
}
END_TEST

START_TEST(batch_client_gone_rolls_back_even_when_complete) {
  struct owner o;
  struct batch *b = new_batch(&o, 2, 1);

  batch_add_cand(b, &ca, 2, 2);
  batch_start(b);
  o.wanted = 0; /* the client went away mid-batch */
  answer(0, FR_SB_OK, 0);
  answer(1, FR_SB_OK, 0);
  ck_assert_int_eq(b->state, BATCH_ROLLING_BACK);
  ck_assert_int_eq(ndels, 2);
  answer_deletes();
  ck_assert_int_eq(o.final, BATCH_ROLLED_BACK);
  ck_assert_int_eq(o.done_calls, 1);
  batch_free(b);
}
END_TEST

START_TEST(batch_reservations_follow_started_creates_and_come_back) {
  struct owner o;
  struct batch *b = new_batch_pool(&o, 5, 1, "p");

  batch_add_cand(b, &ca, 5, 2); /* 2 of the 5 expected warm: 2 warm pods and 3 slots reserved */
  ck_assert_int_eq(ca.reserved, 3);
  ck_assert_int_eq(ca.warm_reserved, 2);
  batch_start(b);
  /* Each started create takes one reservation over (the adapter counts it
   * in flight itself), warm ones first. */
  ck_assert_int_eq(ca.reserved, 0);
  ck_assert_int_eq(ca.warm_reserved, 0);
  ck_assert_int_eq(outstanding(&ca), 5);
  batch_free(NULL);
  answer(0, FR_SB_OK, 1);
  answer(1, FR_SB_OK, 1);
  answer(2, FR_SB_OK, 0);
  answer(3, FR_SB_OK, 0);
  answer(4, FR_SB_OK, 0);
  ck_assert_int_eq(o.final, BATCH_COMMITTED);
  batch_free(b);

  /* A plan refused before it started gives everything back on free. */
  setup();
  b = new_batch_pool(&o, 7, 0, "p");
  batch_add_cand(b, &ca, 5, 1);
  batch_add_cand(b, &cb, 2, 9); /* more warm than the budget counts as the budget */
  ck_assert_int_eq(ca.reserved, 4);
  ck_assert_int_eq(ca.warm_reserved, 1);
  ck_assert_int_eq(cb.reserved, 0);
  ck_assert_int_eq(cb.warm_reserved, 2);
  batch_free(b);
  ck_assert_int_eq(ca.reserved + ca.warm_reserved, 0);
  ck_assert_int_eq(cb.reserved + cb.warm_reserved, 0);

  /* Partly started: the started creates' reservations went with them,
   * the rest come back on free. */
  setup();
  b = new_batch_pool(&o, 3, 1, "p");
  batch_add_cand(b, &ca, 3, 3);
  ca.refuse = 0;
  batch_start(b);
  ck_assert_int_eq(ca.warm_reserved, 0);
  answer(0, FR_SB_OK, 1);
  answer(1, FR_SB_OK, 1);
  answer(2, FR_SB_OK, 1);
  batch_free(b);
  ck_assert_int_eq(ca.reserved + ca.warm_reserved, 0);
}
END_TEST

START_TEST(batch_in_flight_bounded_per_cluster_and_budgets_followed) {
  struct owner o;
  struct batch *b = new_batch(&o, 50, 0);
  int i;

  batch_add_cand(b, &ca, 40, 40);
  batch_add_cand(b, &cb, 10, 10);
  batch_start(b);
  /* a takes BATCH_PER_CLUSTER_INFLIGHT at once, b its whole budget; the
   * rest waits for a (budget left, only busy) instead of spilling. */
  ck_assert_int_eq(outstanding(&ca), BATCH_PER_CLUSTER_INFLIGHT);
  ck_assert_int_eq(outstanding(&cb), 10);
  ck_assert_int_eq(ncalls, BATCH_PER_CLUSTER_INFLIGHT + 10);
  /* Answers from b do not pull a's share over. */
  for (i = BATCH_PER_CLUSTER_INFLIGHT; i < BATCH_PER_CLUSTER_INFLIGHT + 10; i++)
    answer(i, FR_SB_OK, 0);
  ck_assert_int_eq(outstanding(&cb), 0);
  ck_assert_int_eq(ncalls, BATCH_PER_CLUSTER_INFLIGHT + 10);
  /* Each answer from a frees a slot for the next item, on a. */
  answer(0, FR_SB_OK, 0);
  ck_assert_int_eq(ncalls, BATCH_PER_CLUSTER_INFLIGHT + 11);
  ck_assert_ptr_eq(calls[ncalls - 1].a, &ca);
  for (i = 1; i < ncalls; i++)
    if (!calls[i].answered)
      answer(i, FR_SB_OK, 0);
  for (i = 0; i < ncalls; i++)
    if (!calls[i].answered)
      answer(i, FR_SB_OK, 0);
  ck_assert_int_eq(ncalls, 50);
  ck_assert_int_eq(o.final, BATCH_COMMITTED);
  ck_assert_int_eq(b->cands[0].created, 40);
  ck_assert_int_eq(b->cands[1].created, 10);
  batch_free(b);
}
END_TEST

START_TEST(batch_no_create_startable_ends_at_once) {
  struct owner o;
  struct batch *b = new_batch(&o, 3, 0);

  ca.refuse = cb.refuse = 1;
  batch_add_cand(b, &ca, 2, 2);
  batch_add_cand(b, &cb, 1, 1);
  batch_start(b);
  ck_assert_int_eq(o.done_calls, 1);
  ck_assert_int_eq(o.final, BATCH_ROLLED_BACK);
  ck_assert_int_eq(o.created_at_done, 0);
  ck_assert_int_eq(ndels, 0);
  ck_assert_ptr_nonnull(strstr(b->cands[0].reason, "cannot start"));
  batch_free(b);
  ck_assert_int_eq(ca.reserved, 0);
  ck_assert_int_eq(cb.reserved, 0);
}
END_TEST

START_TEST(batch_commits_only_after_every_marker_and_lets_go_after) {
  struct owner o;
  struct batch *b = new_batch(&o, 2, 0);

  defer_commits = 1;
  batch_add_cand(b, &ca, 1, 0);
  batch_add_cand(b, &cb, 1, 0);
  batch_start(b);
  ck_assert_int_eq(ca.holds, 1);
  ck_assert_int_eq(cb.holds, 1);
  ck_assert_str_eq(ca.batch, b->id);
  ck_assert_str_eq(cb.batch, b->id);
  answer(0, FR_SB_OK, 0);
  answer(1, FR_SB_OK, 0);
  /* Made, but not answered before both markers are written. */
  ck_assert_int_eq(b->state, BATCH_COMMITTING);
  ck_assert_int_eq(ca.commits, 1);
  ck_assert_int_eq(cb.commits, 1);
  ck_assert_int_eq(o.done_calls, 0);
  answer_commits();
  ck_assert_int_eq(o.done_calls, 1);
  ck_assert_int_eq(o.final, BATCH_COMMITTED);
  ck_assert_int_eq(ndels, 0);
  batch_free(b);
  ck_assert_int_eq(ca.holds, 0);
  ck_assert_int_eq(cb.holds, 0);
}
END_TEST

/* A cluster that does not take the marker gets no more of the batch: its
 * pods are deleted and its items placed elsewhere, then committed there. */
START_TEST(batch_marker_refused_moves_that_clusters_items_elsewhere) {
  struct owner o;
  struct batch *b = new_batch(&o, 3, 0);
  int i;

  cb.commit_status = 503;
  batch_add_cand(b, &ca, 2, 0);
  batch_add_cand(b, &cb, 1, 0);
  batch_start(b);
  answer(0, FR_SB_OK, 0);
  answer(1, FR_SB_OK, 0);
  answer(2, FR_SB_OK, 0);
  ck_assert_int_eq(calls[2].a == &cb, 1);
  /* cb's marker refused: its pod deleted, its item started again on ca. */
  ck_assert_int_eq(b->state, BATCH_RUNNING);
  ck_assert_int_eq(ndels, 1);
  ck_assert_ptr_eq(dels[0].a, &cb);
  ck_assert_str_eq(dels[0].pod, "pod-run-0003");
  ck_assert_int_eq(ncalls, 4);
  ck_assert_ptr_eq(calls[3].a, &ca);
  ck_assert_str_eq(calls[3].name, "run-0003");
  answer(3, FR_SB_OK, 0);
  /* ca already holds its marker: nothing more to write. */
  ck_assert_int_eq(ca.commits, 1);
  ck_assert_int_eq(cb.commits, 1);
  ck_assert_int_eq(o.done_calls, 1);
  ck_assert_int_eq(o.final, BATCH_COMMITTED);
  ck_assert_int_eq(o.created_at_done, 3);
  for (i = 0; i < 3; i++)
    ck_assert_ptr_eq(b->cands[b->items[i].cand].a, &ca);
  answer_deletes();
  batch_free(b);
  ck_assert_int_eq(ca.holds, 0);
  ck_assert_int_eq(cb.holds, 0);
}
END_TEST

/* No cluster takes the marker: nothing is kept, and the answer says why. */
START_TEST(batch_marker_refused_everywhere_rolls_back_everything) {
  struct owner o;
  struct batch *b = new_batch(&o, 3, 0);

  ca.commit_status = 503;
  cb.commit_status = 503;
  batch_add_cand(b, &ca, 2, 0);
  batch_add_cand(b, &cb, 1, 0);
  batch_start(b);
  answer(0, FR_SB_OK, 0);
  answer(1, FR_SB_OK, 0);
  answer(2, FR_SB_OK, 0);
  /* Both clusters are closed for the batch: nothing left to place it on,
   * and what they made is being deleted (or is reaped, uncommitted). */
  ck_assert_int_eq(ncalls, 3);
  ck_assert_int_eq(ndels, 3);
  ck_assert_ptr_nonnull(strstr(b->commit_error, "refused"));
  ck_assert_int_eq(o.done_calls, 1);
  answer_deletes();
  ck_assert_int_eq(o.final, BATCH_ROLLED_BACK);
  batch_free(b);
  ck_assert_int_eq(ca.holds, 0);
  ck_assert_int_eq(cb.holds, 0);
}
END_TEST

START_TEST(batch_client_gone_while_committing_rolls_back) {
  struct owner o;
  struct batch *b = new_batch(&o, 1, 0);

  defer_commits = 1;
  batch_add_cand(b, &ca, 1, 0);
  batch_add_cand(b, &cb, 0, 0);
  batch_start(b);
  answer(0, FR_SB_OK, 0);
  ck_assert_int_eq(b->state, BATCH_COMMITTING);
  ck_assert_int_eq(cb.commits, 0); /* no pods there: no marker */
  o.wanted = 0;
  answer_commits();
  ck_assert_int_eq(b->state, BATCH_ROLLING_BACK);
  ck_assert_int_eq(ndels, 1);
  answer_deletes();
  ck_assert_int_eq(o.final, BATCH_ROLLED_BACK);
  batch_free(b);
}
END_TEST

START_TEST(batch_ids_differ_per_batch) {
  struct owner o1, o2;
  struct batch *b1 = new_batch(&o1, 1, 0), *b2 = new_batch(&o2, 1, 0);

  ck_assert_int_eq(strlen(b1->id), BATCH_ID_LEN);
  ck_assert_str_ne(b1->id, b2->id);
  ck_assert_str_eq(b1->spec.batch, b1->id);
  batch_free(b1);
  batch_free(b2);
}
END_TEST

int main(void) {
  Suite *s = suite_create("batch");
  TCase *tc = tcase_create("batch");
  SRunner *sr;
  int nf;

  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, batch_no_room_spills_to_next_planned_cluster);
  tcase_add_test(tc, batch_short_all_or_nothing_rolls_back_what_it_made);
  tcase_add_test(tc, batch_short_partial_ok_commits_what_it_made);
  tcase_add_test(tc, batch_client_gone_rolls_back_even_when_complete);
  tcase_add_test(tc, batch_reservations_follow_started_creates_and_come_back);
  tcase_add_test(tc, batch_in_flight_bounded_per_cluster_and_budgets_followed);
  tcase_add_test(tc, batch_no_create_startable_ends_at_once);
  tcase_add_test(tc, batch_commits_only_after_every_marker_and_lets_go_after);
  tcase_add_test(tc, batch_marker_refused_moves_that_clusters_items_elsewhere);
  tcase_add_test(tc, batch_marker_refused_everywhere_rolls_back_everything);
  tcase_add_test(tc, batch_client_gone_while_committing_rolls_back);
  tcase_add_test(tc, batch_ids_differ_per_batch);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf == 0 ? 0 : 1;
}
