/* netpol.c - NetworkPolicy egress, enforced for the pods that have a
 * network namespace of their own (bridge mode, podnet.c; isolated pods
 * that run processes, agent.c) as a CNI would (docs/kubesim.md,
 * "NetworkPolicy").
 *
 * For each such pod the policies of its namespace whose podSelector
 * matches its labels and whose policyTypes hold Egress are worked out
 * again whenever a policy of the namespace or the pod (labels, phase,
 * its supervisor starting) changes, a loop turn later. When none selects
 * it the pod may connect anywhere; otherwise only where one of their
 * egress rules allows (rules add up). The result is one nftables table,
 * "inet kubesim_egress", in the pod's namespace, replaced atomically by a
 * helper ("kubesim __netpol-apply PIDFILE RULESET": joins the network
 * namespace of the pod's init, execs nft with the ruleset):
 *
 *   chain out (hook output): established and related traffic, loopback,
 *   TCP segments that open nothing (not a bare SYN) and IPv6 neighbour
 *   discovery pass; then one accept per (peer, port) of every rule;
 *   everything else is rejected with ICMP admin-prohibited, so a denied
 *   connect fails at once ("No route to host", EHOSTUNREACH) where most
 *   CNIs drop and let it time out. The TCP rule is for connections made
 *   before the table (a warm pod's, a stream the pod proxy holds): the
 *   namespace tracks connections only from the table on, and a CNI, which
 *   tracks all along, lets those continue too; a normal socket sends a
 *   segment other than a SYN only on a connection it has.
 *
 * Peers by ipBlock (cidr, except) and ports (protocol, port, endPort) are
 * enforced; peers by podSelector / namespaceSelector and named ports are
 * not resolved: they allow nothing (stricter than a cluster). Replies of
 * connections made to the pod (the pod proxy, probes) are established
 * traffic and always pass: egress policies never cut a pod off from
 * kubesim. The rules live in the pod's own namespace, where its
 * processes (no CAP_NET_ADMIN) cannot change them; a process with
 * CAP_NET_RAW could still send raw frames past them (a CNI filters
 * outside the pod).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fr/buf.h"
#include "fr/egress.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

#define LOG_COMP "kubesim.netpol"
#define TABLE "inet kubesim_egress"
/* nft gets the ruleset as one argument: well under the kernel's 128 KiB
 * for a single argument. */
#define RULESET_MAX (96 * 1024)

struct np_pod {
  struct np_pod *next;
  struct sim *s;
  char *ns, *name;
  char uid[40];
  char *applied;            /* the ruleset in force ("": no table) */
  char *applied_names;      /* the policies it came from, comma-separated */
  char *sending;            /* the ruleset the running helper applies */
  char *sending_names;
  char error[200];          /* the last failure, "" = none */
  uint64_t applies;         /* rulesets applied */
  int dirty;                /* to be worked out again */
  int running;              /* a helper runs (proc open) */
  int gone;                 /* the pod went: freed once the helper is closed */
  uv_process_t proc;
};

struct sim_netpol {
  struct np_pod *pods;
  uv_timer_t timer;
  int armed, timer_open;
};

/* ---- per-pod state ---- */

static void np_free(struct np_pod *p) {
  free(p->ns);
  free(p->name);
  free(p->applied);
  free(p->applied_names);
  free(p->sending);
  free(p->sending_names);
  free(p);
}

static struct np_pod *find(struct sim_netpol *np, const char *ns, const char *name) {
  struct np_pod *p;

  for (p = np->pods; p != NULL; p = p->next)
    if (!p->gone && strcmp(p->ns, ns) == 0 && strcmp(p->name, name) == 0)
      return p;
  return NULL;
}

static void unlink_pod(struct sim_netpol *np, struct np_pod *p) {
  struct np_pod **pp;

  for (pp = &np->pods; *pp != NULL; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      return;
    }
}

static void on_timer(uv_timer_t *t);

static void arm(struct sim *s) {
  struct sim_netpol *np = s->netpol;

  if (np == NULL || np->armed || s->stopping || !np->timer_open)
    return;
  np->armed = 1;
  uv_timer_start(&np->timer, on_timer, 0, 0);
}

/* Drops the state of pod <ns>/<name> (its namespace is going with it). */
static void forget(struct sim *s, const char *ns, const char *name) {
  struct np_pod *p = find(s->netpol, ns, name);

  if (p == NULL)
    return;
  if (p->running) {
    p->gone = 1; /* freed when its helper is closed */
    return;
  }
  unlink_pod(s->netpol, p);
  np_free(p);
}

