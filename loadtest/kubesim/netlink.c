/* netlink.c - rtnetlink requests for kubesim's pod network (netlink.h).
 *
 * Each request is one message built in a stack buffer, sent with
 * NLM_F_ACK, and answered by the kernel's NLMSG_ERROR (0 = done); dumps
 * read until NLMSG_DONE.
 */
#define _GNU_SOURCE
#include "netlink.h"

#include <arpa/inet.h>
#include <errno.h>
/* net/if.h before the linux/ headers: they step aside for libc's. */
#include <net/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define REQ_BYTES 1024
/* Dump answers come in pieces of up to a page or so each. */
#define RECV_BYTES 32768

struct req {
  struct nlmsghdr h;
  char room[REQ_BYTES];
};

static unsigned seq_next;

static void *tail(struct nlmsghdr *h) {
  return (char *)h + NLMSG_ALIGN(h->nlmsg_len);
}

static int add_attr(struct nlmsghdr *h, int type, const void *data, size_t len) {
  size_t rl = RTA_LENGTH(len);
  struct rtattr *rta;

  if (NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(rl) > sizeof(struct req))
    return -EMSGSIZE;
  rta = tail(h);
  rta->rta_type = (unsigned short)type;
  rta->rta_len = (unsigned short)rl;
  if (len > 0)
    memcpy(RTA_DATA(rta), data, len);
  h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(rl);
  return 0;
}

static int add_str(struct nlmsghdr *h, int type, const char *s) {
  return add_attr(h, type, s, strlen(s) + 1);
}

static int add_u32(struct nlmsghdr *h, int type, uint32_t v) {
  return add_attr(h, type, &v, sizeof(v));
}

static struct rtattr *nest_start(struct nlmsghdr *h, int type) {
  struct rtattr *n = tail(h);

  return add_attr(h, type, NULL, 0) == 0 ? n : NULL;
}

static void nest_end(struct nlmsghdr *h, struct rtattr *n) {
  n->rta_len = (unsigned short)((char *)tail(h) - (char *)n);
}

static void req_init(struct req *r, int type, int flags, const void *hdr, size_t hlen) {
  memset(r, 0, sizeof(*r));
  r->h.nlmsg_len = (uint32_t)NLMSG_LENGTH(hlen);
  r->h.nlmsg_type = (unsigned short)type;
  r->h.nlmsg_flags = (unsigned short)(NLM_F_REQUEST | flags);
  r->h.nlmsg_seq = ++seq_next;
  memcpy(NLMSG_DATA(&r->h), hdr, hlen);
}

static int send_req(int fd, struct nlmsghdr *h) {
  struct sockaddr_nl to = {.nl_family = AF_NETLINK};

  for (;;) {
    ssize_t n = sendto(fd, h, h->nlmsg_len, 0, (struct sockaddr *)&to, sizeof(to));
    if (n == (ssize_t)h->nlmsg_len)
      return 0;
    if (n < 0 && errno == EINTR)
      continue;
    return n < 0 ? -errno : -EIO;
  }
}

/* Reads answers to request <seq>: each message goes to <cb> (may be NULL)
 * until the ACK or the end of a dump. The kernel's error, or 0. */
static int recv_answers(int fd, unsigned seq, int (*cb)(struct nlmsghdr *, void *), void *arg) {
  char buf[RECV_BYTES] __attribute__((aligned(4)));
  int rc = 0;

  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    struct nlmsghdr *h;
    size_t left;

    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? -errno : -EIO;
    left = (size_t)n;
    for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq)
        continue;
      if (h->nlmsg_type == NLMSG_DONE)
        return rc;
      if (h->nlmsg_type == NLMSG_ERROR) {
        struct nlmsgerr *e = NLMSG_DATA(h);
        return e->error;
      }
      if (cb != NULL && rc == 0)
        rc = cb(h, arg);
    }
  }
}

