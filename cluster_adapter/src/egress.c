/* egress.c - sandbox egress policies as NetworkPolicies in the sandbox
 * namespace (docs/architecture.md, "Sandbox egress").
 *
 * One NetworkPolicy per distinct policy, shared by every sandbox that has
 * it: fr-egress-<hash> (fr_egress_hash of the canonical policy), selecting
 * pods labelled fedrouter.io/egress=<hash>, egress only. A create with a
 * restricted policy first makes sure the object exists (egress_ensure),
 * then claims a warm pod or creates a cold one with that label, so a warm
 * pod serves any policy and stays warm.
 *
 * A write of the object (what egress_ensure sends) is a merge patch of
 * the whole spec and of annotation fedrouter.io/touched with a fresh
 * value, or a create when it is missing: every write changes the
 * object's resourceVersion. Deletion (egress_sweep, every router) is safe
 * with several routers because a router deletes a policy only when
 *   - its pod and policy caches are synced and healthy,
 *   - no sandbox pod in its cache carries the label, no create of its own
 *     is using the policy and it has not written it for a grace period,
 *   - and it has seen the policy unused at one and the same
 *     resourceVersion for that grace period,
 * and then with a resourceVersion precondition: a write by any router
 * since (a create about to label a pod with it) makes the delete fail
 * with 409. A router reuses its own write for later creates only within a
 * quarter of the grace period, so the pods those creates label show in
 * the other routers' caches long before their grace runs out (unless a
 * watch lags by most of it; the same bound the commit markers live with).
 * The grace period is the adapter's batch commit timeout (30 s default).
 * Should a policy still go missing while sandboxes carry its label (an
 * operator deleted it), the sweep re-creates it from the text it knows
 * (the object's annotation fedrouter.io/network, or its own write).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter_internal.h"
#include "fr/egress.h"
#include "fr/log.h"
#include "fr/util.h"
#include "upstream.h"

enum op_kind { OP_WRITE, OP_DELETE };
/* A write is a PATCH when the cache has the object, else a POST; a PATCH
 * meeting 404 (gone meanwhile) turns into a POST, a POST meeting 409
 * (someone made it meanwhile) into a PATCH, at most WRITE_TRIES in all. */
enum op_step { STEP_PATCH, STEP_POST };
#define WRITE_TRIES 3

struct egress_op {
  struct egress_op *prev, *next;
  struct fr_adapter *a;
  enum op_kind kind;
  enum op_step step;
  int tries;                    /* OP_WRITE: requests sent */
  char hash[FR_EGRESS_HASH_LEN + 1];
  char rv[64];                  /* OP_DELETE: the precondition */
  struct fr_egress policy;      /* OP_WRITE */
  struct fr_kube_call *call;    /* NULL while waiting for a retry (a repair) */
  struct egress_wait *waiters;
};

/* A policy's canonical text by hash: what a repair re-creates. */
struct egress_known {
  struct egress_known *next;
  char hash[FR_EGRESS_HASH_LEN + 1];
  struct fr_egress policy;
};

static uint64_t grace_ms(const struct fr_adapter *a) {
  return (uint64_t)(a->commit_timeout_s > 0 ? a->commit_timeout_s : FR_BATCH_COMMIT_TIMEOUT_S) * 1000;
}

static json_t *cached_policy(struct fr_adapter *a, const char *hash) {
  char name[64];

  snprintf(name, sizeof(name), UPSTREAM_NETPOL_PREFIX "%s", hash);
  return fr_informer_get(a->inf[INF_NETPOLS], a->ns, name);
}

/* ---- what the cluster gets ---- */

/* An ipBlock peer of <c>, with <except> (taken; NULL = none). */
static json_t *ip_block(const struct fr_cidr *c, const char *cidr, json_t *except) {
  char t[FR_CIDR_STRLEN];
  json_t *b;

  if (c != NULL)
    fr_cidr_format(c, t);
  b = json_pack("{s:{s:s}}", "ipBlock", "cidr", c != NULL ? t : cidr);
  if (b != NULL && except != NULL)
    json_object_set_new(json_object_get(b, "ipBlock"), "except", except);
  else
    json_decref(except);
  return b;
}

