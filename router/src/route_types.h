/* route_types.h - the shapes of the route table (routes.h): a row, its
 * flags, and the parsed path parameters a handler gets. Apart from the
 * table, so that a handler (which needs these types) does not depend on
 * the table that names every handler.
 */
#ifndef FR_ROUTER_ROUTE_TYPES_H
#define FR_ROUTER_ROUTE_TYPES_H

#include <stdint.h>

struct api_req;
struct fr_adapter;
struct fr_pod;

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

#endif