static int talk(int fd, struct req *r) {
  int rc;

  r->h.nlmsg_flags |= NLM_F_ACK;
  rc = send_req(fd, &r->h);
  return rc == 0 ? recv_answers(fd, r->h.nlmsg_seq, NULL, NULL) : rc;
}

int nl_open(void) {
  struct sockaddr_nl local = {.nl_family = AF_NETLINK};
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);

  if (fd < 0)
    return -errno;
  if (bind(fd, (struct sockaddr *)&local, sizeof(local)) != 0) {
    int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

int nl_link_index(int fd, const char *name) {
  unsigned idx;

  (void)fd;
  idx = if_nametoindex(name);
  if (idx == 0)
    return errno == ENODEV || errno == ENXIO ? -ENODEV : -errno;
  return (int)idx;
}

int nl_link_del(int fd, const char *name) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  struct req r;
  int idx = nl_link_index(fd, name);

  if (idx < 0)
    return idx;
  ifi.ifi_index = idx;
  req_init(&r, RTM_DELLINK, 0, &ifi, sizeof(ifi));
  return talk(fd, &r);
}

int nl_bridge_add(int fd, const char *name, const unsigned char mac[6]) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  struct rtattr *info;
  struct req r;

  req_init(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
  if (add_str(&r.h, IFLA_IFNAME, name) != 0 || add_attr(&r.h, IFLA_ADDRESS, mac, 6) != 0 ||
      (info = nest_start(&r.h, IFLA_LINKINFO)) == NULL ||
      add_str(&r.h, IFLA_INFO_KIND, "bridge") != 0)
    return -EMSGSIZE;
  nest_end(&r.h, info);
  return talk(fd, &r);
}

int nl_veth_add(int fd, const char *name, int master, const char *peer, int peer_nsfd) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC}, peer_ifi = {.ifi_family = AF_UNSPEC};
  struct rtattr *info, *data, *p;
  struct req r;

  req_init(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
  if (add_str(&r.h, IFLA_IFNAME, name) != 0 || add_u32(&r.h, IFLA_MASTER, (uint32_t)master) != 0 ||
      (info = nest_start(&r.h, IFLA_LINKINFO)) == NULL || add_str(&r.h, IFLA_INFO_KIND, "veth") != 0 ||
      (data = nest_start(&r.h, IFLA_INFO_DATA)) == NULL || (p = nest_start(&r.h, VETH_INFO_PEER)) == NULL)
    return -EMSGSIZE;
  /* The peer's attributes follow an ifinfomsg of its own. */
  if (NLMSG_ALIGN(r.h.nlmsg_len) + NLMSG_ALIGN(sizeof(peer_ifi)) > sizeof(r))
    return -EMSGSIZE;
  memcpy((char *)&r + NLMSG_ALIGN(r.h.nlmsg_len), &peer_ifi, sizeof(peer_ifi));
  r.h.nlmsg_len = NLMSG_ALIGN(r.h.nlmsg_len) + (uint32_t)NLMSG_ALIGN(sizeof(peer_ifi));
  if (add_str(&r.h, IFLA_IFNAME, peer) != 0 || add_u32(&r.h, IFLA_NET_NS_FD, (uint32_t)peer_nsfd) != 0)
    return -EMSGSIZE;
  nest_end(&r.h, p);
  nest_end(&r.h, data);
  nest_end(&r.h, info);
  return talk(fd, &r);
}

int nl_link_up(int fd, int ifindex) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex, .ifi_flags = IFF_UP,
                          .ifi_change = IFF_UP};
  struct req r;

  req_init(&r, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
  return talk(fd, &r);
}

