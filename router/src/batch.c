/* batch.c - the batch create engine (batch.h has the state diagram). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/assert.h"
#include "fr/log.h"
#include "fr/util.h"
#include "batch.h"

#define NAME_CAP 80

static const char *const state_names[] = {"planned",      "running",   "committing",
                                          "rolling_back", "committed", "rolled_back"};

const char *batch_state_name(enum batch_state s) {
  return state_names[s];
}

/* The transitions of the diagram in batch.h; anything else is a bug. */
static int transition_ok(enum batch_state from, enum batch_state to) {
  switch (from) {
  case BATCH_PLANNED:
    return to == BATCH_RUNNING || to == BATCH_ROLLING_BACK;
  case BATCH_RUNNING:
    return to == BATCH_COMMITTING || to == BATCH_ROLLING_BACK;
  case BATCH_COMMITTING:
    return to == BATCH_COMMITTED || to == BATCH_RUNNING || to == BATCH_ROLLING_BACK;
  case BATCH_ROLLING_BACK:
    return to == BATCH_ROLLED_BACK;
  case BATCH_COMMITTED:
  case BATCH_ROLLED_BACK:
    return 0; /* final */
  }
  return 0;
}

static void batch_set_state(struct batch *b, enum batch_state s) {
  FR_DEBUG("batch", "%s %s (%s): %s -> %s", b->name, b->id, b->spec.request_id ? b->spec.request_id : "-",
           state_names[b->state], state_names[s]);
  FR_ASSERT(transition_ok(b->state, s));
  b->state = s;
}

struct batch *batch_new(const struct fr_sandbox_spec *spec, const char *name, int n, int partial_ok,
                        int max_cands, const struct batch_hooks *hooks, void *arg) {
  struct batch *b = calloc(1, sizeof(*b));
  int i;

  if (b == NULL || n < 1)
    goto fail;
  b->items = calloc((size_t)n, sizeof(*b->items));
  b->cands = calloc(max_cands > 0 ? (size_t)max_cands : 1, sizeof(*b->cands));
  if (b->items == NULL || b->cands == NULL)
    goto fail;
  b->state = BATCH_PLANNED;
  b->spec = *spec;
  fr_random_name_suffix(b->id, BATCH_ID_LEN);
  b->spec.batch = b->id;
  b->name = name;
  b->n = n;
  b->numbered = n > 1;
  b->partial_ok = partial_ok;
  b->hooks = hooks;
  b->arg = arg;
  for (i = 0; i < n; i++) {
    b->items[i].index = i + 1;
    b->items[i].cand = -1;
  }
  return b;
fail:
  if (b != NULL) {
    free(b->items);
    free(b->cands);
  }
  free(b);
  return NULL;
}

void batch_add_cand(struct batch *b, struct fr_adapter *a, int64_t budget, int64_t warm) {
  struct batch_cand *cd = &b->cands[b->ncands++];

  if (warm > budget)
    warm = budget;
  if (warm < 0 || b->spec.pool == NULL)
    warm = 0;
  cd->a = a;
  cd->budget = budget;
  cd->reserved_warm = warm;
  cd->reserved = budget - warm;
  if (cd->reserved > 0)
    fr_adapter_reserve(a, cd->reserved);
  if (cd->reserved_warm > 0)
    fr_adapter_reserve_warm(a, b->spec.pool, cd->reserved_warm);
}

/* Gives back one reservation of <cd> for a create that started (the
 * adapter counts it in flight itself), or all of them (<all>). */
static void unreserve(struct batch *b, struct batch_cand *cd, int all) {
  int64_t w = all ? cd->reserved_warm : cd->reserved_warm > 0;
  int64_t c = all ? cd->reserved : (w == 0 && cd->reserved > 0);

  if (w > 0) {
    cd->reserved_warm -= w;
    fr_adapter_reserve_warm(cd->a, b->spec.pool, -w);
  }
  if (c > 0) {
    cd->reserved -= c;
    fr_adapter_reserve(cd->a, -c);
  }
}