void netpol_pod_dirty(struct sim *s, struct sim_obj *o) {
  struct sim_netpol *np = s->netpol;
  struct np_pod *p;

  if (np == NULL || o == NULL || o->kind != K_POD || o->u.pod == NULL ||
      agent_net_pidfile(s, o->u.pod) == NULL)
    return;
  if ((p = find(np, o->ns, o->name)) == NULL) {
    if ((p = calloc(1, sizeof(*p))) == NULL || (p->ns = strdup(o->ns)) == NULL ||
        (p->name = strdup(o->name)) == NULL || (p->applied = strdup("")) == NULL) {
      if (p != NULL)
        np_free(p);
      FR_WARN(LOG_COMP, "pod %s/%s: out of memory: its network policies are not enforced", o->ns, o->name);
      return;
    }
    p->s = s;
    snprintf(p->uid, sizeof(p->uid), "%s", o->uid);
    p->next = np->pods;
    np->pods = p;
  }
  p->dirty = 1;
  arm(s);
}

void netpol_commit(struct sim *s, enum sim_kind k, struct sim_obj *o, int event) {
  struct sim_netpol *np = s->netpol;
  struct np_pod *p;

  if (np == NULL)
    return;
  if (k == K_NETWORKPOLICY) {
    for (p = np->pods; p != NULL; p = p->next)
      if (!p->gone && strcmp(p->ns, o->ns) == 0)
        p->dirty = 1;
    arm(s);
  } else if (k == K_POD) {
    if (event == EV_DELETED || o->u.pod == NULL || o->u.pod->stage == PS_TERMINAL)
      forget(s, o->ns, o->name);
    else
      netpol_pod_dirty(s, o);
  }
}

/* ---- the ruleset ---- */

/* <text> (what the API server accepts: an address, '/', a prefix; bits
 * past the prefix allowed) as a CIDR with those bits cleared; 0 or -1. */
static int cidr_loose(const char *text, struct fr_cidr *out) {
  char addr[INET6_ADDRSTRLEN + 1];
  const char *slash = text != NULL ? strchr(text, '/') : NULL;
  size_t n = slash != NULL ? (size_t)(slash - text) : 0;
  int64_t prefix;
  int i, bits, v6;

  if (slash == NULL || n == 0 || n >= sizeof(addr))
    return -1;
  memcpy(addr, text, n);
  addr[n] = '\0';
  memset(out, 0, sizeof(*out));
  v6 = strchr(addr, ':') != NULL;
  if (inet_pton(v6 ? AF_INET6 : AF_INET, addr, out->addr) != 1 ||
      fr_parse_int64(slash + 1, 0, v6 ? 128 : 32, &prefix) != 0)
    return -1;
  out->family = v6 ? 6 : 4;
  out->prefix = (uint8_t)prefix;
  for (i = 0, bits = (int)prefix; i < 16; i++, bits -= 8)
    out->addr[i] &= (uint8_t)(bits >= 8 ? 0xff : bits <= 0 ? 0 : 0xff << (8 - bits));
  return 0;
}

int netpol_cidr_check(const char *text, const char *within) {
  struct fr_cidr c, w;

  if (cidr_loose(text, &c) != 0)
    return -1;
  if (within == NULL)
    return 0;
  if (cidr_loose(within, &w) != 0 || !fr_cidr_contains(&w, &c) || c.prefix <= w.prefix)
    return 1;
  return 0;
}

/* The match of ipBlock <b>, or -1 when it is not one kubesim can read. */
static int peer_match(json_t *b, struct fr_buf *out) {
  json_t *except = json_object_get(b, "except"), *e;
  struct fr_cidr c, x;
  char t[FR_CIDR_STRLEN];
  size_t i, n = 0;
  const char *ipx;

  if (cidr_loose(json_get_str(b, "cidr"), &c) != 0)
    return -1;
  ipx = c.family == 6 ? "ip6" : "ip";
  fr_cidr_format(&c, t);
  fr_buf_printf(out, "%s daddr %s", ipx, t);
  json_array_foreach(except, i, e) {
    if (cidr_loose(json_string_value(e), &x) != 0 || x.family != c.family)
      return -1;
    fr_cidr_format(&x, t);
    if (n++ == 0)
      fr_buf_printf(out, " %s daddr != { %s", ipx, t);
    else
      fr_buf_printf(out, ", %s", t);
  }
  if (n > 0)
    fr_buf_puts(out, " }");
  return 0;
}