/* The internet of one family (4 or 6) but <e>'s denied ranges of it: one
 * ipBlock, or nothing when a /0 is denied (except must be a strict subset
 * of cidr, and nothing is left). */
static int add_internet(json_t *peers, const struct fr_egress *e, int family) {
  json_t *except = json_array();
  char t[FR_CIDR_STRLEN];
  size_t i;

  if (except == NULL)
    return -1;
  for (i = 0; i < e->ndeny; i++) {
    if (e->deny[i].family != family)
      continue;
    if (e->deny[i].prefix == 0) {
      json_decref(except);
      return 0;
    }
    fr_cidr_format(&e->deny[i], t);
    json_array_append_new(except, json_string(t));
  }
  if (json_array_size(except) == 0) {
    json_decref(except);
    except = NULL;
  }
  return json_array_append_new(peers, ip_block(NULL, family == 4 ? "0.0.0.0/0" : "::/0", except));
}

/* NetworkPolicy fr-egress-<hash> for <e>: egress only (policyTypes says
 * so, so an empty list denies every connection out), one rule whose peers
 * are the internet minus the denied ranges (when allowed) and every
 * allowed range: peers add up, so an allowed range wins over a denied one.
 * No DNS unless a range allows it (docs/operations.md). */
static json_t *policy_object(const struct fr_egress *e, const char *hash) {
  char name[64], touched[64], text[FR_EGRESS_TEXT_MAX];
  json_t *obj, *peers = json_array(), *rules = json_array();
  unsigned char rnd[4] = {0};
  size_t i;
  int bad = peers == NULL || rules == NULL;

  snprintf(name, sizeof(name), UPSTREAM_NETPOL_PREFIX "%s", hash);
  fr_random_bytes(rnd, sizeof(rnd));
  snprintf(touched, sizeof(touched), "%" PRId64 "-%02x%02x%02x%02x", fr_wall_ms(), rnd[0], rnd[1], rnd[2], rnd[3]);
  if (fr_egress_text(e, text, sizeof(text)) != 0)
    bad = 1;
  if (!bad && e->allow_internet)
    bad = add_internet(peers, e, 4) != 0 || add_internet(peers, e, 6) != 0;
  for (i = 0; !bad && i < e->nallow; i++)
    bad = json_array_append_new(peers, ip_block(&e->allow[i], NULL, NULL)) != 0;
  if (!bad && json_array_size(peers) > 0)
    bad = json_array_append_new(rules, json_pack("{s:O}", "to", peers)) != 0;
  json_decref(peers);
  if (bad) {
    json_decref(rules);
    return NULL;
  }
  obj = json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:{s:s,s:s}},s:{s:{s:{s:s}},s:[s],s:o}}", "apiVersion",
                  "networking.k8s.io/v1", "kind", "NetworkPolicy", "metadata", "name", name, "labels",
                  FR_LABEL_EGRESS, hash, "annotations", FR_ANN_NETWORK, text, FR_ANN_TOUCHED, touched, "spec",
                  "podSelector", "matchLabels", FR_LABEL_EGRESS, hash, "policyTypes", "Egress", "egress", rules);
  return obj;
}

/* ---- writes and deletes ---- */

static void op_unlink(struct egress_op *op) {
  struct fr_adapter *a = op->a;

  if (op->prev)
    op->prev->next = op->next;
  else if (a->egress_ops == op)
    a->egress_ops = op->next;
  if (op->next)
    op->next->prev = op->prev;
}

/* Answers every waiter of <op> with <status>, then frees it. */
static void op_finish(struct egress_op *op, int status, const char *message) {
  struct egress_wait *w;

  op_unlink(op);
  while ((w = op->waiters) != NULL) {
    op->waiters = w->next;
    if (op->waiters != NULL)
      op->waiters->prev = NULL;
    w->op = NULL;
    w->prev = w->next = NULL;
    w->cb(status, message, w->arg);
  }
  free(op);
}

