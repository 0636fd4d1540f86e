/* dashboard.h - the built-in dashboard page (GET /dashboard).
 *
 * router/src/dashboard.html, compiled into the binary at build time
 * (cmake/embed_file.cmake turns it into a byte array): one self-contained
 * HTML page with inline CSS and JavaScript that reads /v1/clusters,
 * /v1/pools, /v1/policy and /v1/events. Serve it as
 * "text/html; charset=utf-8".
 */
#ifndef FR_ROUTER_DASHBOARD_H
#define FR_ROUTER_DASHBOARD_H

#include <stddef.h>

/* The page: a static, NUL-terminated buffer; its length (without the NUL)
 * goes to *<len> when <len> is not NULL. */
const char *dashboard_html(size_t *len);

#endif
