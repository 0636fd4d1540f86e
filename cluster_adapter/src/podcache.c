/* podcache.c - the sandbox pods of one namespace, compact, with an index
 * of their IPs (fr/podcache.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/log.h"
#include "fr/podcache.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "podstore.h"
#include "strmap.h"

struct fr_podcache {
  struct fr_informer *inf;
  struct podstore pods;
  struct strmap ips;  /* pod IP as text -> v.n[0] pods that have it */
  char ns[64];
  int synced;
};

static void ip_count(struct fr_podcache *pc, const struct fr_pod *p, int sign) {
  struct strmap_entry *e;
  char ip[46];

  if (p == NULL || fr_pod_ip_text(p, ip) != 0)
    return;
  if (sign > 0) {
    /* Out of memory: the pod goes unindexed, so a conflict with it goes
     * unseen; the lookup itself still works. */
    if ((e = strmap_put(&pc->ips, ip, NULL)) != NULL)
      e->v.n[0]++;
    return;
  }
  e = strmap_get(&pc->ips, ip);
  if (e != NULL && --e->v.n[0] <= 0)
    strmap_del(&pc->ips, ip);
}

static void on_pod(struct fr_informer *inf, enum fr_informer_event ev, json_t *obj, json_t *old_obj, void *arg) {
  struct fr_podcache *pc = arg;
  const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
  struct fr_pod *p, *old = NULL;

  (void)inf;
  (void)old_obj;
  if (ev == FR_INF_SYNCED) {
    pc->synced = 1;
    FR_INFO("podcache", "%s: %zu sandbox pod(s) listed", pc->ns, pc->pods.n);
    return;
  }
  if (name == NULL)
    return;
  if (ev == FR_INF_DELETED) {
    old = podstore_take(&pc->pods, name);
    ip_count(pc, old, -1);
    podstore_release(&pc->pods, old);
    return;
  }
  p = podstore_parse(&pc->pods, obj);
  if (p == NULL || podstore_put(&pc->pods, p, &old) != 0) {
    /* The previous state stays: a stale entry is refused by the
     * checks of who uses it (Ready, IP), a missing one would be a 404. */
    FR_ERROR("podcache", "%s: cannot cache pod %s (out of memory or malformed)", pc->ns, name);
    podstore_release(&pc->pods, p);
    return;
  }
  ip_count(pc, old, -1);
  ip_count(pc, p, 1);
  podstore_release(&pc->pods, old);
}

static const char *store_rv(void *arg, const char *ns, const char *name) {
  struct fr_podcache *pc = arg;
  struct fr_pod *p = podstore_get(&pc->pods, name);

  (void)ns;
  return p ? p->rv : NULL;
}

static void store_each(void *arg, void (*fn)(const char *ns, const char *name, const char *rv, void *fn_arg),
                       void *fn_arg) {
  struct fr_podcache *pc = arg;
  struct fr_pod *p;
  size_t cur = 0;

  while ((p = podstore_next(&pc->pods, &cur)) != NULL)
    fn(pc->ns, p->name, p->rv, fn_arg);
}

int fr_podcache_new(struct fr_kube_client *client, const char *ns, struct fr_podcache **out) {
  struct fr_podcache *pc;
  char path[128];
  int rc;

  *out = NULL;
  if (client == NULL || !fr_dns_label(ns))
    return -EINVAL;
  pc = calloc(1, sizeof(*pc));
  if (pc == NULL)
    return -ENOMEM;
  snprintf(pc->ns, sizeof(pc->ns), "%s", ns);
  if (podstore_init(&pc->pods) != 0) {
    free(pc);
    return -ENOMEM;
  }
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
  rc = fr_informer_new(client, path, FR_LABEL_SANDBOX "=true", on_pod, pc, &pc->inf);
  if (rc != 0) {
    podstore_free(&pc->pods);
    free(pc);
    return rc;
  }
  fr_informer_set_owner_store(pc->inf, store_rv, store_each, pc);
  *out = pc;
  return 0;
}

int fr_podcache_start(struct fr_podcache *pc) {
  return fr_informer_start(pc->inf);
}

void fr_podcache_free(struct fr_podcache *pc) {
  if (pc == NULL)
    return;
  fr_informer_free(pc->inf);
  podstore_free(&pc->pods);
  strmap_close(&pc->ips);
  free(pc);
}

const char *fr_podcache_ns(const struct fr_podcache *pc) {
  return pc->ns;
}

int fr_podcache_synced(const struct fr_podcache *pc) {
  return pc->synced;
}

int fr_podcache_healthy(const struct fr_podcache *pc) {
  return fr_informer_healthy(pc->inf);
}

size_t fr_podcache_size(const struct fr_podcache *pc) {
  return pc->pods.n;
}

void fr_podcache_stats(const struct fr_podcache *pc, struct fr_informer_stats *out) {
  fr_informer_stats(pc->inf, out);
}

const struct fr_pod *fr_podcache_get(const struct fr_podcache *pc, const char *name) {
  return podstore_get(&pc->pods, name);
}

size_t fr_podcache_ip_holders(const struct fr_podcache *pc, const struct fr_pod *p) {
  const struct strmap_entry *e;
  char ip[46];

  if (fr_pod_ip_text(p, ip) != 0 || (e = strmap_get(&pc->ips, ip)) == NULL)
    return 0;
  return (size_t)e->v.n[0];
}

int fr_pod_agent_port(const struct fr_pod *p) {
  const char *v = p != NULL ? fr_pod_label(p, FR_LABEL_AGENT) : NULL;
  int64_t port;

  if (v == NULL || fr_parse_int64(v, 1, 65535, &port) != 0)
    return 0;
  return (int)port;
}