static struct egress_op *op_new(struct fr_adapter *a, enum op_kind kind, const char *hash) {
  struct egress_op *op = calloc(1, sizeof(*op));

  if (op == NULL)
    return NULL;
  op->a = a;
  op->kind = kind;
  snprintf(op->hash, sizeof(op->hash), "%s", hash);
  op->next = a->egress_ops;
  if (a->egress_ops)
    a->egress_ops->prev = op;
  a->egress_ops = op;
  return op;
}

static struct egress_op *write_of(struct fr_adapter *a, const char *hash) {
  struct egress_op *op;

  for (op = a->egress_ops; op != NULL; op = op->next)
    if (op->kind == OP_WRITE && strcmp(op->hash, hash) == 0)
      return op;
  return NULL;
}

static void remember(struct fr_adapter *a, const char *hash, const struct fr_egress *e) {
  struct egress_known *k;

  for (k = a->egress_known; k != NULL; k = k->next)
    if (strcmp(k->hash, hash) == 0)
      return;
  if ((k = calloc(1, sizeof(*k))) == NULL)
    return; /* only repairs need it */
  snprintf(k->hash, sizeof(k->hash), "%s", hash);
  k->policy = *e;
  k->next = a->egress_known;
  a->egress_known = k;
}

static void on_answer(const struct fr_kube_response *r, void *arg);
static int op_send(struct egress_op *op);

/* Starts a write of <op>'s policy: a PATCH when this router's cache has
 * the object (the usual case: a policy in use), else a POST. */
static int write_start(struct egress_op *op) {
  op->step = cached_policy(op->a, op->hash) != NULL ? STEP_PATCH : STEP_POST;
  op->tries = 0;
  return op_send(op);
}

static int op_send(struct egress_op *op) {
  struct fr_adapter *a = op->a;
  const char *method = op->kind == OP_DELETE ? "DELETE" : op->step == STEP_POST ? "POST" : "PATCH";
  char path[300], *body = NULL;
  json_t *j = NULL;
  int rc;

  if ((rc = upstream_netpol_path(path, sizeof(path), a->ns, op->step == STEP_POST ? NULL : op->hash)) != 0)
    return rc;
  if (op->kind == OP_DELETE)
    j = json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", "v1", "kind", "DeleteOptions", "preconditions",
                  "resourceVersion", op->rv);
  else
    j = policy_object(&op->policy, op->hash);
  body = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (body == NULL)
    return -ENOMEM;
  op->tries++;
  /* Each step is safe to repeat: a patch sets the same, a create that had
   * landed meets 409 and turns into the patch, a delete is preconditioned. */
  rc = fr_kube_request(a->client, method, path,
                       strcmp(method, "PATCH") == 0 ? "application/merge-patch+json" : "application/json", body,
                       strlen(body), FR_KUBE_IDEMPOTENT, NULL, on_answer, op, &op->call);
  free(body);
  return rc;
}

