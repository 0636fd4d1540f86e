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

#include "route_types.h"

struct fr_http_req;

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
