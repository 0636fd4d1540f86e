/* netlink.h - the few rtnetlink requests kubesim's pod network needs
 * (podnet.c: the bridge, in kubesim; podinit.c: a pod's veth pair and
 * addresses, in its init). Blocking calls on a socket of the caller's:
 * kubesim makes them at start and exit only, never from its loop.
 *
 * Every function returns 0 or a negative errno (the kernel's answer).
 */
#ifndef KUBESIM_NETLINK_H
#define KUBESIM_NETLINK_H

#include <stddef.h>
#include <stdint.h>

/* A NETLINK_ROUTE socket (close() it); fd, or -errno. */
int nl_open(void);
/* The index of link <name> in the caller's network namespace; -ENODEV
 * when there is none. */
int nl_link_index(int fd, const char *name);
/* Deletes link <name>; -ENODEV when there is none. */
int nl_link_del(int fd, const char *name);
/* Creates bridge <name> with MAC address <mac>. A bridge given none takes
 * its lowest port's, so it would change as ports come and go, and what is
 * behind the ports would keep sending to the old one until their
 * neighbour entries expire: a stall of tens of seconds. */
int nl_bridge_add(int fd, const char *name, const unsigned char mac[6]);
/* Creates a veth pair: <name> here, attached to bridge <master> (an
 * index), and its peer <peer> in the network namespace <peer_nsfd>. */
int nl_veth_add(int fd, const char *name, int master, const char *peer, int peer_nsfd);
/* Sets link <ifindex> up. */
int nl_link_up(int fd, int ifindex);
/* Adds IPv4 address <addr> (host order) / <prefix> to link <ifindex>. */
int nl_addr_add(int fd, int ifindex, uint32_t addr, int prefix);
/* 1 if an IPv4 address of a link other than <except> (an index, 0 = none)
 * or a route of the main table lies in <net>/<prefix> (host order), else
 * 0; -errno when the dumps fail. */
int nl_range_used(int fd, uint32_t net, int prefix, int except);

#endif