static void on_answer(const struct fr_kube_response *r, void *arg) {
  struct egress_op *op = arg;
  struct fr_adapter *a = op->a;
  struct strmap_entry *e;
  json_t *obj;
  char msg[600], name[64];

  op->call = NULL;
  snprintf(name, sizeof(name), UPSTREAM_NETPOL_PREFIX "%s", op->hash);
  if (op->kind == OP_DELETE) {
    if ((e = strmap_get(&a->egress_idle, name)) != NULL)
      e->v.n[2] = 0;
    /* 409: someone wrote it since (a create is about to use it); 404: gone. */
    if (r->status >= 200 && r->status < 300)
      FR_INFO("egress", "%s: deleted NetworkPolicy %s (no sandbox uses it)", a->cc.name, name);
    else if (r->status != 404 && r->status != 409)
      FR_WARN("egress", "%s: cannot delete NetworkPolicy %s: HTTP %d", a->cc.name, name, r->status);
    op_finish(op, r->status, "");
    return;
  }
  if (((r->status == 404 && op->step == STEP_PATCH) || (r->status == 409 && op->step == STEP_POST)) &&
      op->tries < WRITE_TRIES) {
    op->step = r->status == 404 ? STEP_POST : STEP_PATCH;
    if (op_send(op) == 0)
      return;
    op_finish(op, 503, "cannot send the NetworkPolicy write");
    return;
  }
  if (r->status >= 200 && r->status < 300) {
    /* This router's next look at the cache sees it now. */
    if ((obj = json_loadb(r->body, r->body_len, 0, NULL)) != NULL) {
      fr_informer_observe(a->inf[INF_NETPOLS], obj);
      json_decref(obj);
    }
    if ((e = strmap_put(&a->egress, op->hash, NULL)) != NULL)
      e->v.n[2] = (int64_t)uv_now(a->loop);
    op_finish(op, r->status, "");
    return;
  }
  if (r->status == 0)
    snprintf(msg, sizeof(msg), "NetworkPolicy %s: %s", name, r->error ? r->error : "no response");
  else {
    json_t *st = json_loadb(r->body, r->body_len, 0, NULL);
    const char *m = json_string_value(json_object_get(st, "message"));
    snprintf(msg, sizeof(msg), "the cluster refused NetworkPolicy %s (HTTP %d): %.300s", name, r->status,
             m != NULL ? m : "no message");
    json_decref(st);
  }
  FR_WARN("egress", "%s: %s", a->cc.name, msg);
  if (op->waiters == NULL && r->status != 403) {
    /* A repair: tried again from the next sweep. */
    op->call = NULL;
    return;
  }
  op_finish(op, r->status, msg);
}

int egress_ensure(struct fr_adapter *a, const struct fr_egress *e, struct egress_wait *w,
                  void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct strmap_entry *ent;
  struct egress_op *op;
  char hash[FR_EGRESS_HASH_LEN + 1];
  uint64_t now = uv_now(a->loop);

  if (a->stopping)
    return -ESHUTDOWN;
  fr_egress_hash(e, hash);
  remember(a, hash, e);
  /* Written by this router within a quarter of the grace period, and in
   * the cache: no router deletes it before these pods show. */
  ent = strmap_get(&a->egress, hash);
  if (ent != NULL && ent->v.n[2] > 0 && now - (uint64_t)ent->v.n[2] < grace_ms(a) / 4 &&
      cached_policy(a, hash) != NULL)
    return 1;
  if ((op = write_of(a, hash)) == NULL) {
    if ((op = op_new(a, OP_WRITE, hash)) == NULL)
      return -ENOMEM;
    op->policy = *e;
  }
  w->cb = cb;
  w->arg = arg;
  w->op = op;
  w->prev = NULL;
  w->next = op->waiters;
  if (op->waiters != NULL)
    op->waiters->prev = w;
  op->waiters = w;
  /* A write already out (or a repair waiting for its retry: sent now)
   * serves this waiter too: it lands within a quarter of the grace period
   * of the label this create adds. */
  if (op->call == NULL && write_start(op) != 0) {
    egress_cancel(w);
    if (op->waiters == NULL) {
      op_unlink(op);
      free(op);
    }
    return -ENOMEM;
  }
  return 0;
}

void egress_cancel(struct egress_wait *w) {
  struct egress_op *op = w->op;

  if (op == NULL)
    return;
  if (w->prev)
    w->prev->next = w->next;
  else
    op->waiters = w->next;
  if (w->next)
    w->next->prev = w->prev;
  w->op = NULL;
  w->prev = w->next = NULL;
}

void egress_hold(struct fr_adapter *a, const char *hash, int delta) {
  struct strmap_entry *e = strmap_put(&a->egress, hash, NULL);

  if (e != NULL)
    e->v.n[1] += delta;
}

