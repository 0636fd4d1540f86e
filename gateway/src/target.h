/* target.h - what fedrouter-gateway decides about a request before any
 * byte goes upstream: which sandbox port it names (fr/gwproto.h parses
 * the URL), whether that route may be forwarded, and the one function
 * that builds the request the gateway sends to the pod.
 *
 * Pure functions of their arguments (no I/O, no loop): the unit suite
 * tests/gateway/test_target.c runs them alone.
 */
#ifndef GW_TARGET_H
#define GW_TARGET_H

#include <stddef.h>
#include <stdint.h>

#include "fr/buf.h"
#include "fr/http.h"

/* What the gateway refuses, with the HTTP status and stable code it
 * answers (docs/gateway.md, "Errors"). */
struct gw_refusal {
  int status;
  const char *code;
  const char *message;
};

/* The methods forwarded; anything else (CONNECT, TRACE, extension
 * methods) is 405 method_not_allowed. 1 if <method> is one. */
int gw_method_allowed(const char *method);

/* Whether <route> (the raw path and query fr_gw_parse() left to forward,
 * "" meaning "/") may go to a port that is (<agent_port> 1) or is not the
 * pod's agent port. The agent's internal routes are refused there: /init
 * (the router hands a sandbox its token and secrets through the API
 * server, never through the gateway) and everything under /_fr/, in any
 * case and however percent-encoded. 0, or -EPERM with <why> filled. */
int gw_route_allowed(const char *route, int agent_port, struct gw_refusal *why);

/* Framing of the body the gateway sends upstream. */
#define GW_BODY_NONE (-2)
#define GW_BODY_CHUNKED (-1)

/* The framing of request <req>'s body as the client sent it: its
 * Content-Length, GW_BODY_CHUNKED for Transfer-Encoding (http-parser
 * accepts only a final "chunked"), GW_BODY_NONE for neither. A streamed
 * request only: a buffered one (an upgrade) has req->body_len. -EINVAL
 * for a Content-Length that is not a number. */
int64_t gw_body_framing(const struct fr_http_req *req);

/* Builds the head of the request for the upstream into <out> (reset
 * first), from validated parts only:
 *   <method>   one gw_method_allowed() accepts;
 *   <ip>       the pod's address as text (from the pod cache), <port>;
 *   <route>    what fr_gw_parse() checked ("" is "/");
 *   <headers>  the client's, of which the end-to-end ones are passed on:
 *              hop-by-hop headers (Connection and the names it lists,
 *              Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding,
 *              Upgrade), Host, Content-Length, Expect and every
 *              Fr-Gateway-* header (the credential) are not;
 *   <body>     GW_BODY_NONE, GW_BODY_CHUNKED or a length;
 *   <upgrade>  an Upgrade request: its Upgrade header goes along with
 *              "Connection: Upgrade"; else "Connection: <conn>" (<conn>
 *              "keep-alive" or "close").
 * 0, -EINVAL with <why> filled (a header value with control bytes, a
 * method or address that is not one), -ENOMEM. */
int gw_upstream_head(struct fr_buf *out, const char *method, const char *ip, int port, const char *route,
                     const struct fr_http_header *headers, size_t nheaders, int64_t body, int upgrade,
                     const char *conn, struct gw_refusal *why);

/* Response headers from the upstream that the gateway passes on to the
 * client: 1 to pass <name>, 0 to drop (hop-by-hop, framing: the server
 * frames the body itself). <upgrade>: a 101, whose Upgrade and Connection
 * go along. */
int gw_response_header_passes(const char *name, int upgrade);

#endif
