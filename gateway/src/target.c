/* target.c - routes a gateway may forward and the request it sends
 * upstream (target.h). */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fr/gwproto.h"
#include "fr/util.h"
#include "target.h"

static int refuse(struct gw_refusal *why, int status, const char *code, const char *message) {
  if (why != NULL) {
    why->status = status;
    why->code = code;
    why->message = message;
  }
  return status == 503 ? -ENOMEM : status == 403 ? -EPERM : -EINVAL;
}

int gw_method_allowed(const char *method) {
  static const char *const ok[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
  size_t i;

  for (i = 0; method != NULL && i < FR_ARRAY_SIZE(ok); i++)
    if (strcmp(method, ok[i]) == 0)
      return 1;
  return 0;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* 1 if decoded, lower-cased <p> is <name> or starts with <name> + "/". */
static int is_under(const char *p, const char *name) {
  size_t n = strlen(name);

  return strncmp(p, name, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

int gw_route_allowed(const char *route, int agent_port, struct gw_refusal *why) {
  char path[128];
  size_t i, o = 0;

  if (!agent_port)
    return 0;
  /* Decoded and lower-cased, the way the agent (or anything) could read
   * it: "/%69nit", "/INIT" and "/_Fr/x" are /init and /_fr/x. The route
   * passed fr_url_path_check(), so no escape decodes to '/', '.', '%' or
   * a control byte: only the first 127 bytes can matter for the prefixes
   * compared here. */
  for (i = 0; route[i] != '\0' && route[i] != '?' && o + 1 < sizeof(path); i++) {
    int c = (unsigned char)route[i], hi, lo;
    if (c == '%' && (hi = hexval((unsigned char)route[i + 1])) >= 0 && (lo = hexval((unsigned char)route[i + 2])) >= 0) {
      c = hi * 16 + lo;
      i += 2;
    }
    path[o++] = (char)tolower(c);
  }
  path[o] = '\0';
  if (o == 0)
    return 0; /* "/" */
  if (is_under(path, "/init") || is_under(path, "/_fr"))
    return refuse(why, 403, "path_not_allowed",
                  "the agent's internal routes (/init, /_fr/) are not reachable through the gateway");
  return 0;
}

int64_t gw_body_framing(const struct fr_http_req *req) {
  const char *te = fr_http_req_header(req, "Transfer-Encoding");
  const char *cl = fr_http_req_header(req, "Content-Length");
  int64_t n;

  if (te != NULL)
    return GW_BODY_CHUNKED;
  if (cl == NULL)
    return GW_BODY_NONE;
  while (*cl == ' ' || *cl == '\t')
    cl++;
  if (fr_parse_int64(cl, 0, INT64_MAX, &n) != 0)
    return -EINVAL;
  return n;
}

/* 1 if the comma-separated list <list> names <token> (case-insensitive). */
static int list_has(const char *list, const char *token) {
  size_t tl = strlen(token);

  while (list != NULL && *list != '\0') {
    size_t n;
    while (*list == ' ' || *list == '\t' || *list == ',')
      list++;
    n = strcspn(list, ", \t");
    if (n == tl && strncasecmp(list, token, tl) == 0)
      return 1;
    list += n;
  }
  return 0;
}

static int is_hop_by_hop(const char *name) {
  static const char *const hop[] = {"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
                                    "Proxy-Authorization", "TE", "Trailer", "Trailers", "Transfer-Encoding",
                                    "Upgrade"};
  size_t i;

  for (i = 0; i < FR_ARRAY_SIZE(hop); i++)
    if (strcasecmp(name, hop[i]) == 0)
      return 1;
  return 0;
}

/* A header value may hold visible ASCII, obs-text, space and HTAB: any
 * other control byte (http-parser lets some through) is refused rather
 * than forwarded. */
static int value_ok(const char *v) {
  for (; *v != '\0'; v++) {
    unsigned char c = (unsigned char)*v;
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return 0;
  }
  return 1;
}

int gw_upstream_head(struct fr_buf *out, const char *method, const char *ip, int port, const char *route,
                     const struct fr_http_header *headers, size_t nheaders, int64_t body, int upgrade,
                     const char *conn, struct gw_refusal *why) {
  unsigned char addr[16];
  const char *connection = NULL, *up = NULL;
  int v6 = ip != NULL && strchr(ip, ':') != NULL, rc = 0;
  size_t i;

  fr_buf_reset(out);
  if (!gw_method_allowed(method))
    return refuse(why, 405, "method_not_allowed", "the gateway forwards GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS");
  if (ip == NULL || inet_pton(v6 ? AF_INET6 : AF_INET, ip, addr) != 1 || port < 1 || port > 65535)
    return refuse(why, 500, "internal_error", "no valid address for the sandbox");
  if (route == NULL || (route[0] != '\0' && route[0] != '/' && route[0] != '?'))
    return refuse(why, 400, "invalid_path", "the route to forward is not a path");
  for (i = 0; i < nheaders; i++) {
    if (!value_ok(headers[i].value))
      return refuse(why, 400, "invalid_header", "a header value holds control characters");
    if (strcasecmp(headers[i].name, "Connection") == 0)
      connection = headers[i].value;
    else if (strcasecmp(headers[i].name, "Upgrade") == 0)
      up = headers[i].value;
  }
  if (upgrade && up == NULL)
    return refuse(why, 400, "invalid_header", "an upgrade without an Upgrade header");
  /* Request line: the route as checked, "/" for an empty path. */
  rc |= fr_buf_printf(out, "%s %s%s HTTP/1.1\r\nHost: %s%s%s:%d\r\n", method,
                      route[0] == '/' ? "" : "/", route, v6 ? "[" : "", ip, v6 ? "]" : "", port);
  for (i = 0; i < nheaders; i++) {
    const char *n = headers[i].name;
    if (is_hop_by_hop(n) || strcasecmp(n, "Host") == 0 || strcasecmp(n, "Content-Length") == 0 ||
        strcasecmp(n, "Expect") == 0 || strncasecmp(n, "Fr-Gateway-", 11) == 0 ||
        (connection != NULL && list_has(connection, n)))
      continue;
    rc |= fr_buf_printf(out, "%s: %s\r\n", n, headers[i].value);
  }
  if (body >= 0)
    rc |= fr_buf_printf(out, "Content-Length: %lld\r\n", (long long)body);
  else if (body == GW_BODY_CHUNKED)
    rc |= fr_buf_puts(out, "Transfer-Encoding: chunked\r\n");
  if (upgrade)
    rc |= fr_buf_printf(out, "Upgrade: %s\r\nConnection: Upgrade\r\n", up);
  else
    rc |= fr_buf_printf(out, "Connection: %s\r\n", conn != NULL ? conn : "close");
  rc |= fr_buf_puts(out, "\r\n");
  if (rc != 0)
    return refuse(why, 503, "out_of_memory", "out of memory");
  return 0;
}

int gw_response_header_passes(const char *name, int upgrade) {
  if (upgrade && (strcasecmp(name, "Upgrade") == 0 || strcasecmp(name, "Connection") == 0))
    return 1;
  return !is_hop_by_hop(name) && strcasecmp(name, "Content-Length") != 0 &&
         strncasecmp(name, "Fr-Gateway-", 11) != 0;
}