static void count_pod(struct fr_adapter *a, const struct fr_pod *p, int delta) {
  const char *hash = p != NULL ? fr_pod_label(p, FR_LABEL_EGRESS) : NULL;
  struct strmap_entry *e;

  if (hash == NULL || (e = strmap_put(&a->egress, hash, NULL)) == NULL)
    return;
  e->v.n[0] += delta;
}

void egress_on_pod(struct fr_adapter *a, enum fr_informer_event ev, const struct fr_pod *p,
                   const struct fr_pod *old) {
  if (ev == FR_INF_DELETED) {
    count_pod(a, p, -1);
  } else {
    count_pod(a, old, -1);
    count_pod(a, p, 1);
  }
}

/* ---- the sweep ---- */

static int caches_known(struct fr_adapter *a) {
  return fr_informer_synced(a->inf[INF_PODS]) && fr_informer_healthy(a->inf[INF_PODS]) &&
         fr_informer_synced(a->inf[INF_NETPOLS]) && fr_informer_healthy(a->inf[INF_NETPOLS]);
}

/* In use here: sandboxes carry it or creates of this router use it. */
static int in_use(struct fr_adapter *a, const char *hash) {
  struct strmap_entry *e = strmap_get(&a->egress, hash);

  return e != NULL && (e->v.n[0] > 0 || e->v.n[1] > 0);
}

/* This router wrote it within the grace period. */
static int written_lately(struct fr_adapter *a, const char *hash) {
  struct strmap_entry *e = strmap_get(&a->egress, hash);

  return e != NULL && e->v.n[2] > 0 && uv_now(a->loop) - (uint64_t)e->v.n[2] < grace_ms(a);
}

static int64_t rv_key(const char *rv) {
  return (int64_t)(strmap_hash(rv) & INT64_MAX);
}

/* Policies nobody uses: each is deleted once this router has seen it
 * unused, at one resourceVersion, for the grace period. */