void batch_drop_cand(struct batch *b, int k, const char *reason) {
  struct batch_cand *cd = &b->cands[k];

  cd->full = 1;
  snprintf(cd->reason, sizeof(cd->reason), "unavailable: %s", reason);
  unreserve(b, cd, 1);
}

void batch_free(struct batch *b) {
  int i;

  if (b == NULL)
    return;
  /* Whatever the plan reserved and never started goes back. */
  for (i = 0; i < b->ncands; i++) {
    unreserve(b, &b->cands[i], 1);
    if (b->cands[i].held)
      fr_adapter_batch_hold(b->cands[i].a, b->id, 0);
  }
  for (i = 0; i < b->n; i++)
    if (b->items[i].user != NULL && b->hooks->item_free != NULL)
      b->hooks->item_free(b->items[i].user);
  free(b->items);
  free(b->cands);
  free(b);
}

int batch_created(const struct batch *b) {
  int i, n = 0;

  for (i = 0; i < b->n; i++)
    n += b->items[i].ok;
  return n;
}

static void pump(struct batch *b);

static void on_rollback(int status, const char *message, void *arg) {
  struct batch *b = arg;

  (void)status;
  (void)message;
  if (--b->deletes_pending > 0)
    return;
  batch_set_state(b, BATCH_ROLLED_BACK);
  b->hooks->done(b, b->arg);
}

/* Deletes everything this batch made. */
static void roll_back(struct batch *b) {
  int i;

  batch_set_state(b, BATCH_ROLLING_BACK);
  b->deletes_pending = 1; /* a guard, so deletes answering early cannot finish it */
  for (i = 0; i < b->n; i++) {
    struct batch_item *it = &b->items[i];
    if (!it->ok)
      continue;
    b->deletes_pending++;
    if (fr_adapter_sandbox_delete(b->cands[it->cand].a, it->pod, b->spec.request_id, on_rollback, b) != 0)
      b->deletes_pending--;
  }
  on_rollback(0, NULL, b);
}

/* Candidate <k> could not take its commit marker: it gets no more of the
 * batch, the pods it made are deleted (should that fail too, any router
 * reaps them as uncommitted) and its items go back to be placed
 * elsewhere. */
static void uncommit_cand(struct batch *b, int k) {
  struct batch_cand *cd = &b->cands[k];
  int i;

  cd->full = 1;
  cd->commit_failed = 0;
  for (i = 0; i < b->n; i++) {
    struct batch_item *it = &b->items[i];
    if (!it->ok || it->cand != k)
      continue;
    fr_adapter_sandbox_delete(cd->a, it->pod, b->spec.request_id, NULL, NULL);
    if (it->user != NULL && b->hooks->item_free != NULL)
      b->hooks->item_free(it->user);
    it->user = NULL;
    it->ok = it->done = it->warm = 0;
    it->pod[0] = '\0';
    it->cand = -1;
    if ((int)(it - b->items) < b->next)
      b->next = (int)(it - b->items);
  }
  cd->created = cd->warm = 0;
}

/* The batch and the candidate a commit marker is for. */
struct commit_ref {
  struct batch *b;
  int k;
};

/* One marker write less to wait for; after the last, the batch commits,
 * or places elsewhere what the clusters that failed theirs had made. */
static void commit_step(struct batch *b) {
  int k, failed = 0;

  if (--b->commits_pending > 0)
    return;
  /* Markers written but the client gone: it cannot learn the ids. */
  if (!b->hooks->wanted(b->arg)) {
    roll_back(b);
    return;
  }
  for (k = 0; k < b->ncands; k++)
    if (b->cands[k].commit_failed) {
      uncommit_cand(b, k);
      failed = 1;
    }
  if (failed) {
    batch_set_state(b, BATCH_RUNNING);
    pump(b);
    return;
  }
  batch_set_state(b, BATCH_COMMITTED);
  b->hooks->done(b, b->arg);
}

