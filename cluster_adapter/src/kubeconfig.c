/* kubeconfig.c - a kubeconfig (YAML) in, the credentials of one context out.
 *
 * libyaml's document API gives the tree (nodes with their source marks, so
 * every message can say "<path>:<line>:"); this file walks it the way
 * client-go's clientcmd does: context -> cluster + user, relative file
 * paths against the kubeconfig's folder, the same "only one of X and
 * X-data" rules. Unknown fields are ignored as kubectl ignores them, but a
 * near miss ("tokenfile") is logged with a did-you-mean, because silently
 * dropping a credential turns into a puzzling 401 much later.
 */
#include "fr/kubeconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "fr/log.h"
#include "fr/util.h"

/* Bounds every file we read. Real kubeconfigs with dozens of clusters and
 * embedded certificates stay well under 1 MiB; the bound only stops a
 * mistaken path (/dev/zero, a disk image) from eating memory. */
#define MAX_FILE_BYTES (16u << 20)

/* client-go supports these two; v1alpha1 was removed in Kubernetes 1.24. */
#define EXEC_API_V1 "client.authentication.k8s.io/v1"
#define EXEC_API_V1BETA1 "client.authentication.k8s.io/v1beta1"

struct ld {
  const char *path;      /* the kubeconfig, as given (for messages) */
  char *dir;             /* its folder, absolute, no trailing '/' (except "/") */
  yaml_document_t doc;
  char *err;
  size_t errlen;
};

/* ---------------------------------------------------------------------- */
/* errors                                                                  */

/* Writes "<path>:<line>: <message>" (or "<path>: " when <line> is 0) into
 * the caller's buffer and returns <rc>. */
