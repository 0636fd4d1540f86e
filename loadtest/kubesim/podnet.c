/* podnet.c - pod addresses and the pod network of one kubesim.
 *
 * Every pod that becomes Running gets status.podIP from the pod range
 * (--pod-cidr; "auto", the default, takes the first free /16 of
 * 10.244-255.0.0 then 10.128-243.0.0). A range belongs to one kubesim at a
 * time: it holds an abstract unix socket named after it for as long as it
 * runs (the kernel lets go of it when the process dies, however), so a
 * second kubesim on the machine takes another range, or refuses an
 * explicit one that is taken.
 *
 * Bridge mode (root, pod namespaces): a bridge "ksim<network in hex><prefix>"
 * with the range's first address (the gateway), up, IPv4 forwarding off on
 * it and IPv6 off, so nothing a pod sends is routed off this machine (pods
 * get no default route and there is no NAT). Each pod that runs processes
 * gets a network namespace of its own with a veth pair to the bridge
 * (podinit.c makes it, in the pod's init: "ksv<address in hex>" here, eth0
 * there); the host reaches podIP:port directly. A stale bridge of the same
 * name (a kubesim killed with SIGKILL) is deleted at start; ours is
 * deleted at exit. A range that overlaps an address or route of the host
 * is skipped (auto) or refused.
 *
 * Loopback mode (not root, --no-pod-namespaces, or the kernel refused the
 * bridge; logged once): pods share the host's network namespace and each
 * gets its own address in 127.64.0.0/10 (the range's address with its top
 * ten bits those of 127.64.0.0), which its agent binds.
 *
 * Addresses are handed out next-fit (the one after the last given), so an
 * address is reused only after the whole range went round: a deleted pod's
 * namespace may still be going away.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fr/log.h"
#include "fr/util.h"
#include "netlink.h"
#include "sim.h"

#define LOG_COMP "kubesim.net"
#define LOOPBACK_BASE UINT32_C(0x7f400000) /* 127.64.0.0/10 */
#define LOOPBACK_MASK UINT32_C(0x003fffff)

struct sim_net {
  int mode;                  /* PODNET_BRIDGE or PODNET_LOOPBACK */
  uint32_t net;              /* the range pods' addresses come from */
  int prefix;
  char bridge[IF_NAMESIZE];  /* bridge mode */
  int lock_fd;               /* the abstract socket holding the range */
  unsigned char *used;       /* one bit per host number */
  uint32_t size;             /* addresses in the range */
  uint32_t next;             /* next-fit cursor */
  uint32_t nused;
};

static uint32_t mask_of(int prefix) {
  return prefix == 0 ? 0 : ~UINT32_C(0) << (32 - prefix);
}

static void ip_str(uint32_t a, char *out, size_t cap) {
  snprintf(out, cap, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
}

int podnet_parse_cidr(const char *s, uint32_t *net, int *prefix) {
  char buf[32], *slash;
  struct in_addr a;
  int64_t p;

  if (strlen(s) >= sizeof(buf))
    return -EINVAL;
  memcpy(buf, s, strlen(s) + 1);
  slash = strchr(buf, '/');
  if (slash == NULL)
    return -EINVAL;
  *slash = '\0';
  if (inet_pton(AF_INET, buf, &a) != 1 || fr_parse_int64(slash + 1, 12, 28, &p) != 0)
    return -EINVAL;
  *prefix = (int)p;
  *net = ntohl(a.s_addr);
  if ((*net & ~mask_of(*prefix)) != 0)
    return -EINVAL; /* host bits set */
  return 0;
}

/* Holds range <net>/<prefix> for this process: 0, -EADDRINUSE when another
 * kubesim does, or another -errno. */
static int lock_range(struct sim_net *n, uint32_t net, int prefix) {
  struct sockaddr_un sa;
  char ip[16];
  socklen_t len;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0)
    return -errno;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  ip_str(net, ip, sizeof(ip));
  /* Abstract: sun_path[0] is NUL, the name is not a file. */
  len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                    (size_t)snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "kubesim-pods-%s/%d", ip, prefix));
  if (bind(fd, (struct sockaddr *)&sa, len) != 0) {
    int err = errno;
    close(fd);
    return -err;
  }
  if (n->lock_fd >= 0)
    close(n->lock_fd);
  n->lock_fd = fd;
  return 0;
}

static int write_sysctl(const char *path, const char *value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t w;

  if (fd < 0)
    return -errno;
  w = write(fd, value, strlen(value));
  close(fd);
  return w == (ssize_t)strlen(value) ? 0 : -EIO;
}

/* Makes the bridge of range <net>/<prefix> (held): a stale one of that name
 * goes first. 0; -EADDRINUSE when the host uses part of the range; another
 * -errno when the kernel refuses. */