static void on_committed(int status, const char *message, void *arg) {
  struct commit_ref *ref = arg;
  struct batch *b = ref->b;
  struct batch_cand *cd = &b->cands[ref->k];

  free(ref);
  if (status >= 200 && status < 300) {
    cd->committed = 1;
  } else {
    cd->commit_failed = 1;
    snprintf(cd->reason, sizeof(cd->reason), "unavailable: commit marker: %s",
             message != NULL && *message ? message : "not written");
    if (b->commit_error[0] == '\0')
      snprintf(b->commit_error, sizeof(b->commit_error), "%s: %s", fr_adapter_name(cd->a),
               message != NULL && *message ? message : "a commit marker could not be written");
  }
  commit_step(b);
}

/* Writes the commit marker on every cluster that got pods and has none
 * yet; the batch commits once all are written (commit_step). */
static void commit(struct batch *b) {
  int64_t expires = fr_wall_ms() / 1000 + (b->spec.lifetime_s > 0 ? b->spec.lifetime_s : 0);
  struct commit_ref *ref;
  int i;

  batch_set_state(b, BATCH_COMMITTING);
  b->commits_pending = 1; /* a guard, as in roll_back() */
  for (i = 0; i < b->ncands; i++) {
    struct batch_cand *cd = &b->cands[i];
    if (cd->created == 0 || cd->committed)
      continue;
    if ((ref = malloc(sizeof(*ref))) == NULL) {
      cd->commit_failed = 1;
      continue;
    }
    ref->b = b;
    ref->k = i;
    b->commits_pending++;
    if (fr_adapter_batch_commit(cd->a, b->id, expires, on_committed, ref) != 0)
      on_committed(0, "cannot send a commit marker", ref);
  }
  commit_step(b);
}

/* Every item is settled: commit, or delete everything this batch made. */
static void settle(struct batch *b) {
  int created = batch_created(b);

  if (b->hooks->wanted(b->arg) && (created == b->n || (b->partial_ok && created > 0)))
    commit(b);
  else
    roll_back(b);
}

static int is_spill(enum fr_sandbox_err e) {
  return e == FR_SB_NO_ROOM || e == FR_SB_UNAVAILABLE || e == FR_SB_TIMEOUT;
}

/* The batch of an item: each create carries a small record naming both,
 * since an item alone does not know its batch. */
struct create_ref {
  struct batch *b;
  struct batch_item *it;
};

static void on_create(const struct fr_sandbox_result *res, void *arg) {
  struct create_ref *ref = arg;
  struct batch *b = ref->b;
  struct batch_item *it = ref->it;
  struct batch_cand *cd = &b->cands[it->cand];

  free(ref);
  b->hooks->item_done(b, it, cd, res, b->arg);
  b->pending--;
  cd->inflight--;
  if (res->err == FR_SB_OK) {
    it->done = it->ok = 1;
    it->warm = res->warm;
    snprintf(it->pod, sizeof(it->pod), "%s", res->pod != NULL ? res->pod->name : "");
    cd->created++;
    cd->warm += res->warm;
  } else if (is_spill(res->err)) {
    /* An explicit signal: this cluster gets no more of the batch, and the
     * item goes back to be placed elsewhere. */
    cd->full = 1;
    snprintf(cd->reason, sizeof(cd->reason), "%s: %s",
             res->err == FR_SB_NO_ROOM ? "no room" : res->err == FR_SB_TIMEOUT ? "too slow" : "unavailable",
             res->message ? res->message : "");
    it->cand = -1;
    it->spilled = 1;
    if ((int)(it - b->items) < b->next)
      b->next = (int)(it - b->items);
  } else {
    it->done = 1;
    b->failed++;
    snprintf(cd->reason, sizeof(cd->reason), "failed: %s", res->message ? res->message : "");
  }
  pump(b);
}