static int vfail(struct ld *ld, unsigned long line, int rc, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static int vfail(struct ld *ld, unsigned long line, int rc, const char *fmt, va_list ap) {
  int n;

  if (ld->err == NULL || ld->errlen == 0)
    return rc;
  if (line > 0)
    n = snprintf(ld->err, ld->errlen, "%s:%lu: ", ld->path, line);
  else
    n = snprintf(ld->err, ld->errlen, "%s: ", ld->path);
  if (n >= 0 && (size_t)n < ld->errlen)
    vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
  return rc;
}

static int fail(struct ld *ld, const yaml_node_t *at, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(struct ld *ld, const yaml_node_t *at, int rc, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  /* libyaml marks are 0-based; editors count lines from 1. */
  rc = vfail(ld, at ? (unsigned long)at->start_mark.line + 1 : 0, rc, fmt, ap);
  va_end(ap);
  return rc;
}

static int fail_line(struct ld *ld, unsigned long line, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_line(struct ld *ld, unsigned long line, int rc, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  rc = vfail(ld, line, rc, fmt, ap);
  va_end(ap);
  return rc;
}

static int nomem(struct ld *ld) {
  return fail(ld, NULL, -ENOMEM, "out of memory");
}

/* Edit distance capped at 3: only "distance <= 2" matters here. */
static unsigned levenshtein_le2(const char *a, const char *b) {
  size_t d = fr_edit_distance(a, b);

  return d > 3 ? 3 : (unsigned)d;
}

/* ---------------------------------------------------------------------- */
/* files and paths                                                         */

/* Reads <path> whole into a NUL-terminated buffer. 0 or -errno (-EFBIG
 * past MAX_FILE_BYTES, -EISDIR for a folder). */
static int slurp(const char *path, char **out, size_t *len) {
  struct stat st;
  size_t cap = 4096, n = 0;
  char *buf = NULL, *nb;
  ssize_t r;
  int fd, rc;

  *out = NULL;
  *len = 0;
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  if (fstat(fd, &st) != 0) {
    rc = -errno;
    goto fail;
  }
  if (S_ISDIR(st.st_mode)) {
    rc = -EISDIR;
    goto fail;
  }
  if (S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size < MAX_FILE_BYTES)
    cap = (size_t)st.st_size + 1;
  for (;;) {
    if (buf == NULL || n + 1 >= cap) {
      if (buf != NULL)
        cap *= 2;
      if (cap > MAX_FILE_BYTES + 1)
        cap = MAX_FILE_BYTES + 1;
      if (buf != NULL && n + 1 >= cap) {
        rc = -EFBIG;
        goto fail;
      }
      nb = realloc(buf, cap);
      if (nb == NULL) {
        rc = -ENOMEM;
        goto fail;
      }
      buf = nb;
    }
    r = read(fd, buf + n, cap - n - 1);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      rc = -errno;
      goto fail;
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
fail:
  free(buf);
  close(fd);
  return rc;
}

/* The header promises -ENOENT, -EINVAL or -ENOMEM: a missing file stays
 * -ENOENT, any other unreadable file is a configuration error. */
static int file_rc(int rc) {
  return rc == -ENOENT || rc == -ENOMEM ? rc : -EINVAL;
}

static const char *file_error(int rc) {
  return rc == -EFBIG ? "larger than 16 MiB" : strerror(-rc);
}

static char *join_path(const char *dir, const char *rel) {
  size_t ld = strlen(dir), lr = strlen(rel);
  int slash = ld > 0 && dir[ld - 1] != '/';
  char *p = malloc(ld + (size_t)slash + lr + 1);

  if (p == NULL)
    return NULL;
  memcpy(p, dir, ld);
  if (slash)
    p[ld] = '/';
  memcpy(p + ld + (size_t)slash, rel, lr + 1);
  return p;
}

/* The kubeconfig's folder as an absolute path, so every path resolved
 * against it (tokenFile in particular, re-read later) stays valid whatever
 * the working directory becomes. Symlinks are kept: a projected
 * service-account token is a symlink that is swapped on rotation. */
static int set_dir(struct ld *ld) {
  const char *p = ld->path, *slash;
  char cwd[PATH_MAX], *d;
  size_t n;

  while (p[0] == '.' && p[1] == '/')
    p += 2;
  slash = strrchr(p, '/');
  n = slash ? (size_t)(slash - p) : 0;
  if (slash == p)
    n = 1; /* "/kubeconfig" lives in "/" */
  if (p[0] == '/') {
    ld->dir = strndup(p, n);
    return ld->dir ? 0 : nomem(ld);
  }
  if (getcwd(cwd, sizeof(cwd)) == NULL)
    return fail(ld, NULL, -EINVAL, "cannot resolve relative paths: getcwd: %s", strerror(errno));
  d = strndup(p, n);
  if (d == NULL)
    return nomem(ld);
  ld->dir = n > 0 ? join_path(cwd, d) : strdup(cwd);
  free(d);
  return ld->dir ? 0 : nomem(ld);
}

static char *resolve_path(const struct ld *ld, const char *p) {
  return p[0] == '/' ? strdup(p) : join_path(ld->dir, p);
}

/* ---------------------------------------------------------------------- */
/* the YAML tree                                                           */

static yaml_node_t *node_at(struct ld *ld, int id) {
  return yaml_document_get_node(&ld->doc, id);
}

/* YAML null: absent, empty, or a plain ~ / null (what Go's decoder treats
 * as "unset"). */
static int is_null(const yaml_node_t *n) {
  const char *v;

  if (n == NULL)
    return 1;
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return 0;
  v = (const char *)n->data.scalar.value;
  return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
         strcmp(v, "NULL") == 0;
}

static const char *scalar(const yaml_node_t *n) {
  return (const char *)n->data.scalar.value;
}

static const char *type_name(const yaml_node_t *n) {
  switch (n->type) {
  case YAML_MAPPING_NODE:
    return "a mapping";
  case YAML_SEQUENCE_NODE:
    return "a list";
  default:
    return "a string";
  }
}

/* The value of <key> in mapping <map>, or NULL. A repeated key yields the
 * last value, as Go's decoder keeps the last one. <keynode> (may be NULL)
 * gets the key, whose line is the natural place to point at. */
static yaml_node_t *map_get(struct ld *ld, const yaml_node_t *map, const char *key, yaml_node_t **keynode) {
  yaml_node_pair_t *p;
  yaml_node_t *k, *v = NULL;

  if (keynode != NULL)
    *keynode = NULL;
  if (map == NULL || map->type != YAML_MAPPING_NODE)
    return NULL;
  for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    k = node_at(ld, p->key);
    if (k != NULL && k->type == YAML_SCALAR_NODE && strcmp(scalar(k), key) == 0) {
      v = node_at(ld, p->value);
      if (keynode != NULL)
        *keynode = k;
    }
  }
  return v;
}

/* String field <key> of <map> (for messages, <what> is "cluster \"x\"").
 * *<out> is NULL when absent or null; a mapping or list is an error. <at>
 * (may be NULL) gets the node to point at. */
static int get_str(struct ld *ld, const yaml_node_t *map, const char *key, const char *what,
                   const char **out, yaml_node_t **at) {
  yaml_node_t *k, *v = map_get(ld, map, key, &k);

  *out = NULL;
  if (at != NULL)
    *at = v ? v : k;
  if (is_null(v))
    return 0;
  if (v->type != YAML_SCALAR_NODE)
    return fail(ld, v, -EINVAL, "%s: %s must be a string, not %s", what, key, type_name(v));
  if (strlen(scalar(v)) != v->data.scalar.length)
    return fail(ld, v, -EINVAL, "%s: %s contains a NUL character", what, key);
  *out = scalar(v);
  return 0;
}

/* Boolean field: YAML 1.1 spellings, as Go's yaml.v2 accepts them. */
static int get_bool(struct ld *ld, const yaml_node_t *map, const char *key, const char *what, int *out) {
  static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"};
  static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"};
  yaml_node_t *v = map_get(ld, map, key, NULL);
  size_t i;

  *out = 0;
  if (is_null(v))
    return 0;
  if (v->type == YAML_SCALAR_NODE) {
    for (i = 0; i < FR_ARRAY_SIZE(yes); i++) {
      if (strcmp(scalar(v), yes[i]) == 0) {
        *out = 1;
        return 0;
      }
      if (strcmp(scalar(v), no[i]) == 0)
        return 0;
    }
    return fail(ld, v, -EINVAL, "%s: %s must be true or false, not \"%s\"", what, key, scalar(v));
  }
  return fail(ld, v, -EINVAL, "%s: %s must be true or false, not %s", what, key, type_name(v));
}

/* Mapping field: *<out> is NULL when absent or null. */
static int get_map(struct ld *ld, const yaml_node_t *map, const char *key, const char *what, yaml_node_t **out) {
  yaml_node_t *v = map_get(ld, map, key, NULL);

  *out = NULL;
  if (is_null(v))
    return 0;
  if (v->type != YAML_MAPPING_NODE)
    return fail(ld, v, -EINVAL, "%s: %s must be a mapping, not %s", what, key, type_name(v));
  *out = v;
  return 0;
}

/* Logs fields of <map> that are not in <known> but within edit distance 2
 * of one that is: almost certainly a typo that would otherwise vanish. */
static void warn_near_misses(struct ld *ld, const yaml_node_t *map, const char *const *known, size_t n,
                             const char *what) {
  yaml_node_pair_t *p;
  yaml_node_t *k;
  size_t i;
  int exact;

  if (map == NULL || map->type != YAML_MAPPING_NODE)
    return;
  for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    const char *best = NULL;
    unsigned bd = 3, d;

    k = node_at(ld, p->key);
    if (k == NULL || k->type != YAML_SCALAR_NODE)
      continue;
    exact = 0;
    for (i = 0; i < n && !exact; i++) {
      exact = strcmp(scalar(k), known[i]) == 0;
      d = levenshtein_le2(scalar(k), known[i]);
      if (d < bd) {
        bd = d;
        best = known[i];
      }
    }
    if (!exact && best != NULL)
      FR_WARN("kubeconfig", "%s:%lu: %s: unknown field \"%s\" ignored (did you mean \"%s\"?)", ld->path,
              (unsigned long)k->start_mark.line + 1, what, scalar(k), best);
  }
}

/* ---------------------------------------------------------------------- */
/* named lists: clusters, contexts, users                                  */

struct named {
  yaml_node_t *body;       /* the "cluster:"/"context:"/"user:" mapping; NULL if null */
  yaml_node_t *name_node;  /* the entry's name value */
};

/* Appends "(did you mean \"x\"?)" or "(known: a, b)" for <name> among the
 * entries of <list> into <out>. */
static void suggest(struct ld *ld, const yaml_node_t *list, const char *name, const char *plural, char *out,
                    size_t cap) {
  yaml_node_item_t *it;
  const char *best = NULL;
  unsigned bd = 3, d;
  size_t used = 0, shown = 0, total = 0;
  int n;

  out[0] = '\0';
  if (list != NULL && list->type == YAML_SEQUENCE_NODE) {
    for (it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++) {
      const char *nm = NULL;
      yaml_node_t *nn = map_get(ld, node_at(ld, *it), "name", NULL);

      if (nn == NULL || nn->type != YAML_SCALAR_NODE)
        continue;
      nm = scalar(nn);
      total++;
      d = name[0] != '\0' ? levenshtein_le2(name, nm) : 3;
      if (d < bd) {
        bd = d;
        best = nm;
      }
    }
  }
  if (best != NULL) {
    snprintf(out, cap, " (did you mean \"%s\"?)", best);
    return;
  }
  if (total == 0) {
    snprintf(out, cap, " (the kubeconfig has no %s)", plural);
    return;
  }
  n = snprintf(out, cap, " (%s: ", plural);
  used = n > 0 && (size_t)n < cap ? (size_t)n : cap;
  for (it = list->data.sequence.items.start; it < list->data.sequence.items.top && used < cap; it++) {
    yaml_node_t *nn = map_get(ld, node_at(ld, *it), "name", NULL);

    if (nn == NULL || nn->type != YAML_SCALAR_NODE)
      continue;
    if (shown == 5) {
      n = snprintf(out + used, cap - used, ", ... %zu more", total - shown);
      used = n > 0 && (size_t)n < cap - used ? used + (size_t)n : cap;
      break;
    }
    n = snprintf(out + used, cap - used, "%s\"%s\"", shown ? ", " : "", scalar(nn));
    used = n > 0 && (size_t)n < cap - used ? used + (size_t)n : cap;
    shown++;
  }
  if (used < cap)
    snprintf(out + used, cap - used, ")");
}

/* Finds the entry called <name> in the top-level list <plural> ("contexts")
 * whose body key is <singular> ("context"). <ref_at> and <ref_what> say who
 * asked, for the not-found message: NULL <ref_what> means the context
 * itself was asked for (by current-context or by the caller). */
static int find_named(struct ld *ld, const yaml_node_t *root, const char *plural, const char *singular,
                      const char *name, const yaml_node_t *ref_at, const char *ref_what, struct named *out) {
  yaml_node_t *key, *list = map_get(ld, root, plural, &key), *item, *nn;
  yaml_node_item_t *it;
  char hint[512];
  int idx = 0, rc;

  memset(out, 0, sizeof(*out));
  if (!is_null(list) && list->type != YAML_SEQUENCE_NODE)
    return fail(ld, list, -EINVAL, "%s must be a list of {name, %s}, not %s", plural, singular, type_name(list));
  if (!is_null(list)) {
    for (it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++, idx++) {
      const char *nm;
      yaml_node_t *body;
      char what[64];

      item = node_at(ld, *it);
      snprintf(what, sizeof(what), "%s[%d]", plural, idx);
      if (item == NULL || item->type != YAML_MAPPING_NODE)
        return fail(ld, item, -EINVAL, "%s must be a mapping with name and %s", what, singular);
      if ((rc = get_str(ld, item, "name", what, &nm, &nn)) != 0)
        return rc;
      if (nm == NULL || strcmp(nm, name) != 0)
        continue;
      if (out->name_node != NULL)
        return fail(ld, nn, -EINVAL, "%s \"%s\" is defined twice (first at line %lu)", singular, name,
                    (unsigned long)out->name_node->start_mark.line + 1);
      if ((rc = get_map(ld, item, singular, what, &body)) != 0)
        return rc;
      out->name_node = nn;
      out->body = body;
    }
  }
  if (out->name_node != NULL)
    return 0;
  suggest(ld, is_null(list) ? NULL : list, name, plural, hint, sizeof(hint));
  if (ref_what == NULL)
    return fail(ld, ref_at ? ref_at : key, -ENOENT, "%s \"%s\" not found%s", singular, name, hint);
  return fail(ld, ref_at, -ENOENT, "%s: %s \"%s\" not found in %s%s", ref_what, singular, name, plural, hint);
}

/* ---------------------------------------------------------------------- */
/* certificates and keys                                                   */

static int has_pem(const char *s, size_t n) {
  static const char marker[] = "-----BEGIN ";
  size_t i;

  for (i = 0; i + sizeof(marker) - 1 <= n; i++)
    if (memcmp(s + i, marker, sizeof(marker) - 1) == 0)
      return 1;
  return 0;
}

/* <field>-data: base64 of a PEM file. Whitespace is dropped first (a long
 * value may be folded over lines). */
static int decode_pem(struct ld *ld, const yaml_node_t *at, const char *what, const char *field, const char *b64,
                      char **out, size_t *len) {
  size_t n = strlen(b64), i, m = 0;
  char *clean = malloc(n + 1);
  unsigned char *bin;
  long dl;

  if (clean == NULL)
    return nomem(ld);
  for (i = 0; i < n; i++)
    if (b64[i] != ' ' && b64[i] != '\t' && b64[i] != '\r' && b64[i] != '\n')
      clean[m++] = b64[i];
  clean[m] = '\0';
  /* "-----BEGIN..." minus its spaces is valid URL-safe base64, so catch
   * pasted PEM text before it decodes into garbage. */
  if (strncmp(clean, "-----BEGIN", 10) == 0) {
    free(clean);
    return fail(ld, at, -EINVAL, "%s: %s holds PEM text, not base64 (base64-encode it, or use %.*s with a file)",
                what, field, (int)(strlen(field) - 5), field);
  }
  bin = malloc(m / 4 * 3 + 4);
  if (bin == NULL) {
    free(clean);
    return nomem(ld);
  }
  dl = fr_base64_decode(clean, m, bin);
  free(clean);
  if (dl < 0) {
    free(bin);
    return fail(ld, at, -EINVAL, "%s: %s is not valid base64", what, field);
  }
  if (!has_pem((const char *)bin, (size_t)dl)) {
    free(bin);
    return fail(ld, at, -EINVAL, "%s: %s does not decode to PEM (expected base64 of a \"-----BEGIN ...\" file)",
                what, field);
  }
  bin[dl] = '\0';
  *out = (char *)bin;
  *len = (size_t)dl;
  return 0;
}

static int load_pem_file(struct ld *ld, const yaml_node_t *at, const char *what, const char *field, const char *p,
                         char **out, size_t *len) {
  char *full = resolve_path(ld, p), *data;
  size_t n;
  int rc;

  if (full == NULL)
    return nomem(ld);
  rc = slurp(full, &data, &n);
  if (rc != 0) {
    rc = fail(ld, at, file_rc(rc), "%s: cannot read %s \"%s\": %s", what, field, full, file_error(rc));
    free(full);
    return rc;
  }
  if (!has_pem(data, n)) {
    free(data);
    rc = fail(ld, at, -EINVAL, "%s: %s \"%s\" is not a PEM file (no \"-----BEGIN\" line)", what, field, full);
    free(full);
    return rc;
  }
  free(full);
  *out = data;
  *len = n;
  return 0;
}

/* One of <field> (a file) or <field>-data (base64), never both, as
 * client-go's validation has it. *<out> stays NULL when neither is set. */
static int get_pem(struct ld *ld, const yaml_node_t *map, const char *field, const char *what, char **out,
                   size_t *len, yaml_node_t **at_out) {
  char data_field[64];
  const char *file, *data;
  yaml_node_t *fat, *dat;
  int rc;

  *out = NULL;
  *len = 0;
  snprintf(data_field, sizeof(data_field), "%s-data", field);
  if ((rc = get_str(ld, map, field, what, &file, &fat)) != 0 ||
      (rc = get_str(ld, map, data_field, what, &data, &dat)) != 0)
    return rc;
  if (file != NULL && file[0] == '\0')
    file = NULL;
  if (data != NULL && data[0] == '\0')
    data = NULL;
  if (at_out != NULL)
    *at_out = data ? dat : fat;
  if (file != NULL && data != NULL)
    return fail(ld, dat, -EINVAL, "%s: both %s and %s are set; keep only one", what, field, data_field);
  if (data != NULL)
    return decode_pem(ld, dat, what, data_field, data, out, len);
  if (file != NULL)
    return load_pem_file(ld, fat, what, field, file, out, len);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* cluster, user, exec                                                     */

static int dup_into(struct ld *ld, char **dst, const char *s) {
  free(*dst);
  *dst = NULL;
  if (s == NULL)
    return 0;
  *dst = strdup(s);
  return *dst ? 0 : nomem(ld);
}

static int resolve_cluster(struct ld *ld, const struct named *cl, struct fr_kube_creds *c) {
  static const char *const known[] = {"server", "certificate-authority", "certificate-authority-data",
                                      "insecure-skip-tls-verify", "tls-server-name", "proxy-url",
                                      "disable-compression", "extensions"};
  const yaml_node_t *m = cl->body;
  const char *server, *s;
  yaml_node_t *at, *ca_at;
  char what[300];
  size_t n;
  int rc;

  snprintf(what, sizeof(what), "cluster \"%s\"", c->cluster_name);
  warn_near_misses(ld, m, known, FR_ARRAY_SIZE(known), what);
  if ((rc = get_str(ld, m, "server", what, &server, &at)) != 0)
    return rc;
  if (server == NULL || server[0] == '\0')
    return fail(ld, cl->name_node, -EINVAL, "%s has no server (add server: https://HOST:PORT)", what);
  if (strncasecmp(server, "https://", 8) != 0 && strncasecmp(server, "http://", 7) != 0)
    return fail(ld, at, -EINVAL, "%s: server \"%s\" must start with https:// or http://", what, server);
  s = strstr(server, "://") + 3;
  if (*s == '\0' || *s == '/')
    return fail(ld, at, -EINVAL, "%s: server \"%s\" has no host", what, server);
  if ((rc = dup_into(ld, &c->server, server)) != 0)
    return rc;
  n = strlen(c->server);
  while (n > 0 && c->server[n - 1] == '/')
    c->server[--n] = '\0';

  if ((rc = get_pem(ld, m, "certificate-authority", what, &c->ca_pem, &c->ca_len, &ca_at)) != 0)
    return rc;
  if ((rc = get_bool(ld, m, "insecure-skip-tls-verify", what, &c->insecure)) != 0)
    return rc;
  /* client-go refuses this too: "specifying a root certificates file with
   * the insecure flag is not allowed". */
  if (c->insecure && c->ca_pem != NULL)
    return fail(ld, ca_at, -EINVAL, "%s: insecure-skip-tls-verify and a certificate authority are both set; "
                "keep only one", what);
  if ((rc = get_str(ld, m, "tls-server-name", what, &s, NULL)) != 0 ||
      (rc = dup_into(ld, &c->tls_server_name, s && *s ? s : NULL)) != 0)
    return rc;
  if ((rc = get_str(ld, m, "proxy-url", what, &s, &at)) != 0)
    return rc;
  if (s != NULL && *s != '\0') {
    if (strncasecmp(s, "http://", 7) != 0 && strncasecmp(s, "https://", 8) != 0 &&
        strncasecmp(s, "socks5://", 9) != 0)
      return fail(ld, at, -EINVAL, "%s: proxy-url \"%s\" must start with http://, https:// or socks5://", what, s);
    if ((rc = dup_into(ld, &c->proxy_url, s)) != 0)
      return rc;
  }
  return 0;
}

/* A NULL-terminated array of strings, from a YAML list of scalars. */
static int get_args(struct ld *ld, const yaml_node_t *exec, const char *what, char ***out) {
  yaml_node_t *list = map_get(ld, exec, "args", NULL), *v;
  yaml_node_item_t *it;
  size_t n, i = 0;
  char **a;

  *out = NULL;
  if (is_null(list))
    return 0;
  if (list->type != YAML_SEQUENCE_NODE)
    return fail(ld, list, -EINVAL, "%s: exec args must be a list of strings, not %s", what, type_name(list));
  n = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
  a = calloc(n + 1, sizeof(*a));
  if (a == NULL)
    return nomem(ld);
  *out = a;
  for (it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++, i++) {
    v = node_at(ld, *it);
    if (v == NULL || v->type != YAML_SCALAR_NODE)
      return fail(ld, v, -EINVAL, "%s: exec args[%zu] must be a string, not %s", what, i,
                  v ? type_name(v) : "nothing");
    a[i] = strdup(is_null(v) ? "" : scalar(v));
    if (a[i] == NULL)
      return nomem(ld);
  }
  return 0;
}

/* "NAME=value" strings from a YAML list of {name, value}. */
static int get_env(struct ld *ld, const yaml_node_t *exec, const char *what, char ***out) {
  yaml_node_t *list = map_get(ld, exec, "env", NULL), *v, *nat;
  yaml_node_item_t *it;
  size_t n, i = 0, ln, lv;
  const char *name, *value;
  char **e, ewhat[340];
  int rc;

  *out = NULL;
  if (is_null(list))
    return 0;
  if (list->type != YAML_SEQUENCE_NODE)
    return fail(ld, list, -EINVAL, "%s: exec env must be a list of {name, value}, not %s", what, type_name(list));
  n = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
  e = calloc(n + 1, sizeof(*e));
  if (e == NULL)
    return nomem(ld);
  *out = e;
  for (it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++, i++) {
    v = node_at(ld, *it);
    snprintf(ewhat, sizeof(ewhat), "%s: exec env[%zu]", what, i);
    if (v == NULL || v->type != YAML_MAPPING_NODE)
      return fail(ld, v, -EINVAL, "%s must be a mapping {name, value}, not %s", ewhat, v ? type_name(v) : "nothing");
    if ((rc = get_str(ld, v, "name", ewhat, &name, &nat)) != 0 ||
        (rc = get_str(ld, v, "value", ewhat, &value, NULL)) != 0)
      return rc;
    if (name == NULL || name[0] == '\0')
      return fail(ld, v, -EINVAL, "%s has no name", ewhat);
    if (strchr(name, '=') != NULL)
      return fail(ld, nat, -EINVAL, "%s: name \"%s\" must not contain '='", ewhat, name);
    if (value == NULL)
      value = "";
    ln = strlen(name);
    lv = strlen(value);
    e[i] = malloc(ln + lv + 2);
    if (e[i] == NULL)
      return nomem(ld);
    memcpy(e[i], name, ln);
    e[i][ln] = '=';
    memcpy(e[i] + ln + 1, value, lv + 1);
  }
  return 0;
}

static int resolve_exec(struct ld *ld, const yaml_node_t *m, const char *what, struct fr_kube_creds *c) {
  static const char *const known[] = {"command", "args", "env", "apiVersion", "installHint", "provideClusterInfo",
                                      "interactiveMode"};
  struct fr_kube_exec_plugin *x;
  const char *api, *cmd;
  yaml_node_t *at, *cat;
  int rc;

  warn_near_misses(ld, m, known, FR_ARRAY_SIZE(known), what);
  if ((rc = get_str(ld, m, "apiVersion", what, &api, &at)) != 0 ||
      (rc = get_str(ld, m, "command", what, &cmd, &cat)) != 0)
    return rc;
  if (cmd == NULL || cmd[0] == '\0')
    return fail(ld, m, -EINVAL, "%s: exec has no command", what);
  if (api == NULL || api[0] == '\0')
    return fail(ld, m, -EINVAL, "%s: exec has no apiVersion (use " EXEC_API_V1 ")", what);
  if (strcmp(api, EXEC_API_V1) != 0 && strcmp(api, EXEC_API_V1BETA1) != 0)
    return fail(ld, at, -EINVAL, "%s: exec apiVersion \"%s\" is not supported (use " EXEC_API_V1 " or "
                EXEC_API_V1BETA1 ")", what, api);
  x = calloc(1, sizeof(*x));
  if (x == NULL)
    return nomem(ld);
  c->exec = x;
  if ((rc = dup_into(ld, &x->api_version, api)) != 0)
    return rc;
  /* Like client-go: a command with a '/' in it is a path, and a relative
   * one is relative to the kubeconfig; a bare name is looked up in PATH. */
  if (strchr(cmd, '/') != NULL && cmd[0] != '/') {
    x->command = join_path(ld->dir, cmd);
    if (x->command == NULL)
      return nomem(ld);
  } else if ((rc = dup_into(ld, &x->command, cmd)) != 0) {
    return rc;
  }
  if ((rc = get_args(ld, m, what, &x->args)) != 0 || (rc = get_env(ld, m, what, &x->env)) != 0)
    return rc;
  /* Callers iterate without a NULL check. */
  if (x->args == NULL && (x->args = calloc(1, sizeof(char *))) == NULL)
    return nomem(ld);
  if (x->env == NULL && (x->env = calloc(1, sizeof(char *))) == NULL)
    return nomem(ld);
  return 0;
}

static void trim(char *s, size_t *len) {
  size_t n = *len, b = 0;

  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
    n--;
  while (b < n && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r' || s[b] == '\n'))
    b++;
  memmove(s, s + b, n - b);
  s[n - b] = '\0';
  *len = n - b;
}

static int resolve_user(struct ld *ld, const struct named *us, struct fr_kube_creds *c) {
  static const char *const known[] = {"client-certificate", "client-certificate-data", "client-key",
                                      "client-key-data", "token", "tokenFile", "as", "as-uid", "as-groups",
                                      "as-user-extra", "username", "password", "auth-provider", "exec",
                                      "extensions"};
  static const char *const unsupported[][2] = {
      {"auth-provider", "auth-provider plugins are not supported; use an exec plugin "
                        "(gke-gcloud-auth-plugin, kubelogin, aws eks get-token)"},
      {"username", "basic auth (username/password) is not supported; use a token, a client certificate or an exec "
                   "plugin"},
      {"password", "basic auth (username/password) is not supported; use a token, a client certificate or an exec "
                   "plugin"},
      {"as", "impersonation (as) is not supported"},
      {"as-uid", "impersonation (as-uid) is not supported"},
      {"as-groups", "impersonation (as-groups) is not supported"},
  };
  const yaml_node_t *m = us->body;
  const char *tok, *tf;
  yaml_node_t *at, *cert_at, *key_at, *exec;
  char what[300], *data;
  size_t i, n;
  int rc;

  snprintf(what, sizeof(what), "user \"%s\"", c->user_name);
  warn_near_misses(ld, m, known, FR_ARRAY_SIZE(known), what);
  /* Refuse rather than ignore: dropping these would send requests with
   * the wrong identity (or none), which fails far from the cause. */
  for (i = 0; i < FR_ARRAY_SIZE(unsupported); i++) {
    yaml_node_t *k, *v = map_get(ld, m, unsupported[i][0], &k);
    if (!is_null(v))
      return fail(ld, k, -EINVAL, "%s: %s", what, unsupported[i][1]);
  }
  if ((rc = get_str(ld, m, "token", what, &tok, NULL)) != 0 ||
      (rc = dup_into(ld, &c->token, tok && *tok ? tok : NULL)) != 0)
    return rc;
  if ((rc = get_str(ld, m, "tokenFile", what, &tf, &at)) != 0)
    return rc;
  if (tf != NULL && tf[0] != '\0') {
    c->token_file = resolve_path(ld, tf);
    if (c->token_file == NULL)
      return nomem(ld);
    rc = slurp(c->token_file, &data, &n);
    if (rc != 0)
      return fail(ld, at, file_rc(rc), "%s: cannot read tokenFile \"%s\": %s", what, c->token_file,
                  file_error(rc));
    trim(data, &n);
    if (n == 0) {
      free(data);
      return fail(ld, at, -EINVAL, "%s: tokenFile \"%s\" is empty", what, c->token_file);
    }
    /* client-go prefers the file's content over a static token on every
     * request, so the file wins here too. */
    free(c->token);
    c->token = data;
  }

  if ((rc = get_pem(ld, m, "client-certificate", what, &c->client_cert_pem, &c->client_cert_len, &cert_at)) != 0 ||
      (rc = get_pem(ld, m, "client-key", what, &c->client_key_pem, &c->client_key_len, &key_at)) != 0)
    return rc;
  if (c->client_cert_pem != NULL && c->client_key_pem == NULL)
    return fail(ld, cert_at, -EINVAL, "%s: client-certificate is set without client-key (or client-key-data)",
                what);
  if (c->client_key_pem != NULL && c->client_cert_pem == NULL)
    return fail(ld, key_at, -EINVAL,
                "%s: client-key is set without client-certificate (or client-certificate-data)", what);

  if ((rc = get_map(ld, m, "exec", what, &exec)) != 0)
    return rc;
  if (exec != NULL && (rc = resolve_exec(ld, exec, what, c)) != 0)
    return rc;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* the whole file                                                          */

static int resolve(struct ld *ld, const char *want, struct fr_kube_creds *c) {
  static const char *const ctx_known[] = {"cluster", "user", "namespace", "extensions"};
  yaml_node_t *root = yaml_document_get_root_node(&ld->doc), *cur_at = NULL, *cl_at, *us_at;
  struct named ctx, cl, us;
  const char *kind, *cluster, *user, *ns;
  char what[300];
  int rc;

  if (root == NULL)
    return fail(ld, NULL, -EINVAL, "empty kubeconfig (expected clusters, contexts and users)");
  if (root->type != YAML_MAPPING_NODE)
    return fail(ld, root, -EINVAL, "a kubeconfig is a mapping (apiVersion, kind, clusters, contexts, users), "
                "not %s", type_name(root));
  if ((rc = get_str(ld, root, "kind", "kubeconfig", &kind, &cur_at)) != 0)
    return rc;
  if (kind != NULL && kind[0] != '\0' && strcmp(kind, "Config") != 0)
    return fail(ld, cur_at, -EINVAL, "kind is \"%s\"; a kubeconfig has kind: Config", kind);
  cur_at = NULL;
  if (want == NULL) {
    if ((rc = get_str(ld, root, "current-context", "kubeconfig", &want, &cur_at)) != 0)
      return rc;
    if (want == NULL || want[0] == '\0') {
      char hint[512];

      suggest(ld, map_get(ld, root, "contexts", NULL), "", "contexts", hint, sizeof(hint));
      return fail(ld, cur_at, -EINVAL, "no current-context set; name a context%s", hint);
    }
  }
  if ((rc = find_named(ld, root, "contexts", "context", want, cur_at, NULL, &ctx)) != 0)
    return rc;
  if ((rc = dup_into(ld, &c->context, want)) != 0)
    return rc;
  snprintf(what, sizeof(what), "context \"%s\"", want);
  warn_near_misses(ld, ctx.body, ctx_known, FR_ARRAY_SIZE(ctx_known), what);
  if ((rc = get_str(ld, ctx.body, "cluster", what, &cluster, &cl_at)) != 0 ||
      (rc = get_str(ld, ctx.body, "user", what, &user, &us_at)) != 0 ||
      (rc = get_str(ld, ctx.body, "namespace", what, &ns, NULL)) != 0)
    return rc;
  if (cluster == NULL || cluster[0] == '\0')
    return fail(ld, ctx.name_node, -EINVAL, "%s names no cluster", what);
  if ((rc = dup_into(ld, &c->ns, ns && *ns ? ns : NULL)) != 0)
    return rc;
  if ((rc = find_named(ld, root, "clusters", "cluster", cluster, cl_at, what, &cl)) != 0)
    return rc;
  if ((rc = dup_into(ld, &c->cluster_name, cluster)) != 0 || (rc = resolve_cluster(ld, &cl, c)) != 0)
    return rc;
  /* A context without a user is anonymous access (a local http cluster). */
  if (user != NULL && user[0] != '\0') {
    if ((rc = find_named(ld, root, "users", "user", user, us_at, what, &us)) != 0)
      return rc;
    if ((rc = dup_into(ld, &c->user_name, user)) != 0 || (rc = resolve_user(ld, &us, c)) != 0)
      return rc;
  }
  return 0;
}

static int yaml_error(struct ld *ld, const yaml_parser_t *p) {
  const char *problem = p->problem ? p->problem : "malformed YAML";

  switch (p->error) {
  case YAML_MEMORY_ERROR:
    return nomem(ld);
  case YAML_READER_ERROR:
    return fail(ld, NULL, -EINVAL, "byte %zu: %s (a kubeconfig is UTF-8 text)", p->problem_offset, problem);
  default:
    if (p->context != NULL)
      return fail_line(ld, (unsigned long)p->problem_mark.line + 1, -EINVAL,
                       "YAML syntax error at column %lu: %s (%s at line %lu)", (unsigned long)p->problem_mark.column + 1,
                       problem, p->context, (unsigned long)p->context_mark.line + 1);
    return fail_line(ld, (unsigned long)p->problem_mark.line + 1, -EINVAL, "YAML syntax error at column %lu: %s",
                     (unsigned long)p->problem_mark.column + 1, problem);
  }
}

int fr_kubeconfig_load(const char *path, const char *context, struct fr_kube_creds **out, char *err,
                       size_t errlen) {
  struct ld ld;
  struct fr_kube_creds *c = NULL;
  yaml_parser_t parser;
  int parser_ok = 0, doc_ok = 0, rc;
  char *text = NULL;
  size_t len;

  memset(&ld, 0, sizeof(ld));
  ld.path = path ? path : "(null)";
  ld.err = err;
  ld.errlen = errlen;
  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (out == NULL)
    return fail(&ld, NULL, -EINVAL, "no place for the result");
  *out = NULL;
  if (path == NULL || path[0] == '\0')
    return fail(&ld, NULL, -EINVAL, "no kubeconfig path given");

  rc = slurp(path, &text, &len);
  if (rc != 0) {
    rc = fail(&ld, NULL, file_rc(rc), "cannot read kubeconfig: %s", file_error(rc));
    goto fail;
  }
  if ((rc = set_dir(&ld)) != 0)
    goto fail;
  if (!yaml_parser_initialize(&parser)) {
    rc = nomem(&ld);
    goto fail;
  }
  parser_ok = 1;
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  /* Only the first document counts, as in kubectl. Aliases stay shared
   * nodes (no expansion), so "billion laughs" input costs nothing. */
  if (!yaml_parser_load(&parser, &ld.doc)) {
    rc = yaml_error(&ld, &parser);
    goto fail;
  }
  doc_ok = 1;
  c = calloc(1, sizeof(*c));
  if (c == NULL) {
    rc = nomem(&ld);
    goto fail;
  }
  if ((rc = resolve(&ld, context, c)) != 0)
    goto fail;
  *out = c;
  c = NULL;
  rc = 0;
fail:
  fr_kube_creds_free(c);
  if (doc_ok)
    yaml_document_delete(&ld.doc);
  if (parser_ok)
    yaml_parser_delete(&parser);
  free(ld.dir);
  free(text);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* in-cluster                                                              */

/* <dir>/<name>, read whole (and trimmed with <trim_it>); -errno with <err> set. */
static int read_sa_file(const char *dir, const char *name, int trim_it, char **out, size_t *len, char *err,
                        size_t errlen) {
  char *path = join_path(dir, name);
  int rc;

  *out = NULL;
  if (path == NULL) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  rc = slurp(path, out, len);
  if (rc != 0)
    snprintf(err, errlen, "in-cluster config: cannot read %s: %s", path, file_error(rc));
  else if (trim_it)
    trim(*out, len);
  free(path);
  return rc;
}

int fr_kubeconfig_in_cluster(const struct fr_in_cluster_opts *o, struct fr_kube_creds **out, char *err,
                             size_t errlen) {
  const char *dir = o != NULL ? o->dir : NULL, *host = o != NULL ? o->host : NULL;
  const char *port = o != NULL ? o->port : NULL, *pns = getenv("POD_NAMESPACE");
  struct fr_kube_creds *c = NULL;
  char *data = NULL, dummy[8];
  size_t n;
  int64_t pv;
  int rc;

  if (err == NULL || errlen == 0) {
    err = dummy;
    errlen = sizeof(dummy);
  }
  err[0] = '\0';
  if (out == NULL)
    return -EINVAL;
  *out = NULL;
  if (dir == NULL)
    dir = getenv("FR_SERVICEACCOUNT_DIR");
  if (dir == NULL || dir[0] == '\0')
    dir = FR_SERVICEACCOUNT_DIR_DEFAULT;
  if (host == NULL)
    host = getenv("KUBERNETES_SERVICE_HOST");
  if (port == NULL)
    port = getenv("KUBERNETES_SERVICE_PORT");
  /* client-go's ErrNotInCluster: both must be set. */
  if (host == NULL || host[0] == '\0' || port == NULL || port[0] == '\0') {
    snprintf(err, errlen, "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
             "(not running in a pod?)");
    return -ENOENT;
  }
  if (strlen(host) > 253 || strpbrk(host, "/@?#[] ") != NULL || fr_parse_int64(port, 1, 65535, &pv) != 0) {
    snprintf(err, errlen, "in-cluster config: KUBERNETES_SERVICE_HOST \"%.64s\" / KUBERNETES_SERVICE_PORT "
             "\"%.16s\" are not a host and a port", host, port);
    return -EINVAL;
  }
  c = calloc(1, sizeof(*c));
  if (c == NULL)
    goto oom;
  /* An IPv6 address goes in brackets (Go's net.JoinHostPort). */
  n = strlen(host) + 32;
  if ((c->server = malloc(n)) == NULL)
    goto oom;
  snprintf(c->server, n, strchr(host, ':') != NULL ? "https://[%s]:%lld" : "https://%s:%lld", host, (long long)pv);
  if ((c->context = strdup("in-cluster")) == NULL || (c->cluster_name = strdup("in-cluster")) == NULL ||
      (c->user_name = strdup("serviceaccount")) == NULL)
    goto oom;
  /* The token is read now to fail early on a pod without one; the client
   * reads the file again before it expires. */
  if ((c->token_file = join_path(dir, "token")) == NULL)
    goto oom;
  rc = read_sa_file(dir, "token", 1, &data, &n, err, errlen);
  if (rc != 0) {
    rc = rc == -ENOENT || rc == -ENOMEM ? rc : -EINVAL;
    goto fail;
  }
  if (n == 0 || strchr(data, '\n') != NULL) {
    snprintf(err, errlen, "in-cluster config: %s/token %s", dir, n == 0 ? "is empty" : "spans several lines");
    rc = -EINVAL;
    goto fail;
  }
  c->token = data;
  data = NULL;
  rc = read_sa_file(dir, "ca.crt", 0, &c->ca_pem, &c->ca_len, err, errlen);
  if (rc != 0) {
    rc = rc == -ENOMEM ? rc : -EINVAL;
    goto fail;
  }
  if (!has_pem(c->ca_pem, c->ca_len)) {
    snprintf(err, errlen, "in-cluster config: %s/ca.crt is not a PEM file", dir);
    rc = -EINVAL;
    goto fail;
  }
  if (pns != NULL && pns[0] != '\0') {
    if ((c->ns = strdup(pns)) == NULL)
      goto oom;
  } else if (read_sa_file(dir, "namespace", 1, &data, &n, err, errlen) == 0 && n > 0) {
    c->ns = data;
    data = NULL;
  }
  free(data);
  err[0] = '\0';
  *out = c;
  return 0;
oom:
  snprintf(err, errlen, "out of memory");
  rc = -ENOMEM;
fail:
  free(data);
  fr_kube_creds_free(c);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* copies                                                                  */

static int dup_str(char **dst, const char *src) {
  *dst = NULL;
  if (src == NULL)
    return 0;
  *dst = strdup(src);
  return *dst ? 0 : -ENOMEM;
}

/* Blobs keep their trailing NUL so they can also be used as strings. */
static int dup_blob(char **dst, const char *src, size_t len) {
  *dst = NULL;
  if (src == NULL)
    return 0;
  *dst = malloc(len + 1);
  if (*dst == NULL)
    return -ENOMEM;
  memcpy(*dst, src, len);
  (*dst)[len] = '\0';
  return 0;
}

static int dup_strv(char ***dst, char *const *src) {
  size_t n = 0, i;

  *dst = NULL;
  if (src == NULL)
    return 0;
  while (src[n] != NULL)
    n++;
  *dst = calloc(n + 1, sizeof(**dst));
  if (*dst == NULL)
    return -ENOMEM;
  for (i = 0; i < n; i++)
    if (((*dst)[i] = strdup(src[i])) == NULL)
      return -ENOMEM;
  return 0;
}

static void free_strv(char **v) {
  size_t i;

  if (v == NULL)
    return;
  for (i = 0; v[i] != NULL; i++)
    free(v[i]);
  free(v);
}

static void exec_free(struct fr_kube_exec_plugin *x) {
  if (x == NULL)
    return;
  free(x->api_version);
  free(x->command);
  free_strv(x->args);
  free_strv(x->env);
  free(x);
}

struct fr_kube_creds *fr_kube_creds_dup(const struct fr_kube_creds *c) {
  struct fr_kube_creds *d;

  if (c == NULL)
    return NULL;
  d = calloc(1, sizeof(*d));
  if (d == NULL)
    return NULL;
  d->insecure = c->insecure;
  d->ca_len = c->ca_len;
  d->client_cert_len = c->client_cert_len;
  d->client_key_len = c->client_key_len;
  if (dup_str(&d->context, c->context) != 0 || dup_str(&d->cluster_name, c->cluster_name) != 0 ||
      dup_str(&d->user_name, c->user_name) != 0 || dup_str(&d->ns, c->ns) != 0 ||
      dup_str(&d->server, c->server) != 0 || dup_blob(&d->ca_pem, c->ca_pem, c->ca_len) != 0 ||
      dup_str(&d->tls_server_name, c->tls_server_name) != 0 || dup_str(&d->proxy_url, c->proxy_url) != 0 ||
      dup_str(&d->token, c->token) != 0 || dup_str(&d->token_file, c->token_file) != 0 ||
      dup_blob(&d->client_cert_pem, c->client_cert_pem, c->client_cert_len) != 0 ||
      dup_blob(&d->client_key_pem, c->client_key_pem, c->client_key_len) != 0)
    goto fail;
  if (c->exec != NULL) {
    d->exec = calloc(1, sizeof(*d->exec));
    if (d->exec == NULL || dup_str(&d->exec->api_version, c->exec->api_version) != 0 ||
        dup_str(&d->exec->command, c->exec->command) != 0 || dup_strv(&d->exec->args, c->exec->args) != 0 ||
        dup_strv(&d->exec->env, c->exec->env) != 0)
      goto fail;
  }
  return d;
fail:
  fr_kube_creds_free(d);
  return NULL;
}

void fr_kube_creds_free(struct fr_kube_creds *c) {
  if (c == NULL)
    return;
  free(c->context);
  free(c->cluster_name);
  free(c->user_name);
  free(c->ns);
  free(c->server);
  free(c->ca_pem);
  free(c->tls_server_name);
  free(c->proxy_url);
  free(c->token);
  free(c->token_file);
  free(c->client_cert_pem);
  free(c->client_key_pem);
  exec_free(c->exec);
  free(c);
}
