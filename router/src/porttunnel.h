/* porttunnel.h - upgrades (WebSocket, ...) to a sandbox's own ports
 * (porttunnel.c). */
#ifndef FR_ROUTER_PORTTUNNEL_H
#define FR_ROUTER_PORTTUNNEL_H

#include "fr/http.h"

struct api_req;
struct fr_adapter;

/* Does <req> ask for an upgrade (Upgrade, and Connection naming upgrade)? */
int port_tunnel_wanted(const struct fr_http_req *req);
/* Passes upgrade request <q> to port <port> of sandbox <id> (canonical, of
 * adapter <a>) with <path_query> and <headers> ("Name: value\n" lines, the
 * client's end-to-end ones); answers the client one way or another and
 * calls <done>(<done_arg>) once the tunnel, or the attempt, is over. The
 * caller has checked access and the port. */
void port_tunnel_start(struct api_req *q, struct fr_adapter *a, const char *id, int port, const char *path_query,
                       const char *headers, void (*done)(void *arg), void *done_arg);

#endif
