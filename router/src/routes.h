/* routes.h - the one table of the router's routes (routes.c): every
 * method and path the router serves, with its handler, what it needs
 * before the handler runs, and its metrics label. 404, 405 with Allow,
 * "does this request stream its body" and the label all come from it;
 * handlers get the parsed path parameters and never look at a path.
 *
 * A pattern is a path whose segments may be parameters: {id} (a sandbox
 * id), {name} (a pool name), {pid} (a process id), {svc} and {rpc} (an
 * agent service and method), one segment each; a last {tail*} takes the
 * rest of the path, empty or not. Rows are tried in table order; the first
 * row whose pattern and method match wins. A path some rows match but no
 * row with its method answers 405 naming their methods.
 */
#ifndef FR_ROUTER_ROUTES_H
#define FR_ROUTER_ROUTES_H

#include <stddef.h>
#include <stdint.h>

struct api_req;
struct fr_adapter;
struct fr_pod;
struct fr_http_req;

/* What the dispatcher does before the handler. */
enum route_flags {
  RF_PUBLIC = 1 << 0,      /* no tenant needed (health, metrics, dashboard) */
  RF_HEALTH = 1 << 1,      /* also served on the health listener */
  RF_TENANT = 1 << 2,      /* Authorization: Bearer <tenant token>, then the tenant's in-flight bound */
  RF_E2B = 1 << 3,         /* the E2B endpoint: its own auth and answer shapes (e2b.c) */
  RF_E2B_SANDBOX = 1 << 4, /* an E2B call into a sandbox (E2b-Sandbox-Id; e2b.c checks the access token) */
  RF_SANDBOX = 1 << 5,     /* {id} names one of the tenant's sandboxes: found first (404/503 otherwise) */
  RF_REACH = 1 << 6,       /* ... and its node is Ready (503 sandbox_unreachable otherwise) */
  RF_STREAM_BODY = 1 << 7, /* the request body is streamed to the handler, not buffered */
  RF_RESUME = 1 << 8,      /* a call into a sandbox: a paused one created with auto_resume is resumed first */
};

/* The parsed path of a matched request. Strings point into <buf>. */
struct route_params {
  const char *id, *name, *svc, *rpc, *tail;
  int64_t pid;                 /* {pid}: a positive integer (checked), else 0 */
  int port;                    /* {port}: 1-65535 (checked), else 0 */
  struct fr_adapter *a;        /* RF_SANDBOX: the sandbox's cluster */
  const struct fr_pod *pod;    /* RF_SANDBOX: the sandbox's pod (valid during the handler) */
  char buf[1024];
  char canon[320];             /* RF_SANDBOX: <id> as "<cluster>.<pod>" (a short id resolved) */
};

typedef void (*route_fn)(struct api_req *q, const struct route_params *p);

struct route {
  const char *method;          /* "GET" (also HEAD), "POST", ...; "*" any */
  const char *pattern;
  route_fn fn;
  unsigned flags;
  const char *label;           /* metrics label; NULL: the pattern */
};

/* Finds the row for <method> <path>: 0 and *<out> (with <p> filled), or
 * -ENOENT (no row's pattern matches: 404), -EMSGSIZE (a parameter too long
 * for struct route_params: 404 too), or -EPERM (rows match the path, none
 * the method: <allow> gets "Allow: GET, POST\r\n"). <health_only>: only
 * RF_HEALTH rows. */
int route_match(const char *method, const char *path, int health_only, const struct route **out,
                struct route_params *p, char *allow, size_t allow_cap);

/* The metrics label of <method> <path> ("/v1/sandboxes/{id}/files"), or
 * "other" when no row matches, "unparsed" for NULL. */
const char *route_label(const char *method, const char *path);

/* 1 if the request whose head is <req> streams its body (its row has
 * RF_STREAM_BODY, and for E2B it carries E2b-Sandbox-Id). */
int route_streams_body(const struct fr_http_req *req);

/* Runs the request of <q> (authenticated as its row says) or answers
 * 404/405; <health_only> for the health listener. */
void route_dispatch(struct api_req *q, int health_only);

#endif