static int make_bridge(struct sim_net *n, int nl, uint32_t net, int prefix) {
  char path[128];
  int rc, idx;

  /* The range's own name (network and prefix): we hold the range, so a
   * bridge of that name is a dead kubesim's. */
  snprintf(n->bridge, sizeof(n->bridge), "ksim%08x%02d", net, prefix);
  rc = nl_link_del(nl, n->bridge);
  if (rc == 0)
    FR_INFO(LOG_COMP, "deleted the stale bridge %s of a kubesim that is gone", n->bridge);
  else if (rc != -ENODEV)
    return rc;
  rc = nl_range_used(nl, net, prefix, 0);
  if (rc != 0)
    return rc > 0 ? -EADDRINUSE : rc;
  /* A fixed, locally administered MAC made of the range: pods' neighbour
   * entries for the gateway stay right whichever pods come and go. */
  {
    unsigned char mac[6] = {0x02, 0x6b, (unsigned char)(net >> 24), (unsigned char)(net >> 16),
                            (unsigned char)(net >> 8), (unsigned char)prefix};
    if ((rc = nl_bridge_add(nl, n->bridge, mac)) != 0)
      return rc;
  }
  idx = nl_link_index(nl, n->bridge);
  if (idx < 0 || (rc = nl_addr_add(nl, idx, net + 1, prefix)) != 0 || (rc = nl_link_up(nl, idx)) != 0) {
    nl_link_del(nl, n->bridge);
    return idx < 0 ? idx : rc;
  }
  /* What arrives on the bridge is for this machine or another pod, never
   * routed on (and no IPv6 at all). */
  snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/forwarding", n->bridge);
  rc = write_sysctl(path, "0");
  snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", n->bridge);
  if (rc == 0)
    write_sysctl(path, "1");
  if (rc != 0) {
    nl_link_del(nl, n->bridge);
    return rc;
  }
  return 0;
}

/* Takes range <net>/<prefix> in <n>'s mode: 0, -EADDRINUSE (another
 * kubesim, or the host, uses it), or the kernel's refusal. */
static int take_range(struct sim_net *n, int nl, uint32_t net, int prefix) {
  int rc = lock_range(n, net, prefix);

  if (rc == 0 && n->mode == PODNET_BRIDGE && (rc = make_bridge(n, nl, net, prefix)) != 0) {
    close(n->lock_fd);
    n->lock_fd = -1;
  }
  if (rc == 0) {
    n->net = net;
    n->prefix = prefix;
  }
  return rc;
}

/* The loopback range of <net>/<prefix>. */
static uint32_t loopback_of(uint32_t net) {
  return LOOPBACK_BASE | (net & LOOPBACK_MASK);
}

/* Takes the first free /16 of the auto pool; 0 or -errno. */
static int take_auto(struct sim_net *n, int nl) {
  int i, rc = -EADDRINUSE;

  for (i = 0; i < 128; i++) {
    /* 10.244-255 first (where Kubernetes' own default lies), then 10.128-243. */
    uint32_t x = (uint32_t)(i < 12 ? 244 + i : 128 + i - 12);
    uint32_t net = (UINT32_C(10) << 24) | (x << 16);
    rc = take_range(n, nl, n->mode == PODNET_BRIDGE ? net : loopback_of(net), 16);
    if (rc != -EADDRINUSE)
      return rc;
  }
  return rc;
}

