/* keys.c - the signature key ring: files in, fr_gw_keyring out; reloaded
 * on the thread pool so a Secret volume update (current and previous key
 * swapped by the kubelet) reaches a running gateway without a restart.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/log.h"
#include "fr/util.h"
#include "gateway.h"

#define LOGC "gateway"

/* The file's bytes less trailing white space, FR_GW_KEY_MIN to
 * FR_GW_KEY_MAX of them. An empty file is no key (a Secret's "previous"
 * outside a rotation): *<len> 0, returns 0. */
static int read_key(const char *path, unsigned char **key, size_t *len, char *err, size_t errlen) {
  unsigned char buf[FR_GW_KEY_MAX + 2];
  FILE *f = fopen(path, "rb");
  size_t n;

  *key = NULL;
  *len = 0;
  if (f == NULL) {
    snprintf(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
    return -EINVAL;
  }
  n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  if (n == 0) {
    memset(buf, 0, sizeof(buf));
    return 0;
  }
  if (n < FR_GW_KEY_MIN || n > FR_GW_KEY_MAX) {
    memset(buf, 0, sizeof(buf));
    snprintf(err, errlen, "key file %s holds %zu bytes; a key needs %d to %d (make one with: "
             "head -c 32 /dev/urandom | base64 > FILE)", path, n, FR_GW_KEY_MIN, FR_GW_KEY_MAX);
    return -EINVAL;
  }
  *key = malloc(n);
  if (*key == NULL) {
    memset(buf, 0, sizeof(buf));
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  memcpy(*key, buf, n);
  memset(buf, 0, sizeof(buf));
  *len = n;
  return 0;
}

void gw_keys_free(struct fr_gw_keyring *ring) {
  size_t i;

  for (i = 0; i < ring->n; i++) {
    if (ring->k[i].key != NULL)
      memset(ring->k[i].key, 0, ring->k[i].len); /* a secret: not left in freed memory */
    free(ring->k[i].key);
  }
  memset(ring, 0, sizeof(*ring));
}

int gw_keys_load(const char *const *paths, struct fr_gw_keyring *ring, char *err, size_t errlen) {
  struct fr_gw_keyring r;
  size_t i;
  int rc;

  memset(&r, 0, sizeof(r));
  for (i = 0; paths[i] != NULL; i++) {
    unsigned char *key;
    size_t len;
    if (i == FR_GW_MAX_KEYS) {
      snprintf(err, errlen, "at most %d key files", FR_GW_MAX_KEYS);
      gw_keys_free(&r);
      return -EINVAL;
    }
    if ((rc = read_key(paths[i], &key, &len, err, errlen)) != 0) {
      gw_keys_free(&r);
      return rc;
    }
    if (key == NULL)
      continue;
    r.k[r.n].key = key;
    r.k[r.n].len = len;
    r.n++;
  }
  if (r.n == 0) {
    snprintf(err, errlen, "no key: every key file is empty");
    return -EINVAL;
  }
  *ring = r;
  return 0;
}

struct reload {
  uv_work_t work;
  struct gw *g;
  const char *const *paths;
  struct fr_gw_keyring ring;
  int rc;
  char err[300];
};

static void reload_work(uv_work_t *w) {
  struct reload *r = fr_container_of(w, struct reload, work);

  r->rc = gw_keys_load(r->paths, &r->ring, r->err, sizeof(r->err));
}

static int same_ring(const struct fr_gw_keyring *a, const struct fr_gw_keyring *b) {
  size_t i;

  if (a->n != b->n)
    return 0;
  for (i = 0; i < a->n; i++)
    if (a->k[i].len != b->k[i].len || memcmp(a->k[i].key, b->k[i].key, a->k[i].len) != 0)
      return 0;
  return 1;
}

static void reload_done(uv_work_t *w, int status) {
  struct reload *r = fr_container_of(w, struct reload, work);
  struct gw *g = r->g;

  g->keys_reloading = 0;
  if (status != 0 || r->rc != 0) {
    g->m.key_reload_errors++;
    FR_WARN(LOGC, "key ring not reloaded, the previous one stays: %s", status != 0 ? uv_strerror(status) : r->err);
    gw_keys_free(&r->ring);
  } else if (same_ring(&g->ring, &r->ring)) {
    gw_keys_free(&r->ring);
  } else {
    g->m.key_reloads++;
    gw_keys_free(&g->ring);
    g->ring = r->ring;
    FR_INFO(LOGC, "key ring reloaded: %zu key(s)", g->ring.n);
  }
  free(r);
}

void gw_keys_reload(struct gw *g, const char *const *paths) {
  struct reload *r;

  if (g->keys_reloading || paths == NULL || paths[0] == NULL)
    return;
  r = calloc(1, sizeof(*r));
  if (r == NULL)
    return;
  r->g = g;
  r->paths = paths;
  if (uv_queue_work(g->loop, &r->work, reload_work, reload_done) != 0) {
    free(r);
    return;
  }
  g->keys_reloading = 1;
}