/* The match of NetworkPolicyPort <p>, or -1 for a named port. */
static int port_match(json_t *p, struct fr_buf *out) {
  const char *proto = json_get_str(p, "protocol");
  json_t *port = json_object_get(p, "port"), *end = json_object_get(p, "endPort");
  char lower[8];
  size_t i;

  if (proto == NULL)
    proto = "TCP";
  for (i = 0; proto[i] != '\0' && i + 1 < sizeof(lower); i++)
    lower[i] = (char)(proto[i] >= 'A' && proto[i] <= 'Z' ? proto[i] + 32 : proto[i]);
  lower[i] = '\0';
  if (port != NULL && !json_is_integer(port))
    return -1;
  fr_buf_printf(out, "meta l4proto %s", lower);
  if (port != NULL) {
    fr_buf_printf(out, " th dport %" JSON_INTEGER_FORMAT, json_integer_value(port));
    if (json_is_integer(end) && json_integer_value(end) > json_integer_value(port))
      fr_buf_printf(out, "-%" JSON_INTEGER_FORMAT, json_integer_value(end));
  }
  return 0;
}

/* The accepts of egress rule <r> into <rules>. */
static void render_rule(json_t *r, struct fr_buf *rules) {
  json_t *to = json_object_get(r, "to"), *ports = json_object_get(r, "ports"), *peer, *port;
  size_t i, k, np = json_array_size(to) > 0 ? json_array_size(to) : 1;
  size_t nq = json_array_size(ports) > 0 ? json_array_size(ports) : 1;
  struct fr_buf a, b;

  fr_buf_init(&a);
  fr_buf_init(&b);
  for (i = 0; i < np; i++) {
    fr_buf_reset(&a);
    peer = json_array_get(to, i);
    /* No peers: every destination. A selector peer: nothing here. */
    if (peer != NULL && (json_object_get(peer, "ipBlock") == NULL ||
                         peer_match(json_object_get(peer, "ipBlock"), &a) != 0))
      continue;
    for (k = 0; k < nq; k++) {
      fr_buf_reset(&b);
      port = json_array_get(ports, k);
      if (port != NULL && port_match(port, &b) != 0)
        continue;
      fr_buf_printf(rules, "    %s%s%s accept\n", a.len ? a.data : "", a.len && b.len ? " " : "",
                    b.len ? b.data : (a.len ? "" : "meta nfproto { ipv4, ipv6 }"));
    }
  }
  fr_buf_free(&a);
  fr_buf_free(&b);
}

/* 1 when policy <pol> (parsed) selects the pod of version <v> for egress. */
static int selects(json_t *pol, const struct objver *v) {
  json_t *types = json_path(pol, "spec.policyTypes"), *t;
  struct fr_selector *sel = NULL;
  char *text;
  size_t i;
  int egress = 0, match;

  json_array_foreach(types, i, t) egress |= json_is_string(t) && strcmp(json_string_value(t), "Egress") == 0;
  if (!egress)
    return 0;
  text = label_selector_text(json_path(pol, "spec.podSelector"));
  if (fr_selector_parse_labels(text != NULL ? text : "", &sel, NULL, 0) != 0) {
    free(text);
    return 0;
  }
  free(text);
  match = fr_selector_matches(sel, objver_label, v);
  fr_selector_free(sel);
  return match;
}

/* The ruleset pod <o> needs ("" when no policy selects it) and the names of
 * the policies it comes from; 0 or -ENOMEM. */
static int wanted(struct sim *s, struct sim_obj *o, char **ruleset, char **names) {
  struct fr_buf rules, nm;
  struct sim_obj *po;
  json_t *pol, *r;
  size_t i;
  int any = 0;

  fr_buf_init(&rules);
  fr_buf_init(&nm);
  for (po = store_first(s, K_NETWORKPOLICY, o->ns); po != NULL && strcmp(po->ns, o->ns) == 0;
       po = store_next(s, po)) {
    if (po->cur->deleting || (pol = obj_json(po)) == NULL)
      continue;
    if (selects(pol, o->cur)) {
      any = 1;
      fr_buf_printf(&nm, "%s%s", nm.len ? "," : "", po->name);
      json_array_foreach(json_path(pol, "spec.egress"), i, r) render_rule(r, &rules);
    }
    json_decref(pol);
  }
  *names = fr_buf_detach(&nm, NULL);
  fr_buf_free(&nm);
  if (!any) {
    fr_buf_free(&rules);
    *ruleset = strdup("");
    return *ruleset != NULL ? 0 : -ENOMEM;
  }
  {
    struct fr_buf out;
    fr_buf_init(&out);
    fr_buf_printf(&out,
                  "table " TABLE "\ndelete table " TABLE "\ntable " TABLE " {\n  chain out {\n"
                  "    type filter hook output priority 0; policy accept;\n"
                  "    ct state established,related accept\n    oifname \"lo\" accept\n"
                  "    tcp flags & (syn | ack) != syn accept\n"
                  "    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept\n"
                  "%s    reject with icmpx type admin-prohibited\n  }\n}\n",
                  rules.len ? rules.data : "");
    fr_buf_free(&rules);
    *ruleset = fr_buf_detach(&out, NULL);
    fr_buf_free(&out);
  }
  return *ruleset != NULL ? 0 : -ENOMEM;
}

