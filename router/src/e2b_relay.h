/* e2b_relay.h - calls into a sandbox through the E2B endpoint
 * (e2b_relay.c); the relays of envd's routes are route handlers (api.h).
 * Private to router/src.
 */
#ifndef FR_ROUTER_E2B_RELAY_H
#define FR_ROUTER_E2B_RELAY_H

struct api_req;

/* E2B's call to port <port_text> of sandbox <id> other than envd's, by
 * <tenant> (NULL: the access or traffic token alone proves it); answers. */
void e2b__port_relay(struct api_req *q, const char *id, const char *tenant, const char *port_text);

#endif