int podnet_init(struct sim *s, const char *cidr) {
  struct sim_net *n = calloc(1, sizeof(*n));
  uint32_t net = 0;
  int prefix = 16, nl = -1, rc, autopick = cidr == NULL || strcmp(cidr, "auto") == 0;
  const char *why = NULL;
  char ip[16];

  if (n == NULL)
    return -ENOMEM;
  n->lock_fd = -1;
  s->net = n;
  if (!autopick && podnet_parse_cidr(cidr, &net, &prefix) != 0) {
    fprintf(stderr, "kubesim: --pod-cidr %s: expected auto or an IPv4 network A.B.C.D/N with N in 12..28\n", cidr);
    return -EINVAL;
  }
  n->mode = PODNET_BRIDGE;
  if (!s->opts.pod_namespaces)
    why = geteuid() == 0 ? "--no-pod-namespaces" : "not root";
  else if ((nl = nl_open()) < 0)
    why = "no netlink socket";
  if (why == NULL) {
    rc = autopick ? take_auto(n, nl) : take_range(n, nl, net, prefix);
    if (rc == -EADDRINUSE && !autopick) {
      fprintf(stderr, "kubesim: --pod-cidr %s is taken (another kubesim holds it, or this host "
              "has an address or route in it); give each kubesim its own range\n", cidr);
      close(nl);
      return rc;
    }
    if (rc != 0) {
      why = strerror(-rc);
      n->mode = PODNET_LOOPBACK;
    }
  }
  if (nl >= 0)
    close(nl);
  if (why != NULL) {
    n->mode = PODNET_LOOPBACK;
    rc = autopick ? take_auto(n, -1) : take_range(n, -1, loopback_of(net), prefix);
    if (rc != 0) {
      fprintf(stderr, "kubesim: --pod-cidr %s: its loopback addresses are taken by another "
              "kubesim; give each kubesim its own range\n", autopick ? "auto" : cidr);
      return rc;
    }
    ip_str(n->net, ip, sizeof(ip));
    FR_WARN(LOG_COMP, "no network namespaces for pods (%s): they share this host's network, each "
            "with its own loopback address from %s/%d", why, ip, n->prefix);
  } else {
    char gw[16];
    ip_str(n->net, ip, sizeof(ip));
    ip_str(n->net + 1, gw, sizeof(gw));
    FR_INFO(LOG_COMP, "pod network %s/%d on bridge %s (this host is %s there)", ip, n->prefix,
            n->bridge, gw);
  }
  n->size = UINT32_C(1) << (32 - n->prefix);
  n->used = calloc(n->size / 8, 1);
  if (n->used == NULL)
    return -ENOMEM;
  /* The network and broadcast addresses, and the bridge's. */
  n->used[0] |= 1 | (n->mode == PODNET_BRIDGE ? 2 : 0);
  n->used[(n->size - 1) / 8] |= (unsigned char)(1u << ((n->size - 1) % 8));
  n->next = 2;
  return 0;
}

void podnet_free(struct sim *s) {
  struct sim_net *n = s->net;
  int nl;

  if (n == NULL)
    return;
  if (n->mode == PODNET_BRIDGE && n->bridge[0] != '\0' && n->lock_fd >= 0 && (nl = nl_open()) >= 0) {
    int rc = nl_link_del(nl, n->bridge);
    if (rc != 0 && rc != -ENODEV)
      FR_WARN(LOG_COMP, "cannot delete bridge %s: %s", n->bridge, strerror(-rc));
    close(nl);
  }
  if (n->lock_fd >= 0)
    close(n->lock_fd);
  free(n->used);
  free(n);
  s->net = NULL;
}

int podnet_alloc(struct sim *s, char *out, size_t cap) {
  struct sim_net *n = s->net;
  uint32_t i, h;

  if (n == NULL || n->used == NULL)
    return -ENOSPC;
  for (i = 0; i < n->size; i++) {
    h = (n->next + i) % n->size;
    if (n->used[h / 8] & (1u << (h % 8)))
      continue;
    n->used[h / 8] |= (unsigned char)(1u << (h % 8));
    n->nused++;
    n->next = (h + 1) % n->size;
    ip_str(n->net + h, out, cap);
    return 0;
  }
  return -ENOSPC;
}

void podnet_release(struct sim *s, const char *ip) {
  struct sim_net *n = s->net;
  struct in_addr a;
  uint32_t h;

  if (n == NULL || n->used == NULL || ip == NULL || inet_pton(AF_INET, ip, &a) != 1)
    return;
  h = ntohl(a.s_addr) - n->net;
  if ((ntohl(a.s_addr) & mask_of(n->prefix)) != n->net || h == 0 || h >= n->size - 1 ||
      !(n->used[h / 8] & (1u << (h % 8))))
    return;
  n->used[h / 8] &= (unsigned char)~(1u << (h % 8));
  n->nused--;
}

int podnet_mode(const struct sim *s) {
  return s->net != NULL ? s->net->mode : PODNET_LOOPBACK;
}

int podnet_pod_arg(const struct sim *s, const char *ip, char *out, size_t cap) {
  const struct sim_net *n = s->net;

  if (n == NULL || n->mode != PODNET_BRIDGE || ip == NULL || *ip == '\0')
    return -ENOENT;
  if (snprintf(out, cap, "%s/%d@%s", ip, n->prefix, n->bridge) >= (int)cap)
    return -ENAMETOOLONG;
  return 0;
}

json_t *podnet_json(const struct sim *s) {
  const struct sim_net *n = s->net;
  char ip[16], cidr[24], gw[16];

  if (n == NULL)
    return json_null();
  ip_str(n->net, ip, sizeof(ip));
  snprintf(cidr, sizeof(cidr), "%s/%d", ip, n->prefix);
  ip_str(n->net + 1, gw, sizeof(gw));
  if (n->mode == PODNET_BRIDGE)
    return json_pack("{s:s,s:s,s:s,s:s,s:I}", "mode", "bridge", "cidr", cidr, "bridge", n->bridge,
                     "gateway", gw, "addresses_used", (json_int_t)n->nused);
  return json_pack("{s:s,s:s,s:I}", "mode", "loopback", "cidr", cidr, "addresses_used", (json_int_t)n->nused);
}