/* ---- the helper ---- */

static void on_proc_closed(uv_handle_t *h) {
  struct np_pod *p = h->data;
  struct sim *s = p->s;

  p->running = 0;
  if (p->gone) {
    unlink_pod(s->netpol, p);
    np_free(p);
    return;
  }
  if (p->dirty)
    arm(s);
}

static void on_proc_exit(uv_process_t *proc, int64_t status, int sig) {
  struct np_pod *p = proc->data;
  struct sim *s = p->s;
  struct sim_obj *o;

  if (status == 0 && sig == 0) {
    free(p->applied);
    free(p->applied_names);
    p->applied = p->sending;
    p->applied_names = p->sending_names;
    p->sending = p->sending_names = NULL;
    p->error[0] = '\0';
    p->applies++;
    FR_DEBUG(LOG_COMP, "pod %s/%s: egress rules of [%s] in force", p->ns, p->name,
             p->applied_names ? p->applied_names : "");
  } else {
    snprintf(p->error, sizeof(p->error), "nft exited with status %" PRId64 "%s%s (kubesim's log says why)",
             status, sig ? ", signal " : "", sig ? strsignal(sig) : "");
    FR_WARN(LOG_COMP, "pod %s/%s: cannot apply its egress rules: %s", p->ns, p->name, p->error);
    if (!p->gone && !s->stopping && (o = store_get(s, K_POD, p->ns, p->name)) != NULL)
      event_emit(s, o, "Warning", "NetworkPolicyFailed", "kubesim-netpol", NULL,
                 "egress rules of NetworkPolicies [%s] not applied: %s",
                 p->sending_names ? p->sending_names : "", p->error);
    free(p->sending);
    free(p->sending_names);
    p->sending = p->sending_names = NULL;
  }
  uv_close((uv_handle_t *)proc, on_proc_closed);
}

/* Starts the helper that puts <ruleset> (taken) in force in pod <p>'s
 * namespace; 0 or -errno (nothing taken then). */
static int apply(struct sim *s, struct np_pod *p, const char *pidfile, char *ruleset, char *names) {
  static const char none[] = "table " TABLE "\ndelete table " TABLE "\n";
  uv_process_options_t opts;
  uv_stdio_container_t stdio[3];
  char *args[5];
  int rc;

  if (strlen(ruleset) > RULESET_MAX)
    return -E2BIG;
  args[0] = s->self_exe;
  args[1] = "__netpol-apply";
  args[2] = (char *)pidfile;
  args[3] = ruleset[0] != '\0' ? ruleset : (char *)none;
  args[4] = NULL;
  memset(stdio, 0, sizeof(stdio));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = 2;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  memset(&opts, 0, sizeof(opts));
  opts.file = s->self_exe;
  opts.args = args;
  opts.stdio_count = 3;
  opts.stdio = stdio;
  opts.exit_cb = on_proc_exit;
  p->proc.data = p;
  if ((rc = uv_spawn(s->loop, &p->proc, &opts)) != 0) {
    uv_close((uv_handle_t *)&p->proc, NULL);
    return rc;
  }
  p->running = 1;
  p->sending = ruleset;
  p->sending_names = names;
  return 0;
}