int nl_addr_add(int fd, int ifindex, uint32_t addr, int prefix) {
  struct ifaddrmsg ifa = {.ifa_family = AF_INET, .ifa_prefixlen = (unsigned char)prefix,
                          .ifa_scope = RT_SCOPE_UNIVERSE, .ifa_index = (unsigned)ifindex};
  uint32_t be = htonl(addr);
  struct req r;

  req_init(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof(ifa));
  if (add_attr(&r.h, IFA_LOCAL, &be, 4) != 0 || add_attr(&r.h, IFA_ADDRESS, &be, 4) != 0)
    return -EMSGSIZE;
  return talk(fd, &r);
}

struct range_check {
  uint32_t net;
  int prefix;
  int except;
  int used;
};

static uint32_t mask_of(int prefix) {
  return prefix == 0 ? 0 : ~UINT32_C(0) << (32 - prefix);
}

/* Whether <a>/<alen> and <b>/<blen> share an address. */
static int overlaps(uint32_t a, int alen, uint32_t b, int blen) {
  uint32_t m = mask_of(alen < blen ? alen : blen);

  return (a & m) == (b & m);
}

static int on_addr(struct nlmsghdr *h, void *arg) {
  struct range_check *rc = arg;
  struct ifaddrmsg *ifa = NLMSG_DATA(h);
  struct rtattr *a;
  int len = (int)IFA_PAYLOAD(h);

  if (h->nlmsg_type != RTM_NEWADDR || ifa->ifa_family != AF_INET || (int)ifa->ifa_index == rc->except)
    return 0;
  for (a = IFA_RTA(ifa); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    uint32_t v;
    if (a->rta_type != IFA_LOCAL || RTA_PAYLOAD(a) != 4)
      continue;
    memcpy(&v, RTA_DATA(a), 4);
    if (overlaps(ntohl(v), 32, rc->net, rc->prefix))
      rc->used = 1;
  }
  return 0;
}

static int on_route(struct nlmsghdr *h, void *arg) {
  struct range_check *rc = arg;
  struct rtmsg *rt = NLMSG_DATA(h);
  struct rtattr *a;
  int len = (int)RTM_PAYLOAD(h), oif = 0;
  uint32_t dst = 0, table = rt->rtm_table;

  /* A default route covers every range; it does not make one used. */
  if (h->nlmsg_type != RTM_NEWROUTE || rt->rtm_family != AF_INET || rt->rtm_dst_len == 0)
    return 0;
  for (a = RTM_RTA(rt); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    if (a->rta_type == RTA_DST && RTA_PAYLOAD(a) == 4)
      memcpy(&dst, RTA_DATA(a), 4);
    else if (a->rta_type == RTA_OIF && RTA_PAYLOAD(a) == 4)
      memcpy(&oif, RTA_DATA(a), 4);
    else if (a->rta_type == RTA_TABLE && RTA_PAYLOAD(a) == 4)
      memcpy(&table, RTA_DATA(a), 4);
  }
  if (table == RT_TABLE_MAIN && oif != rc->except && overlaps(ntohl(dst), rt->rtm_dst_len, rc->net, rc->prefix))
    rc->used = 1;
  return 0;
}

static int dump(int fd, int type, const void *hdr, size_t hlen, int (*cb)(struct nlmsghdr *, void *),
                void *arg) {
  struct req r;
  int rc;

  req_init(&r, type, NLM_F_DUMP, hdr, hlen);
  rc = send_req(fd, &r.h);
  return rc == 0 ? recv_answers(fd, r.h.nlmsg_seq, cb, arg) : rc;
}

int nl_range_used(int fd, uint32_t net, int prefix, int except) {
  struct range_check rc = {net & mask_of(prefix), prefix, except, 0};
  struct ifaddrmsg ifa = {.ifa_family = AF_INET};
  struct rtmsg rt = {.rtm_family = AF_INET};
  int err;

  err = dump(fd, RTM_GETADDR, &ifa, sizeof(ifa), on_addr, &rc);
  if (err == 0)
    err = dump(fd, RTM_GETROUTE, &rt, sizeof(rt), on_route, &rc);
  return err != 0 ? err : rc.used;
}