static int pick_cand(struct batch *b, int within_budget) {
  int k;

  for (k = 0; k < b->ncands; k++) {
    struct batch_cand *cd = &b->cands[k];
    if (cd->full || cd->inflight >= BATCH_PER_CLUSTER_INFLIGHT)
      continue;
    if (within_budget && cd->created + cd->inflight >= cd->budget)
      continue;
    return k;
  }
  return -1;
}

/* The cluster for the next item, or -1 to wait (a create in flight will
 * free a slot or close a cluster), or -2 when nothing can take it. */
static int choose(struct batch *b) {
  int k = pick_cand(b, 1), busy_with_budget = 0, waiting = 0;

  if (k >= 0)
    return k;
  /* Follow the plan: while a cluster with planned budget left is only
   * busy (at its in-flight limit), wait for it rather than spill early.
   * Past every budget (the plan under-estimated), any cluster not yet full
   * may take more: the estimate is a preference, the cluster itself says
   * when it is full. */
  for (k = 0; k < b->ncands; k++)
    busy_with_budget |= !b->cands[k].full && b->cands[k].created + b->cands[k].inflight < b->cands[k].budget;
  if (busy_with_budget)
    return -1;
  k = pick_cand(b, 0);
  if (k >= 0)
    return k;
  for (k = 0; k < b->ncands; k++)
    waiting |= !b->cands[k].full && b->cands[k].inflight > 0;
  return waiting ? -1 : -2;
}

/* Starts item <it> on candidate <k>; 0, or -1 when the adapter refused
 * to start it (the candidate is then marked full). */
static int start_item(struct batch *b, struct batch_item *it, int k) {
  struct fr_sandbox_spec spec = b->spec;
  struct batch_cand *cd = &b->cands[k];
  struct create_ref *ref = malloc(sizeof(*ref));
  char name[NAME_CAP];

  if (b->numbered)
    snprintf(name, sizeof(name), "%s-%04d", b->name, it->index);
  else
    snprintf(name, sizeof(name), "%s", b->name);
  spec.name = name;
  spec.secrets = cd->secrets;
  spec.spilled = it->spilled || cd->not_first;
  if (ref == NULL || fr_adapter_sandbox_create(cd->a, &spec, on_create, ref) != 0) {
    free(ref);
    cd->full = 1;
    snprintf(cd->reason, sizeof(cd->reason), "unavailable: cannot start a create");
    return -1;
  }
  ref->b = b;
  ref->it = it;
  it->cand = k;
  it->started_ns = uv_hrtime();
  if (!cd->held) {
    fr_adapter_batch_hold(cd->a, b->id, 1);
    cd->held = 1;
  }
  cd->inflight++;
  b->pending++;
  unreserve(b, cd, 0);
  return 0;
}

/* Places and starts as many items as the candidates can take now; settles
 * the batch once nothing is in flight and every item is settled. */
static void pump(struct batch *b) {
  int i, k, started = 1;

  while (started) {
    started = 0;
    for (i = b->next; i < b->n; i++) {
      struct batch_item *it = &b->items[i];
      if (it->done || it->cand >= 0)
        continue;
      k = choose(b);
      if (k == -2) {
        it->done = 1; /* nowhere left to go */
        continue;
      }
      if (k < 0)
        break;
      start_item(b, it, k);
      started = 1;
    }
    while (b->next < b->n && (b->items[b->next].done || b->items[b->next].cand >= 0))
      b->next++;
  }
  if (b->pending == 0)
    settle(b);
}

void batch_set_number(struct batch *b, int i, int number, int numbered) {
  FR_ASSERT(b->state == BATCH_PLANNED && i >= 0 && i < b->n && number > 0);
  b->items[i].index = number;
  b->numbered = numbered;
}

void batch_start(struct batch *b) {
  batch_set_state(b, BATCH_RUNNING);
  pump(b);
}
