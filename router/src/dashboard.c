/* dashboard.c - the built-in dashboard page, see dashboard.h. */
#include "dashboard.h"

/* dashboard_html.inc is generated from dashboard.html by
 * cmake/embed_file.cmake: the file's bytes as "0x3c,0x21,...," lines. A NUL
 * follows so the page is also a C string. */
static const unsigned char page[] = {
#include "dashboard_html.inc"
    0x00};

const char *dashboard_html(size_t *len) {
  if (len != NULL)
    *len = sizeof(page) - 1;
  return (const char *)page;
}