static void collect(struct fr_adapter *a) {
  uint64_t now = uv_now(a->loop);
  const char *key;
  json_t *obj;

  json_object_foreach(fr_informer_items(a->inf[INF_NETPOLS]), key, obj) {
    json_t *meta = json_object_get(obj, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
    const char *hash = json_string_value(json_object_get(json_object_get(meta, "labels"), FR_LABEL_EGRESS));
    const char *text = json_string_value(json_object_get(json_object_get(meta, "annotations"), FR_ANN_NETWORK));
    struct fr_egress e;
    struct strmap_entry *idle;
    struct egress_op *op;
    int added;

    (void)key;
    if (name == NULL || rv == NULL || hash == NULL || !fr_egress_hash_valid(hash) ||
        strncmp(name, UPSTREAM_NETPOL_PREFIX, strlen(UPSTREAM_NETPOL_PREFIX)) != 0 ||
        strcmp(name + strlen(UPSTREAM_NETPOL_PREFIX), hash) != 0 ||
        json_object_get(meta, "deletionTimestamp") != NULL)
      continue;
    if (text != NULL && fr_egress_parse_text(text, &e) == 0)
      remember(a, hash, &e);
    if (in_use(a, hash)) {
      strmap_del(&a->egress_idle, name);
      continue;
    }
    if ((idle = strmap_put(&a->egress_idle, name, &added)) == NULL || idle->v.n[2])
      continue;
    if (added || idle->v.n[0] != rv_key(rv)) {
      idle->v.n[0] = rv_key(rv);
      idle->v.n[1] = (int64_t)now;
      continue;
    }
    if (now - (uint64_t)idle->v.n[1] < grace_ms(a) || written_lately(a, hash) ||
        (op = op_new(a, OP_DELETE, hash)) == NULL)
      continue;
    snprintf(op->rv, sizeof(op->rv), "%s", rv);
    if (op_send(op) != 0) {
      op_unlink(op);
      free(op);
      continue;
    }
    idle->v.n[2] = 1;
  }
}

static int idle_gone(struct strmap_entry *e, void *arg) {
  struct fr_adapter *a = arg;

  return !e->v.n[2] && fr_informer_get(a->inf[INF_NETPOLS], a->ns, e->key) == NULL;
}

static int unused(struct strmap_entry *e, void *arg) {
  struct fr_adapter *a = arg;

  return e->v.n[0] <= 0 && e->v.n[1] <= 0 &&
         (e->v.n[2] <= 0 || uv_now(a->loop) - (uint64_t)e->v.n[2] >= grace_ms(a));
}

/* Policies sandboxes carry the label of but the cluster does not have:
 * written again (and retried at every sweep while that lasts). */
static void repair(struct fr_adapter *a) {
  struct egress_known *k, **pk;
  struct egress_op *op;

  struct egress_op *nx;

  /* Repairs no longer needed: no sandbox carries their label now. */
  for (op = a->egress_ops; op != NULL; op = nx) {
    struct strmap_entry *e = strmap_get(&a->egress, op->hash);
    nx = op->next;
    if (op->kind == OP_WRITE && op->call == NULL && op->waiters == NULL && (e == NULL || e->v.n[0] <= 0)) {
      op_unlink(op);
      free(op);
    }
  }
  for (pk = &a->egress_known; (k = *pk) != NULL;) {
    struct strmap_entry *e = strmap_get(&a->egress, k->hash);
    int present = cached_policy(a, k->hash) != NULL;

    if ((e == NULL || (e->v.n[0] <= 0 && e->v.n[1] <= 0)) && !present) {
      *pk = k->next; /* nobody needs it: forgotten */
      free(k);
      continue;
    }
    pk = &k->next;
    if (e == NULL || e->v.n[0] <= 0 || present)
      continue;
    op = write_of(a, k->hash);
    if (op == NULL) {
      FR_WARN("egress", "%s: NetworkPolicy " UPSTREAM_NETPOL_PREFIX "%s is missing while sandboxes carry "
              "its label: writing it again", a->cc.name, k->hash);
      if ((op = op_new(a, OP_WRITE, k->hash)) == NULL)
        continue;
      op->policy = k->policy;
    }
    if (op->call == NULL && write_start(op) != 0 && op->waiters == NULL) {
      op_unlink(op);
      free(op);
    }
  }
}

void egress_sweep(struct fr_adapter *a) {
  if (a->stopping || !caches_known(a))
    return;
  collect(a);
  repair(a);
  strmap_sweep(&a->egress_idle, idle_gone, a);
  strmap_sweep(&a->egress, unused, a);
}

void egress_stop(struct fr_adapter *a) {
  while (a->egress_ops != NULL) {
    fr_kube_cancel(a->egress_ops->call);
    a->egress_ops->call = NULL;
    op_finish(a->egress_ops, 0, "the router is shutting down");
  }
}

void egress_free(struct fr_adapter *a) {
  struct egress_known *k;

  while ((k = a->egress_known) != NULL) {
    a->egress_known = k->next;
    free(k);
  }
  strmap_close(&a->egress);
  strmap_close(&a->egress_idle);
}

/* ---- lookups ---- */

int fr_adapter_egress_of(struct fr_adapter *a, const struct fr_pod *pod, struct fr_egress *out) {
  const char *hash = fr_pod_label(pod, FR_LABEL_EGRESS), *text;
  struct egress_known *k;
  json_t *obj;

  fr_egress_init(out);
  if (hash == NULL)
    return 0;
  for (k = a->egress_known; k != NULL; k = k->next)
    if (strcmp(k->hash, hash) == 0) {
      *out = k->policy;
      return 0;
    }
  obj = fr_egress_hash_valid(hash) ? cached_policy(a, hash) : NULL;
  text = json_string_value(
      json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"), FR_ANN_NETWORK));
  if (text == NULL || fr_egress_parse_text(text, out) != 0) {
    fr_egress_init(out);
    return -ENOENT;
  }
  return 0;
}
