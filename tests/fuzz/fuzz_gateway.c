/* fuzz_gateway.c - what fedrouter-gateway sends a pod, whatever a request
 * target looks like: the URL parser (fr_gw_parse), the route check on the
 * agent's port (gw_route_allowed) and the one function that builds the
 * request head (gw_upstream_head).
 *
 * Input: byte 0 picks the method (GET HEAD POST PUT PATCH DELETE OPTIONS),
 * the rest is the raw request target. Checked for every target the
 * gateway would forward:
 *   - its route (what follows /v1/proxy/<ns>/<pod>/<port>) passes
 *     fr_url_path_check and fr_url_query_check again, and is the same
 *     path after RFC 3986 dot-segment removal (no server on the way can
 *     make it another);
 *   - the head's request line is "<method> <route or /> HTTP/1.1", its
 *     Host the pod's address, and the head holds exactly one blank line
 *     (nothing a target carries can add a header or a second request);
 *   - on the agent's port, an allowed route never decodes (any case) to
 *     /init or a path under /_fr.
 * A violation aborts with the target.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/gwproto.h"
#include "fr/http.h"
#include "fr/urlsafe.h"
#include "target.h"

static void die(const char *what, const char *target) {
  fprintf(stderr, "fuzz_gateway: %s: %s\n", what, target);
  abort();
}

/* RFC 3986 5.2.4 remove_dot_segments on raw <in> (no decoding). */
static void remove_dots(const char *in, char *out, size_t cap) {
  size_t o = 0;

  while (*in != '\0') {
    if (strncmp(in, "../", 3) == 0)
      in += 3;
    else if (strncmp(in, "./", 2) == 0 || strncmp(in, "/./", 3) == 0)
      in += strncmp(in, "./", 2) == 0 ? 2 : 2;
    else if (strcmp(in, "/.") == 0)
      in = "/";
    else if (strncmp(in, "/../", 4) == 0 || strcmp(in, "/..") == 0) {
      in = in[3] == '\0' ? "/" : in + 3;
      while (o > 0 && out[--o] != '/')
        ;
    } else if (strcmp(in, ".") == 0 || strcmp(in, "..") == 0) {
      in += strlen(in);
    } else {
      size_t n = strcspn(in + 1, "/") + 1;
      if (o + n >= cap)
        n = cap - o - 1;
      memcpy(out + o, in, n);
      o += n;
      in += n;
    }
  }
  out[o] = '\0';
}

static int decodes_to_internal(const char *route) {
  char d[4096];
  size_t i, o = 0;

  for (i = 0; route[i] != '\0' && route[i] != '?' && o + 1 < sizeof(d); i++) {
    int c = (unsigned char)route[i];
    if (c == '%' && isxdigit((unsigned char)route[i + 1]) && isxdigit((unsigned char)route[i + 2])) {
      char hex[3] = {route[i + 1], route[i + 2], 0};
      c = (int)strtol(hex, NULL, 16);
      i += 2;
    }
    d[o++] = (char)tolower(c);
  }
  d[o] = '\0';
  return strcmp(d, "/init") == 0 || strncmp(d, "/init/", 6) == 0 || strcmp(d, "/_fr") == 0 ||
         strncmp(d, "/_fr/", 5) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const methods[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
  struct fr_http_header hs[2] = {{(char *)"X-Access-Token", (char *)"tok"}, {(char *)"Upgrade", (char *)"websocket"}};
  char target[4096], norm[4096], line[4200];
  const char *method, *route, *q;
  struct fr_gw_target t;
  struct gw_refusal why;
  struct fr_buf head;
  size_t off, plen, n;
  int upgrade;

  if (size < 1 || size >= sizeof(target))
    return 0;
  method = methods[data[0] % 7];
  upgrade = data[0] >= 0x80;
  memcpy(target, data + 1, size - 1);
  target[size - 1] = '\0';
  if (strlen(target) != size - 1)
    return 0; /* a NUL never reaches the gateway: the HTTP core refuses it */
  if (fr_gw_parse(target, &t, &off, NULL, NULL) != 0)
    return 0;
  route = target + off;
  q = strchr(route, '?');
  plen = q != NULL ? (size_t)(q - route) : strlen(route);
  if (plen > 0) {
    if (fr_url_path_check(route, plen, NULL) != 0)
      die("a route that fails the path check", target);
    memcpy(norm, route, plen);
    norm[plen] = '\0';
    {
      char once[4096];
      remove_dots(norm, once, sizeof(once));
      if (strcmp(once, norm) != 0)
        die("a route that dot-segment removal changes", target);
    }
  }
  if (q != NULL && fr_url_query_check(q + 1, strlen(q + 1), NULL) != 0)
    die("a query that fails the query check", target);
  if (gw_route_allowed(route, 1, &why) == 0 && decodes_to_internal(route))
    die("an internal agent route allowed", target);
  fr_buf_init(&head);
  if (gw_upstream_head(&head, method, "10.1.2.3", t.port, route, hs, upgrade ? 2 : 1, GW_BODY_NONE, upgrade,
                       "keep-alive", &why) == 0) {
    n = (size_t)snprintf(line, sizeof(line), "%s %s%s HTTP/1.1\r\nHost: 10.1.2.3:%d\r\n", method,
                         route[0] == '/' ? "" : "/", route, t.port);
    if (head.len < n || memcmp(head.data, line, n) != 0)
      die("a request line or Host other than the checked parts", target);
    if (strstr(head.data, "\r\n\r\n") != head.data + head.len - 4)
      die("a head with more than one blank line", target);
  }
  fr_buf_free(&head);
  return 0;
}
