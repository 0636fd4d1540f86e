/* podcache.c - the sandbox pods of one namespace, compact, with their
 * addresses and an index of them (fr/podcache.h). */
#include <arpa/inet.h>
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
  struct strmap addrs; /* pod name -> its struct fr_pod_addr, packed in v (addr_pack) */
  struct strmap ips;   /* pod IP as text -> v.n[0] pods that have it */
  char ns[64];
  int synced;
};

/* An address in a strmap value (24 bytes): the IP, then its family and
 * the hostNetwork flag. */
static void addr_pack(struct strmap_entry *e, const struct fr_pod_addr *a) {
  unsigned char *b = (unsigned char *)e->v.n;

  memcpy(b, a->ip, 16);
  b[16] = (unsigned char)a->family;
  b[17] = (unsigned char)(a->host_network != 0);
}

static void addr_unpack(const struct strmap_entry *e, struct fr_pod_addr *a) {
  const unsigned char *b = (const unsigned char *)e->v.n;

  memcpy(a->ip, b, 16);
  a->family = b[16];
  a->host_network = b[17];
}

void fr_pod_addr_parse(json_t *pod, struct fr_pod_addr *out) {
  const char *ip = json_string_value(json_object_get(json_object_get(pod, "status"), "podIP"));

  memset(out, 0, sizeof(*out));
  out->host_network = json_is_true(json_object_get(json_object_get(pod, "spec"), "hostNetwork"));
  /* Anything that is not an address is none: it cannot be dialled. */
  if (ip != NULL && inet_pton(AF_INET, ip, out->ip) == 1)
    out->family = 4;
  else if (ip != NULL && inet_pton(AF_INET6, ip, out->ip) == 1)
    out->family = 6;
  else
    memset(out->ip, 0, sizeof(out->ip));
}

int fr_pod_addr_text(const struct fr_pod_addr *a, char out[46]) {
  out[0] = '\0';
  if (a->family == 0 || inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->ip, out, 46) == NULL)
    return -ENOENT;
  return 0;
}

static void ip_count(struct fr_podcache *pc, const struct fr_pod_addr *a, int sign) {
  struct strmap_entry *e;
  char ip[46];

  if (a == NULL || fr_pod_addr_text(a, ip) != 0)
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

/* <name>'s address leaves the index (and the table). */
static void addr_forget(struct fr_podcache *pc, const char *name) {
  struct strmap_entry *e = strmap_get(&pc->addrs, name);
  struct fr_pod_addr a;

  if (e == NULL)
    return;
  addr_unpack(e, &a);
  ip_count(pc, &a, -1);
  strmap_del(&pc->addrs, name);
}

static void on_pod(struct fr_informer *inf, enum fr_informer_event ev, json_t *obj, json_t *old_obj, void *arg) {
  struct fr_podcache *pc = arg;
  const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
  struct fr_pod *p, *old = NULL;
  struct strmap_entry *e;
  struct fr_pod_addr a;

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
    podstore_release(&pc->pods, podstore_take(&pc->pods, name));
    addr_forget(pc, name);
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
  podstore_release(&pc->pods, old);
  addr_forget(pc, name);
  fr_pod_addr_parse(obj, &a);
  if (a.family == 0 && !a.host_network)
    return; /* no address: nothing to keep */
  e = strmap_put(&pc->addrs, name, NULL);
  if (e == NULL) {
    /* Out of memory: the pod reads as having no address (404 not ready),
     * never as another's. */
    FR_ERROR("podcache", "%s: cannot keep the address of pod %s (out of memory)", pc->ns, name);
    return;
  }
  addr_pack(e, &a);
  ip_count(pc, &a, 1);
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
  strmap_close(&pc->addrs);
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

void fr_podcache_addr(const struct fr_podcache *pc, const char *name, struct fr_pod_addr *out) {
  const struct strmap_entry *e = strmap_get(&pc->addrs, name);

  memset(out, 0, sizeof(*out));
  if (e != NULL)
    addr_unpack(e, out);
}

size_t fr_podcache_ip_holders(const struct fr_podcache *pc, const struct fr_pod_addr *a) {
  const struct strmap_entry *e;
  char ip[46];

  if (fr_pod_addr_text(a, ip) != 0 || (e = strmap_get(&pc->ips, ip)) == NULL)
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