static void on_timer(uv_timer_t *t) {
  struct sim *s = t->data;
  struct np_pod *p, *nx;
  struct sim_obj *o;
  const char *pidfile;
  char *ruleset, *names;
  int rc;

  s->netpol->armed = 0;
  for (p = s->netpol->pods; p != NULL; p = nx) {
    nx = p->next;
    if (!p->dirty || p->running || p->gone || s->stopping)
      continue;
    p->dirty = 0;
    o = store_get(s, K_POD, p->ns, p->name);
    pidfile = o != NULL && strcmp(o->uid, p->uid) == 0 && o->u.pod != NULL ? agent_net_pidfile(s, o->u.pod)
                                                                            : NULL;
    if (pidfile == NULL) {
      forget(s, p->ns, p->name);
      continue;
    }
    if (wanted(s, o, &ruleset, &names) != 0) {
      snprintf(p->error, sizeof(p->error), "out of memory");
      continue;
    }
    if (strcmp(ruleset, p->applied) == 0) {
      free(p->applied_names);
      p->applied_names = names;
      free(ruleset);
      continue;
    }
    if ((rc = apply(s, p, pidfile, ruleset, names)) != 0) {
      snprintf(p->error, sizeof(p->error), "cannot start the helper: %s", strerror(-rc));
      FR_WARN(LOG_COMP, "pod %s/%s: %s", p->ns, p->name, p->error);
      free(ruleset);
      free(names);
    }
  }
}

/* ---- lifecycle and the admin view ---- */

int netpol_init(struct sim *s) {
  if ((s->netpol = calloc(1, sizeof(*s->netpol))) == NULL)
    return -ENOMEM;
  uv_timer_init(s->loop, &s->netpol->timer);
  s->netpol->timer.data = s;
  s->netpol->timer_open = 1;
  return 0;
}

void netpol_close(struct sim *s) {
  if (s->netpol == NULL || !s->netpol->timer_open)
    return;
  s->netpol->timer_open = 0;
  uv_close((uv_handle_t *)&s->netpol->timer, NULL);
}

void netpol_free(struct sim *s) {
  struct np_pod *p;

  if (s->netpol == NULL)
    return;
  while ((p = s->netpol->pods) != NULL) {
    s->netpol->pods = p->next;
    np_free(p);
  }
  free(s->netpol);
  s->netpol = NULL;
}

json_t *netpol_json(struct sim *s) {
  json_t *pods = json_array();
  struct np_pod *p;

  for (p = s->netpol != NULL ? s->netpol->pods : NULL; pods != NULL && p != NULL; p = p->next) {
    json_t *names = json_array();
    const char *n = p->applied_names;
    if (p->gone)
      continue;
    while (n != NULL && *n != '\0') {
      size_t len = strcspn(n, ",");
      json_array_append_new(names, json_stringn(n, len));
      n += len + (n[len] == ',');
    }
    json_array_append_new(pods, json_pack("{s:s,s:s,s:o,s:b,s:b,s:I,s:s}", "namespace", p->ns, "name", p->name,
                                          "policies", names, "restricted", p->applied[0] != '\0', "pending",
                                          p->dirty || p->running, "applies", (json_int_t)p->applies, "error",
                                          p->error));
  }
  return json_pack("{s:b,s:o}", "enforcing", podnet_mode(s) == PODNET_BRIDGE && s->opts.pod_namespaces, "pods",
                   pods);
}

/* ---- the helper's side (no loop) ---- */

int netpol_helper_main(int argc, char **argv) {
  static const char *const nft[] = {"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"};
  struct timespec ts = {0, 5 * 1000 * 1000};
  char buf[24] = "", path[64];
  int64_t pid = 0;
  ssize_t n = -1;
  size_t i;
  int fd;

  if (argc != 4) {
    fprintf(stderr, "kubesim: __netpol-apply PIDFILE RULESET\n");
    _exit(2);
  }
  /* The supervisor may have started a moment ago (an exec started it). */
  for (i = 0; i < 2000 && n <= 0; i++) {
    if ((fd = open(argv[2], O_RDONLY | O_CLOEXEC)) >= 0) {
      n = read(fd, buf, sizeof(buf) - 1);
      close(fd);
    }
    if (n <= 0)
      nanosleep(&ts, NULL);
  }
  buf[n > 0 ? n : 0] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
  snprintf(path, sizeof(path), "/proc/%s/ns/net", buf);
  if (fr_parse_int64(buf, 1, INT_MAX, &pid) != 0 || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
      setns(fd, CLONE_NEWNET) != 0) {
    fprintf(stderr, "kubesim: cannot enter the pod's network namespace (%s): %s\n", argv[2], strerror(errno));
    _exit(1);
  }
  close(fd);
  execlp("nft", "nft", argv[3], (char *)NULL);
  for (i = 0; i < FR_ARRAY_SIZE(nft); i++)
    execl(nft[i], "nft", argv[3], (char *)NULL);
  fprintf(stderr, "kubesim: cannot run nft (%s): install nftables (scripts/lib/packages.sh)\n", strerror(errno));
  _exit(127);
}
