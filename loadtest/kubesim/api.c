/* api.c - the Kubernetes REST surface of kubesim: auth, injected faults,
 * discovery, OpenAPI stubs for kubectl, and generic list / get / watch /
 * create / patch / update / delete over the store. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "patch.h"
#include "sim.h"

/* ---------------------------------------------------------------------- */
/* responses                                                               */

void api_raw(struct fr_http_req *req, int code, const char *json, size_t len) {
  fr_http_respond(req, code, "application/json", NULL, json, len);
}

void api_json(struct fr_http_req *req, int code, json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

  if (s == NULL) {
    fr_http_respond(req, 500, "application/json", NULL, "{}", 2);
  } else {
    api_raw(req, code, s, strlen(s));
    free(s);
  }
  json_decref(j);
}

void api_status(struct fr_http_req *req, int code, const char *reason, const char *message,
                const char *kind, const char *name, json_t *causes) {
  json_t *st = json_pack("{s:s,s:s,s:{},s:s,s:s,s:s,s:i}", "kind", "Status", "apiVersion", "v1",
                         "metadata", "status", "Failure", "message", message, "reason", reason,
                         "code", code);

  /* An empty reason (StatusReasonUnknown) is left out, as Go's omitempty does. */
  if (st != NULL && *reason == '\0')
    json_object_del(st, "reason");

  if (st != NULL && (kind != NULL || name != NULL || causes != NULL)) {
    json_t *d = json_object();
    if (name)
      json_object_set_new(d, "name", json_string(name));
    if (kind)
      json_object_set_new(d, "kind", json_string(kind));
    if (causes)
      json_object_set(d, "causes", causes);
    json_object_set_new(st, "details", d);
  }
  api_json(req, code, st);
}

static void status_err(struct fr_http_req *req, const struct sim_err *e, const char *kind,
                       const char *name) {
  api_status(req, e->code, e->reason, e->msg, kind, name, e->causes);
  json_decref(e->causes);
}

static void not_found(struct fr_http_req *req, enum sim_kind k, const char *name) {
  char msg[512];

  snprintf(msg, sizeof(msg), "%s \"%s\" not found", kind_resource(k), name);
  api_status(req, 404, "NotFound", msg, kind_resource(k), name, NULL);
}

/* ---------------------------------------------------------------------- */
/* discovery                                                               */

static const char *const api_resources_v1 =
    "{\"kind\":\"APIResourceList\",\"groupVersion\":\"v1\",\"resources\":["
    "{\"name\":\"namespaces\",\"singularName\":\"namespace\",\"namespaced\":false,\"kind\":\"Namespace\","
    "\"verbs\":[\"create\",\"delete\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"ns\"]},"
    "{\"name\":\"namespaces/status\",\"singularName\":\"\",\"namespaced\":false,\"kind\":\"Namespace\",\"verbs\":[\"get\",\"patch\",\"update\"]},"
    "{\"name\":\"nodes\",\"singularName\":\"node\",\"namespaced\":false,\"kind\":\"Node\","
    "\"verbs\":[\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"no\"]},"
    "{\"name\":\"nodes/status\",\"singularName\":\"\",\"namespaced\":false,\"kind\":\"Node\",\"verbs\":[\"get\",\"patch\",\"update\"]},"
    "{\"name\":\"pods\",\"singularName\":\"pod\",\"namespaced\":true,\"kind\":\"Pod\","
    "\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],"
    "\"shortNames\":[\"po\"],\"categories\":[\"all\"]},"
    "{\"name\":\"pods/eviction\",\"singularName\":\"\",\"namespaced\":true,\"group\":\"policy\",\"version\":\"v1\",\"kind\":\"Eviction\",\"verbs\":[\"create\"]},"
    "{\"name\":\"pods/exec\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"PodExecOptions\",\"verbs\":[\"create\",\"get\"]},"
    "{\"name\":\"pods/log\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"Pod\",\"verbs\":[\"get\"]},"
    "{\"name\":\"pods/status\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"Pod\",\"verbs\":[\"get\",\"patch\",\"update\"]},"
    "{\"name\":\"resourcequotas\",\"singularName\":\"resourcequota\",\"namespaced\":true,\"kind\":\"ResourceQuota\","
    "\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"quota\"]},"
    "{\"name\":\"resourcequotas/status\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"ResourceQuota\",\"verbs\":[\"get\",\"patch\",\"update\"]}"
    "]}";

static const char *const api_resources_apps =
    "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"apps/v1\",\"resources\":["
    "{\"name\":\"deployments\",\"singularName\":\"deployment\",\"namespaced\":true,\"kind\":\"Deployment\","
    "\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],"
    "\"shortNames\":[\"deploy\"],\"categories\":[\"all\"]},"
    "{\"name\":\"deployments/scale\",\"singularName\":\"\",\"namespaced\":true,\"group\":\"autoscaling\",\"version\":\"v1\",\"kind\":\"Scale\",\"verbs\":[\"get\",\"patch\",\"update\"]},"
    "{\"name\":\"deployments/status\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"Deployment\",\"verbs\":[\"get\",\"patch\",\"update\"]},"
    "{\"name\":\"replicasets\",\"singularName\":\"replicaset\",\"namespaced\":true,\"kind\":\"ReplicaSet\","
    "\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],"
    "\"shortNames\":[\"rs\"],\"categories\":[\"all\"]},"
    "{\"name\":\"replicasets/scale\",\"singularName\":\"\",\"namespaced\":true,\"group\":\"autoscaling\",\"version\":\"v1\",\"kind\":\"Scale\",\"verbs\":[\"get\",\"patch\",\"update\"]},"
    "{\"name\":\"replicasets/status\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"ReplicaSet\",\"verbs\":[\"get\",\"patch\",\"update\"]}"
    "]}";

static int discovery(struct sim *s, struct fr_http_req *req) {
  char p[256], buf[1024];
  size_t len = strlen(req->path);

  /* The API server serves its discovery documents with a trailing slash
   * too (/api/, /apis/, /version/, /api/v1/: the paths the official Python
   * client's CoreApi, ApisApi, VersionApi and get_api_resources call). */
  if (len > 1 && req->path[len - 1] == '/')
    len--;
  if (len >= sizeof(p))
    return 0;
  memcpy(p, req->path, len);
  p[len] = '\0';
  if (kinds_discovery(s, req, p))
    return 1;
  if (strcmp(p, "/version") == 0) {
    snprintf(buf, sizeof(buf),
             "{\"major\":\"1\",\"minor\":\"32\",\"gitVersion\":\"v1.32.0\",\"gitCommit\":\"kubesim\","
             "\"gitTreeState\":\"clean\",\"buildDate\":\"2026-01-01T00:00:00Z\",\"goVersion\":\"go1.23\","
             "\"compiler\":\"gc\",\"platform\":\"linux/amd64\"}");
  } else if (strcmp(p, "/api") == 0) {
    snprintf(buf, sizeof(buf),
             "{\"kind\":\"APIVersions\",\"versions\":[\"v1\"],\"serverAddressByClientCIDRs\":"
             "[{\"clientCIDR\":\"0.0.0.0/0\",\"serverAddress\":\"127.0.0.1:%d\"}]}",
             fr_http_server_port(s->api));
  } else if (strcmp(p, "/api/v1") == 0) {
    kinds_resource_list(req, "", "v1", api_resources_v1);
    return 1;
  } else if (strcmp(p, "/apis/apps/v1") == 0) {
    kinds_resource_list(req, "apps", "v1", api_resources_apps);
    return 1;
  } else if (strcmp(p, "/healthz") == 0 || strcmp(p, "/readyz") == 0 || strcmp(p, "/livez") == 0) {
    fr_http_respond(req, 200, "text/plain", NULL, "ok", 2);
    return 1;
  } else {
    return 0;
  }
  api_raw(req, 200, buf, strlen(buf));
  return 1;
}

/* ---------------------------------------------------------------------- */
/* request parsing                                                         */

struct route {
  enum sim_kind kind;
  const char *ns;     /* NULL: all namespaces / cluster-scoped */
  const char *name;   /* NULL: the collection */
  const char *sub;    /* "status", "exec", "scale", "eviction" or NULL */
};

/* Splits <path> into at most <max> segments (in place in <buf>). */
static size_t split_path(const char *path, char *buf, size_t cap, char **seg, size_t max) {
  size_t n = 0, len = strlen(path);
  char *p;

  if (len + 1 > cap)
    return 0;
  memcpy(buf, path, len + 1);
  p = buf;
  while (*p == '/')
    p++;
  while (*p != '\0' && n < max) {
    char *slash = strchr(p, '/');
    seg[n++] = p;
    if (slash == NULL)
      break;
    *slash = '\0';
    p = slash + 1;
  }
  return n;
}

/* /api/v1/[namespaces/NS/]RES[/NAME[/SUB]] and /apis/GROUP/VERSION/... */
static int parse_route(const char *path, char *buf, size_t cap, struct route *r) {
  char *seg[12];
  size_t n = split_path(path, buf, cap, seg, FR_ARRAY_SIZE(seg)), i;
  const char *group = "", *version = "v1";
  int apps;

  memset(r, 0, sizeof(*r));
  if (n >= 2 && strcmp(seg[0], "api") == 0 && strcmp(seg[1], "v1") == 0) {
    apps = 0;
    i = 2;
  } else if (n >= 3 && strcmp(seg[0], "apis") == 0 && kind_group_known(seg[1], seg[2])) {
    group = seg[1];
    version = seg[2];
    apps = 1; /* a named group: no namespace objects here */
    i = 3;
  } else {
    return -ENOENT;
  }
  if (i >= n)
    return -ENOENT;
  if (strcmp(seg[i], "namespaces") == 0 && n >= i + 3) {
    r->ns = seg[i + 1];
    i += 2;
  } else if (strcmp(seg[i], "namespaces") == 0 && !apps) {
    /* the namespace objects themselves */
    r->kind = K_NAMESPACE;
    r->name = n > i + 1 ? seg[i + 1] : NULL;
    r->sub = n > i + 2 ? seg[i + 2] : NULL;
    return n > i + 3 ? -ENOENT : 0;
  }
  if (kind_lookup(group, version, seg[i], &r->kind) != 0)
    return -ENOENT;
  if (r->ns != NULL && !kind_namespaced(r->kind))
    return -ENOENT;
  r->name = n > i + 1 ? seg[i + 1] : NULL;
  r->sub = n > i + 2 ? seg[i + 2] : NULL;
  if (n > i + 3 || (r->name != NULL && *r->name == '\0'))
    return -ENOENT;
  return 0;
}

int sim_query_bool(const char *query, const char *key) {
  char v[8];
  long n = fr_http_query_get(query, key, v, sizeof(v));

  /* apimachinery's Convert_Slice_string_To_bool: absent, "0" or "false"
   * in any case is false; anything else, "" and "True" included, is true
   * (KUBE_PROTOCOL.md section 9). A value too long for <v> is neither. */
  if (n == -ENOENT)
    return 0;
  if (n < 0)
    return 1;
  return strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0;
}

/* Uniform in [0, 1); 1.0 when no randomness is to be had. */
static double rand01(void) {
  uint32_t r;

  if (fr_random_bytes(&r, sizeof(r)) != 0)
    return 1.0;
  return (double)r / 4294967296.0;
}

static int qflag(const char *query, const char *key) {
  return sim_query_bool(query, key);
}

static long qstr(const char *query, const char *key, char *out, size_t cap) {
  long n = fr_http_query_get(query, key, out, cap);

  if (n < 0)
    out[0] = '\0';
  return n;
}

static int wants_table(const struct fr_http_req *req) {
  const char *a = fr_http_req_header(req, "Accept");

  return a != NULL && strstr(a, "as=Table") != NULL;
}

static struct sim_obj *lookup(struct sim *s, const struct route *r) {
  return store_get(s, r->kind, r->ns ? r->ns : "", r->name);
}

/* ---------------------------------------------------------------------- */
/* list / watch / get                                                      */

static int parse_selectors(struct fr_http_req *req, enum sim_kind k, struct fr_selector **ls,
                           struct fr_selector **fs) {
  char text[4096], err[512], msg[700];

  *ls = *fs = NULL;
  qstr(req->query, "labelSelector", text, sizeof(text));
  if (fr_selector_parse_labels(text, ls, err, sizeof(err)) != 0) {
    snprintf(msg, sizeof(msg), "unable to parse requirement: %s", err);
    api_status(req, 400, "BadRequest", err, NULL, NULL, NULL);
    return -1;
  }
  qstr(req->query, "fieldSelector", text, sizeof(text));
  if (fr_selector_parse_fields(text, kind_field_names(k), fs, err, sizeof(err)) != 0) {
    fr_selector_free(*ls);
    *ls = NULL;
    api_status(req, 400, "BadRequest", err, NULL, NULL, NULL);
    return -1;
  }
  return 0;
}

static void handle_list(struct sim *s, struct fr_http_req *req, const struct route *r) {
  struct fr_selector *ls, *fs;
  char tmp[512], rvs[24], *cont_ns = NULL, *cont_name = NULL;
  int64_t limit = 0;
  uint64_t list_rv = s->rv;
  struct sim_obj *o;
  struct objver **vs = NULL;
  size_t n = 0, cap = 0;
  struct fr_buf b, next;
  int table = wants_table(req);
  const char *exact;

  if (parse_selectors(req, r->kind, &ls, &fs) != 0)
    return;
  if (qstr(req->query, "limit", tmp, sizeof(tmp)) > 0 &&
      (fr_parse_int64(tmp, 0, INT64_MAX, &limit) != 0)) {
    api_status(req, 400, "BadRequest", "limit must be a non-negative integer", NULL, NULL, NULL);
    goto done;
  }
  fr_buf_init(&b);
  fr_buf_init(&next);
  if (qstr(req->query, "continue", tmp, sizeof(tmp)) > 0) {
    unsigned char raw[512];
    long len = fr_base64_decode(tmp, strlen(tmp), raw);
    char *p1, *p2;
    if (len <= 0 || (size_t)len >= sizeof(raw)) {
      api_status(req, 400, "BadRequest", "continue key is not valid", NULL, NULL, NULL);
      goto done;
    }
    raw[len] = '\0';
    p1 = strchr((char *)raw, '/');
    p2 = p1 ? strchr(p1 + 1, '/') : NULL;
    if (p2 == NULL) {
      api_status(req, 400, "BadRequest", "continue key is not valid", NULL, NULL, NULL);
      goto done;
    }
    *p1 = *p2 = '\0';
    list_rv = strtoull((char *)raw, NULL, 10);
    /* The list RV must still be inside the history window, as etcd's
     * compaction would make the snapshot unreadable. */
    if (store_oldest_rv(s) != 0 && list_rv + 1 < store_oldest_rv(s)) {
      api_status(req, 410, "Expired",
                 "The provided continue parameter is too old to display a consistent list "
                 "result. You can start a new list without the continue parameter, or use the "
                 "continue token in this response to retrieve the remainder of the results.",
                 NULL, NULL, NULL);
      goto done;
    }
    cont_ns = strdup(p1 + 1);
    cont_name = strdup(p2 + 1);
    if (cont_ns == NULL || cont_name == NULL) {
      api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
      goto done;
    }
  }
  exact = fr_selector_exact(fs, "metadata.name");
  if (exact != NULL && cont_ns == NULL) {
    /* Index lookup for fieldSelector=metadata.name=X (kubectl wait/delete). */
    o = NULL;
    if (r->ns != NULL || !kind_namespaced(r->kind)) {
      o = store_get(s, r->kind, r->ns ? r->ns : "", exact);
    } else {
      for (o = store_first(s, r->kind, NULL); o != NULL; o = store_next(s, o))
        if (strcmp(o->name, exact) == 0)
          break;
    }
    if (o != NULL && fr_selector_matches(ls, objver_label, o->cur) &&
        fr_selector_matches(fs, objver_field, o->cur)) {
      vs = malloc(sizeof(*vs));
      if (vs)
        vs[n++] = o->cur;
    }
  } else {
    o = cont_ns ? store_after(s, r->kind, cont_ns, cont_name) : store_first(s, r->kind, r->ns);
    for (; o != NULL; o = store_next(s, o)) {
      if (r->ns != NULL && strcmp(o->ns, r->ns) != 0)
        break;
      /* Later pages show the list's snapshot: objects created after it
       * are left out (they arrive through a watch from the list RV). */
      if (o->create_rv > list_rv)
        continue;
      if (!fr_selector_matches(ls, objver_label, o->cur) ||
          !fr_selector_matches(fs, objver_field, o->cur))
        continue;
      if (limit > 0 && (int64_t)n == limit) {
        /* More remain: hand out a token naming the last key returned. */
        struct fr_buf tok;
        char *enc;
        fr_buf_init(&tok);
        fr_buf_printf(&tok, "%" PRIu64 "/%s/%s", list_rv, vs[n - 1]->fields[F_NAMESPACE]
                      ? vs[n - 1]->fields[F_NAMESPACE] : "", vs[n - 1]->fields[F_NAME]);
        enc = malloc(fr_base64_len(tok.len));
        if (enc) {
          fr_base64_encode(tok.data, tok.len, enc);
          fr_buf_puts(&next, enc);
        }
        free(enc);
        fr_buf_free(&tok);
        break;
      }
      if (n == cap) {
        size_t ncap = cap ? cap * 2 : 64;
        struct objver **nv = realloc(vs, ncap * sizeof(*vs));
        if (nv == NULL) {
          api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
          goto done;
        }
        vs = nv;
        cap = ncap;
      }
      vs[n++] = o->cur;
    }
  }
  snprintf(rvs, sizeof(rvs), "%" PRIu64, list_rv);
  if (table) {
    char inc[32];
    qstr(req->query, "includeObject", inc, sizeof(inc));
    table_render(s, r->kind, vs, n, rvs, next.data, strcmp(inc, "None") != 0, &b);
  } else {
    size_t i;
    fr_buf_printf(&b, "{\"kind\":\"%s\",\"apiVersion\":\"%s\",\"metadata\":{\"resourceVersion\":\"%s\"",
                  kind_list_name(r->kind), kind_api_version(r->kind), rvs);
    if (next.len)
      fr_buf_printf(&b, ",\"continue\":\"%s\"", next.data);
    fr_buf_puts(&b, "},\"items\":[");
    for (i = 0; i < n; i++) {
      if (i)
        fr_buf_putc(&b, ',');
      fr_buf_append(&b, vs[i]->json, vs[i]->json_len);
    }
    fr_buf_puts(&b, "]}");
  }
  if (b.data == NULL)
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
  else
    api_raw(req, 200, b.data, b.len);
done:
  fr_buf_free(&b);
  fr_buf_free(&next);
  free(vs);
  free(cont_ns);
  free(cont_name);
  fr_selector_free(ls);
  fr_selector_free(fs);
}

static void handle_watch(struct sim *s, struct fr_http_req *req, const struct route *r) {
  struct fr_selector *ls, *fs;
  char tmp[64];
  int64_t timeout = 0, rv = 0;
  uint64_t timeout_ms;
  int have_rv = 0;

  if (qstr(req->query, "resourceVersion", tmp, sizeof(tmp)) > 0) {
    if (fr_parse_int64(tmp, 0, INT64_MAX, &rv) != 0) {
      api_status(req, 400, "BadRequest", "resourceVersion must be an integer", NULL, NULL, NULL);
      return;
    }
    have_rv = 1;
  }
  if (qstr(req->query, "timeoutSeconds", tmp, sizeof(tmp)) > 0 &&
      fr_parse_int64(tmp, 0, 86400, &timeout) != 0) {
    api_status(req, 400, "BadRequest", "timeoutSeconds must be an integer", NULL, NULL, NULL);
    return;
  }
  if (r->name != NULL) {
    /* GET .../pods/NAME?watch=true is a watch with metadata.name. */
    char sel[300];
    snprintf(sel, sizeof(sel), "metadata.name=%s", r->name);
    if (fr_selector_parse_fields(sel, kind_field_names(r->kind), &fs, NULL, 0) != 0) {
      api_status(req, 400, "BadRequest", "invalid name", NULL, NULL, NULL);
      return;
    }
    ls = NULL;
  } else if (parse_selectors(req, r->kind, &ls, &fs) != 0) {
    return;
  }
  /* Without timeoutSeconds the API server still ends a watch, cleanly,
   * after a random time in [min-request-timeout, 2 x min-request-timeout)
   * (get.go's ListResource), so that watchers spread over its instances. */
  timeout_ms = (uint64_t)timeout * 1000;
  if (timeout_ms == 0 && s->opts.min_request_timeout > 0)
    timeout_ms = (uint64_t)(s->opts.min_request_timeout * 1000.0 * (1.0 + rand01()));
  watch_start(s, req, r->kind, r->ns, ls, fs, wants_table(req), (uint64_t)rv, have_rv,
              qflag(req->query, "allowWatchBookmarks"), timeout_ms);
}

static void handle_get(struct sim *s, struct fr_http_req *req, const struct route *r) {
  struct sim_obj *o = lookup(s, r);

  if (o == NULL) {
    not_found(req, r->kind, r->name);
    return;
  }
  if (wants_table(req)) {
    struct fr_buf b;
    char rvs[24];
    fr_buf_init(&b);
    snprintf(rvs, sizeof(rvs), "%" PRIu64, o->cur->rv);
    table_render(s, r->kind, &o->cur, 1, rvs, NULL, 1, &b);
    api_raw(req, 200, b.data ? b.data : "{}", b.len);
    fr_buf_free(&b);
    return;
  }
  api_raw(req, 200, o->cur->json, o->cur->json_len);
}

/* ---------------------------------------------------------------------- */
/* create                                                                  */

static json_t *parse_body(struct fr_http_req *req) {
  const char *ctype = fr_http_req_header(req, "Content-Type");
  json_error_t e;
  json_t *j;
  char msg[600], why[400];

  if (ctype != NULL && strncasecmp(ctype, "application/vnd.kubernetes.protobuf", 35) == 0) {
    if ((j = proto_decode(req->body, req->body_len, why, sizeof(why))) == NULL) {
      snprintf(msg, sizeof(msg), "the body of the request was in an unknown format - accepted media types "
               "include: application/json, application/vnd.kubernetes.protobuf (%s)", why);
      api_status(req, 415, "UnsupportedMediaType", msg, NULL, NULL, NULL);
    }
    return j;
  }
  j = json_loadb(req->body, req->body_len, 0, &e);
  if (j == NULL || !json_is_object(j)) {
    snprintf(msg, sizeof(msg), "the body of the request was in an unknown format - accepted "
             "media types include: application/json (%s)", j ? "not an object" : e.text);
    json_decref(j);
    api_status(req, 400, "BadRequest", msg, NULL, NULL, NULL);
    return NULL;
  }
  return j;
}

static int dns_subdomain_valid(const char *n, size_t max) {
  size_t i, len = strlen(n);

  if (len == 0 || len > max)
    return 0;
  for (i = 0; i < len; i++) {
    char c = n[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || (c == '.' && max > 63)))
      return 0;
  }
  return n[0] != '-' && n[0] != '.' && n[len - 1] != '-' && n[len - 1] != '.';
}

/* Fills metadata common to every kind and checks names and labels. */
int obj_prepare(struct sim *s, enum sim_kind k, const char *ns, json_t *j,
                        struct sim_err *e) {
  json_t *meta = json_obj(j, "metadata"), *labels;
  const char *name = json_get_str(meta, "name"), *gen = json_get_str(meta, "generateName");
  const char *jns = json_get_str(meta, "namespace"), *key;
  const char *kind = json_get_str(j, "kind"), *apiv = json_get_str(j, "apiVersion");
  char buf[300], uid[40], ts[21];
  json_t *v;

  memset(e, 0, sizeof(*e));
  if ((kind && strcmp(kind, kind_name(k)) != 0) || (apiv && strcmp(apiv, kind_api_version(k)) != 0)) {
    sim_err_set(e, 400, "BadRequest", "the API version in the data (%s) does not match the "
             "expected API version (%s)", apiv ? apiv : "", kind_api_version(k));
    return -1;
  }
  if (kind_namespaced(k)) {
    if (jns != NULL && strcmp(jns, ns) != 0) {
      sim_err_set(e, 400, "BadRequest", "the namespace of the provided object does not match "
               "the namespace sent on the request");
      return -1;
    }
    if (store_get(s, K_NAMESPACE, "", ns) == NULL) {
      sim_err_set(e, 404, "NotFound", "namespaces \"%s\" not found", ns);
      return -1;
    }
    json_object_set_new(meta, "namespace", json_string(ns));
  } else {
    json_object_del(meta, "namespace");
  }
  if ((name == NULL || *name == '\0') && gen != NULL && *gen != '\0') {
    char suffix[6];
    fr_random_name_suffix(suffix, 5);
    snprintf(buf, sizeof(buf), "%s%s", gen, suffix);
    json_object_set_new(meta, "name", json_string(buf));
    name = json_get_str(meta, "name");
  }
  if (name == NULL || !dns_subdomain_valid(name, k == K_NAMESPACE ? 63 : 253)) {
    sim_err_set(e, 422, "Invalid", "%s \"%s\" is invalid: metadata.name: %s", kind_name(k),
             name ? name : "", name ? "Invalid value: a lowercase RFC 1123 subdomain must consist "
             "of lower case alphanumeric characters, '-' or '.', and must start and end with an "
             "alphanumeric character" : "Required value: name or generateName is required");
    e->causes = json_pack("[{s:s,s:s,s:s}]", "reason", name ? "FieldValueInvalid" : "FieldValueRequired",
                          "message", name ? "Invalid value" : "Required value", "field", "metadata.name");
    return -1;
  }
  labels = json_object_get(meta, "labels");
  json_object_foreach(labels, key, v) {
    if (!fr_label_key_valid(key) || !json_is_string(v) || !fr_label_value_valid(json_string_value(v))) {
      sim_err_set(e, 422, "Invalid", "%s \"%s\" is invalid: metadata.labels: Invalid value: \"%s\"",
               kind_name(k), name, json_is_string(v) && fr_label_key_valid(key) ? json_string_value(v) : key);
      e->causes = json_pack("[{s:s,s:s,s:s}]", "reason", "FieldValueInvalid", "message",
                            "Invalid value", "field", "metadata.labels");
      return -1;
    }
  }
  if (store_get(s, k, kind_namespaced(k) ? ns : "", name) != NULL) {
    sim_err_set(e, 409, "AlreadyExists", "%s \"%s\" already exists", kind_resource(k), name);
    return -1;
  }
  uid_new(uid);
  now_rfc3339(ts);
  json_object_set_new(meta, "uid", json_string(uid));
  json_object_set_new(meta, "creationTimestamp", json_string(ts));
  json_object_del(meta, "deletionTimestamp");
  json_object_del(meta, "resourceVersion");
  json_object_set_new(j, "kind", json_string(kind_name(k)));
  json_object_set_new(j, "apiVersion", json_string(kind_api_version(k)));
  return 0;
}

static int quota_spec_valid(json_t *j, struct sim_err *e) {
  json_t *hard = json_path(j, "spec.hard");
  const char *k, *bad = NULL;
  json_t *v;
  int64_t m;

  if (quantities_normalize(hard, &bad) != 0) {
    sim_err_set(e, 422, "Invalid", "ResourceQuota is invalid: spec.hard[%s]: Invalid value", bad);
    return -1;
  }
  json_object_foreach(hard, k, v) {
    if (!json_is_string(v) || fr_quantity_parse_milli(json_string_value(v), &m) != 0 || m < 0) {
      sim_err_set(e, 422, "Invalid", "ResourceQuota is invalid: spec.hard[%s]: Invalid value", k);
      return -1;
    }
  }
  return 0;
}

/* dryRun=All: validate and answer without storing (anything else but
 * absent is a 400, as on the API server). Sets <dry>; -1 after answering. */
static int dry_run(struct fr_http_req *req, int *dry) {
  char v[32];

  *dry = 0;
  if (qstr(req->query, "dryRun", v, sizeof(v)) < 0)
    return 0;
  if (strcmp(v, "All") != 0) {
    char msg[128];
    snprintf(msg, sizeof(msg), "dryRun: Unsupported value: \"%.32s\": supported values: \"All\"", v);
    api_status(req, 400, "BadRequest", msg, NULL, NULL, NULL);
    return -1;
  }
  *dry = 1;
  return 0;
}

static void handle_create(struct sim *s, struct fr_http_req *req, const struct route *r) {
  json_t *j;
  struct sim_err e;
  struct sim_obj *o = NULL;
  const char *ns = r->ns ? r->ns : "";
  int dry;

  if (dry_run(req, &dry) != 0 || (j = parse_body(req)) == NULL)
    return;
  if (obj_prepare(s, r->kind, ns, j, &e) != 0) {
    status_err(req, &e, kind_resource(r->kind), json_get_str(json_object_get(j, "metadata"), "name"));
    json_decref(j);
    return;
  }
  if (dry && r->kind == K_POD) {
    /* Pod creation commits as it validates (scheduler state, quota). */
    json_decref(j);
    api_status(req, 400, "BadRequest", "kubesim does not simulate dryRun for pods", "pods", NULL, NULL);
    return;
  }
  switch (r->kind) {
  case K_POD:
    if (pod_create(s, ns, j, &o, &e) != 0) {
      status_err(req, &e, "pods", NULL);
      return;
    }
    break;
  case K_NAMESPACE:
    json_object_set_new(j, "spec", json_pack("{s:[s]}", "finalizers", "kubernetes"));
    json_object_set_new(j, "status", json_pack("{s:s}", "phase", "Active"));
    if (dry)
      break;
    o = store_commit(s, K_NAMESPACE, NULL, j, EV_ADDED);
    if (o != NULL) {
      o->u.nsstate = calloc(1, sizeof(struct sim_ns));
      quota_init_ns(s, o->name);
    }
    break;
  case K_RS:
    json_object_set_new(json_obj(j, "metadata"), "generation", json_integer(1));
    json_object_set_new(j, "status", json_pack("{s:i,s:i}", "replicas", 0, "observedGeneration", 0));
    if (json_path(j, "spec.replicas") == NULL)
      json_object_set_new(json_obj(j, "spec"), "replicas", json_integer(1));
    if (rs_validate(j, &e) != 0) {
      status_err(req, &e, "replicasets", json_get_str(json_object_get(j, "metadata"), "name"));
      json_decref(j);
      return;
    }
    if (dry)
      break;
    o = store_commit(s, K_RS, NULL, j, EV_ADDED);
    if (o != NULL && rs_setup(s, o) != 0)
      o = NULL;
    break;
  case K_DEPLOYMENT:
    json_object_set_new(json_obj(j, "metadata"), "generation", json_integer(1));
    json_object_del(j, "status");
    deploy_defaults(j);
    if (kind_validate(K_DEPLOYMENT, NULL, j, &e) != 0) {
      status_err(req, &e, "deployments", json_get_str(json_object_get(j, "metadata"), "name"));
      json_decref(j);
      return;
    }
    if (dry)
      break;
    o = store_commit(s, K_DEPLOYMENT, NULL, j, EV_ADDED);
    if (o != NULL && deploy_setup(s, o) != 0)
      o = NULL;
    break;
  case K_QUOTA:
    if (quota_spec_valid(j, &e) != 0) {
      status_err(req, &e, "resourcequotas", NULL);
      json_decref(j);
      return;
    }
    json_object_set(json_obj(j, "status"), "hard", json_path(j, "spec.hard"));
    json_object_set_new(json_obj(j, "status"), "used", json_object());
    if (dry)
      break;
    o = store_commit(s, K_QUOTA, NULL, j, EV_ADDED);
    if (o != NULL) {
      struct sim_obj *nso = store_get(s, K_NAMESPACE, "", ns);
      if (nso && nso->u.nsstate) {
        nso->u.nsstate->quota_dirty = 1;
        sync_arm(s);
      }
    }
    break;
  case K_NODE:
    json_decref(j);
    api_status(req, 405, "MethodNotAllowed", "the server does not allow this method on the "
               "requested resource", kind_resource(r->kind), NULL, NULL);
    return;
  default:
    if (kind_validate(r->kind, NULL, j, &e) != 0) {
      /* NewInvalid names the kind ("The NetworkPolicy "x" is invalid"). */
      status_err(req, &e, kind_name(r->kind), json_get_str(json_object_get(j, "metadata"), "name"));
      json_decref(j);
      return;
    }
    if (kind_has_generation(r->kind))
      json_object_set_new(json_obj(j, "metadata"), "generation", json_integer(1));
    /* No status until a controller writes one. */
    if (r->kind == K_DEPLOYMENT || r->kind == K_PDB)
      json_object_set_new(j, "status", json_object());
    /* Admission (the default class, pvc-protection); the persistent
     * volume controller binds it after the commit. */
    if (r->kind == K_PVC)
      pvc_admit(s, j);
    if (r->kind == K_PDB)
      pdb_init_status(j);
    if (dry)
      break;
    o = store_commit(s, r->kind, NULL, j, EV_ADDED);
    if (o != NULL && r->kind == K_STORAGECLASS)
      volumes_class_added(s);
    if (o != NULL && r->kind == K_PDB)
      pdb_mark_dirty(s, o->ns);
    break;
  }
  if (dry) {
    api_json(req, 201, j);
    return;
  }
  if (o == NULL) {
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    return;
  }
  api_raw(req, 201, o->cur->json, o->cur->json_len);
  /* The answer is the claim as created (Pending); then the persistent
   * volume controller binds it, and pods waiting for it may schedule. */
  if (r->kind == K_PVC) {
    pvc_sync(s, o);
    sched_room_freed(s);
  }
}

/* ---------------------------------------------------------------------- */
/* patch / update                                                          */

static void restore(json_t *to, json_t *from, const char *path) {
  char parent[64];
  const char *dot = strrchr(path, '.');
  json_t *src = json_path(from, path), *dst;

  if (dot == NULL) {
    if (src)
      json_object_set(to, path, src);
    else
      json_object_del(to, path);
    return;
  }
  snprintf(parent, sizeof(parent), "%.*s", (int)(dot - path), path);
  dst = json_path(to, parent);
  if (dst == NULL) {
    if (src == NULL)
      return;
    dst = json_obj(to, parent);
  }
  if (src)
    json_object_set(dst, dot + 1, src);
  else
    json_object_del(dst, dot + 1);
}

static int pod_spec_update_ok(json_t *old, json_t *nw) {
  json_t *a = json_deep_copy(json_object_get(old, "spec"));
  json_t *b = json_deep_copy(json_object_get(nw, "spec"));
  size_t i;
  json_t *c;
  int ok;

  /* Mutable pod spec fields: activeDeadlineSeconds and container images. */
  json_object_del(a, "activeDeadlineSeconds");
  json_object_del(b, "activeDeadlineSeconds");
  json_array_foreach(json_object_get(a, "containers"), i, c) json_object_del(c, "image");
  json_array_foreach(json_object_get(b, "containers"), i, c) json_object_del(c, "image");
  ok = json_equal(a, b);
  json_decref(a);
  json_decref(b);
  return ok;
}

/* The document a PATCH makes of <old> (borrowed): <patch> (borrowed)
 * applied as its Content-Type says, for an object of kind <k> named <name>
 * (K_COUNT for a Scale). Returns a new document, or NULL after answering
 * the error as the API server does. */
static json_t *patch_apply(struct fr_http_req *req, json_t *old, json_t *patch, enum sim_kind k,
                           const char *name) {
  const char *ctype = fr_http_req_header(req, "Content-Type");
  const char *resource = k == K_COUNT ? NULL : kind_resource(k);
  struct smp_error se;
  char err[300], msg[600];
  json_t *nw;

  if (ctype != NULL && strncasecmp(ctype, "application/json-patch+json", 27) == 0) {
    nw = json_deep_copy(old);
    if (json_patch_apply(nw, patch, err, sizeof(err)) != 0) {
      api_status(req, 422, "Invalid", err, resource, name, NULL);
      json_decref(nw);
      return NULL;
    }
    return nw;
  }
  if (ctype != NULL && strncasecmp(ctype, "application/merge-patch+json", 28) == 0)
    return merge_patch(json_deep_copy(old), patch);
  if (ctype != NULL && strncasecmp(ctype, "application/strategic-merge-patch+json", 38) == 0) {
    nw = strategic_merge_patch(json_deep_copy(old), patch, k, &se);
    if (nw == NULL)
      api_status(req, se.code, se.code == 400 ? "BadRequest" : se.code == 422 ? "Invalid" : "InternalError",
                 se.msg, NULL, NULL, NULL);
    return nw;
  }
  snprintf(msg, sizeof(msg), "the server does not support the content type %s for PATCH "
           "(server-side apply is not simulated)", ctype ? ctype : "(none)");
  api_status(req, 415, "UnsupportedMediaType", msg, NULL, NULL, NULL);
  return NULL;
}

static void handle_update(struct sim *s, struct fr_http_req *req, const struct route *r,
                          int is_patch) {
  struct sim_obj *o = lookup(s, r);
  json_t *old, *nw, *patch;
  char msg[600];
  const char *prv;
  const char *status_sub = r->sub && strcmp(r->sub, "status") == 0 ? "status" : NULL;
  json_t *meta_labels;
  const char *key;
  json_t *v;
  int dry;

  if (dry_run(req, &dry) != 0)
    return;
  if (o == NULL) {
    not_found(req, r->kind, r->name);
    return;
  }
  patch = json_loadb(req->body, req->body_len, 0, NULL);
  if (patch == NULL) {
    api_status(req, 400, "BadRequest", "the body of the request was in an unknown format - "
               "accepted media types include: application/json-patch+json, "
               "application/merge-patch+json, application/strategic-merge-patch+json",
               NULL, NULL, NULL);
    return;
  }
  old = obj_json(o);
  if (old == NULL) {
    json_decref(patch);
    api_status(req, 500, "InternalError", "stored object is unreadable", NULL, NULL, NULL);
    return;
  }
  if (is_patch) {
    if ((nw = patch_apply(req, old, patch, r->kind, r->name)) == NULL) {
      json_decref(patch);
      json_decref(old);
      return;
    }
  } else {
    if (!json_is_object(patch)) {
      api_status(req, 400, "BadRequest", "body must be an object", NULL, NULL, NULL);
      json_decref(patch);
      json_decref(old);
      return;
    }
    nw = json_incref(patch);
  }
  /* resourceVersion in the submitted or patched object is an
   * optimistic-concurrency precondition (kubectl label --resource-version,
   * a PUT, a JSON patch replacing /metadata/resourceVersion). */
  prv = json_string_value(json_path(nw, "metadata.resourceVersion"));
  if (prv != NULL && *prv != '\0' && strcmp(prv, json_string_value(json_path(old, "metadata.resourceVersion"))) != 0) {
    snprintf(msg, sizeof(msg), "Operation cannot be fulfilled on %s \"%s\": the object has been "
             "modified; please apply your changes to the latest version and try again",
             kind_resource(r->kind), r->name);
    api_status(req, 409, "Conflict", msg, kind_resource(r->kind), r->name, NULL);
    goto out_nw;
  }
  if (!json_is_object(nw)) {
    api_status(req, 422, "Invalid", "patched object is not an object", NULL, NULL, NULL);
    goto out_nw;
  }
  restore(nw, old, "kind");
  restore(nw, old, "apiVersion");
  restore(nw, old, "metadata.name");
  restore(nw, old, "metadata.namespace");
  restore(nw, old, "metadata.uid");
  restore(nw, old, "metadata.creationTimestamp");
  restore(nw, old, "metadata.deletionTimestamp");
  restore(nw, old, "metadata.deletionGracePeriodSeconds");
  restore(nw, old, "metadata.generation");
  if (status_sub) {
    /* The status subresource changes status only. */
    json_t *st = json_incref(json_object_get(nw, "status"));
    json_decref(nw);
    nw = json_deep_copy(old);
    if (st)
      json_object_set_new(nw, "status", st);
  } else {
    restore(nw, old, "status");
  }
  meta_labels = json_path(nw, "metadata.labels");
  json_object_foreach(meta_labels, key, v) {
    if (!fr_label_key_valid(key) || !json_is_string(v) || !fr_label_value_valid(json_string_value(v))) {
      snprintf(msg, sizeof(msg), "%s \"%s\" is invalid: metadata.labels: Invalid value: \"%s\"",
               kind_name(r->kind), r->name, key);
      api_status(req, 422, "Invalid", msg, kind_resource(r->kind), r->name, NULL);
      goto out_nw;
    }
  }
  if (r->kind == K_POD && !status_sub && !pod_spec_update_ok(old, nw)) {
    snprintf(msg, sizeof(msg), "Pod \"%s\" is invalid: spec: Forbidden: pod updates may not "
             "change fields other than `spec.containers[*].image`, `spec.activeDeadlineSeconds`",
             r->name);
    api_status(req, 422, "Invalid", msg, "pods", r->name, NULL);
    goto out_nw;
  }
  /* A pod's deadline may be set or lowered, never raised or removed (the
   * API server's ValidatePodUpdate). */
  if (r->kind == K_POD && !status_sub && json_path(old, "spec.activeDeadlineSeconds") != NULL) {
    json_t *od = json_path(old, "spec.activeDeadlineSeconds"), *nd = json_path(nw, "spec.activeDeadlineSeconds");
    if (nd == NULL || json_integer_value(nd) > json_integer_value(od)) {
      if (nd == NULL)
        snprintf(msg, sizeof(msg), "Pod \"%s\" is invalid: spec.activeDeadlineSeconds: Invalid value: "
                 "\"null\": must not update from a positive integer to nil value", r->name);
      else
        snprintf(msg, sizeof(msg), "Pod \"%s\" is invalid: spec.activeDeadlineSeconds: Invalid value: %lld: "
                 "must be less than or equal to previous value", r->name, (long long)json_integer_value(nd));
      api_status(req, 422, "Invalid", msg, "pods", r->name, NULL);
      goto out_nw;
    }
  }
  if (r->kind == K_RS && !status_sub) {
    int64_t reps = json_get_int(json_object_get(nw, "spec"), "replicas", 1);
    if (!json_equal(json_path(old, "spec.selector"), json_path(nw, "spec.selector")) || reps < 0) {
      snprintf(msg, sizeof(msg), "ReplicaSet.apps \"%s\" is invalid: %s", r->name,
               reps < 0 ? "spec.replicas: Invalid value: must be greater than or equal to 0"
                        : "spec.selector: Invalid value: field is immutable");
      api_status(req, 422, "Invalid", msg, "replicasets", r->name, NULL);
      goto out_nw;
    }
  }
  /* Checked and defaulted before the generation is worked out: the
   * defaults a request leaves out are no change of the spec. */
  if (r->kind >= K_FIRST_STORED) {
    struct sim_err e;
    memset(&e, 0, sizeof(e));
    if (kind_validate(r->kind, old, nw, &e) != 0) {
      status_err(req, &e, kind_name(r->kind), r->name);
      goto out_nw;
    }
  }
  /* A change of the spec is a new generation; so is one of a Deployment's
   * annotations (they are copied to its ReplicaSets). */
  if (kind_has_generation(r->kind) && !status_sub &&
      (!json_equal(json_object_get(old, "spec"), json_object_get(nw, "spec")) ||
       (r->kind == K_DEPLOYMENT &&
        !json_equal(json_path(old, "metadata.annotations"), json_path(nw, "metadata.annotations")))))
    json_object_set_new(json_obj(nw, "metadata"), "generation",
                        json_integer(json_get_int(json_object_get(old, "metadata"), "generation", 1) + 1));
  if (r->kind == K_QUOTA) {
    struct sim_err e;
    memset(&e, 0, sizeof(e));
    if (quota_spec_valid(nw, &e) != 0) {
      status_err(req, &e, "resourcequotas", r->name);
      goto out_nw;
    }
    json_object_set(json_obj(nw, "status"), "hard", json_path(nw, "spec.hard"));
  }
  if (json_equal(old, nw)) {
    /* No-op updates do not bump resourceVersion. */
    api_raw(req, 200, o->cur->json, o->cur->json_len);
    goto out_nw;
  }
  if (dry) {
    api_json(req, 200, nw);
    nw = NULL;
    goto out;
  }
  o = store_commit(s, r->kind, o, nw, EV_MODIFIED);
  nw = NULL;
  if (o == NULL) {
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    goto out;
  }
  switch (r->kind) {
  case K_POD: pod_changed(s, o); break;
  case K_RS:
    rs_mark_dirty(s, o);
    deploy_rs_changed(s, o);
    break;
  case K_DEPLOYMENT: deploy_mark_dirty(s, o); break;
  case K_QUOTA: {
    struct sim_obj *nso = store_get(s, K_NAMESPACE, "", o->ns);
    if (nso && nso->u.nsstate) {
      nso->u.nsstate->quota_dirty = 1;
      sync_arm(s);
    }
    break;
  }
  case K_NODE: node_changed(s, o); break;
  case K_PDB: pdb_mark_dirty(s, o->ns); break;
  case K_PVC: {
    /* A Terminating claim whose last finalizer was taken off goes now. */
    json_t *fin = NULL;
    int gone = 0;
    if (o->cur->deleting) {
      json_t *cur = obj_json(o);
      fin = json_path(cur, "metadata.finalizers");
      gone = json_array_size(fin) == 0;
      json_decref(cur);
    }
    if (gone) {
      char *out = strdup(o->cur->json);
      pvc_finalize(s, o);
      if (out == NULL) {
        api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
      } else {
        api_raw(req, 200, out, strlen(out));
        free(out);
      }
      goto out;
    }
    break;
  }
  case K_STORAGECLASS: volumes_class_added(s); break;
  default: break;
  }
  api_raw(req, 200, o->cur->json, o->cur->json_len);
out_nw:
  json_decref(nw);
out:
  json_decref(patch);
  json_decref(old);
}

/* ---------------------------------------------------------------------- */
/* delete                                                                  */

static void delete_ns_contents(struct sim *s, const char *ns) {
  int k;

  for (k = 0; k < K_COUNT; k++) {
    struct sim_obj *o, *nx;
    if (!kind_namespaced((enum sim_kind)k))
      continue;
    for (o = store_first(s, (enum sim_kind)k, ns); o != NULL && strcmp(o->ns, ns) == 0; o = nx) {
      nx = store_next(s, o);
      if (k == K_POD) {
        pod_delete(s, o, 0);
      } else {
        json_t *j = obj_json(o);
        if (k == K_RS)
          rs_deleted(s, o, 1);
        if (k == K_DEPLOYMENT)
          deploy_free_state(o);
        if (k == K_PVC) {
          json_decref(j);
          pvc_finalize(s, o);
          continue;
        }
        if (j)
          store_commit(s, (enum sim_kind)k, o, j, EV_DELETED);
      }
    }
  }
}

/* DeleteOptions.preconditions <pre> (borrowed, may be NULL) against <o>:
 * 0 when they hold, else 1 after answering 409 Conflict. */
static int preconditions_failed(struct fr_http_req *req, struct sim_obj *o, json_t *pre) {
  char tmp[32], msg[300];

  if (json_get_str(pre, "uid") && strcmp(json_get_str(pre, "uid"), o->uid) != 0) {
    snprintf(msg, sizeof(msg), "Precondition failed: UID in precondition: %s, UID in object meta: %s",
             json_get_str(pre, "uid"), o->uid);
    api_status(req, 409, "Conflict", msg, kind_resource(o->kind), o->name, NULL);
    return 1;
  }
  if (json_get_str(pre, "resourceVersion")) {
    snprintf(tmp, sizeof(tmp), "%" PRIu64, o->cur->rv);
    if (strcmp(json_get_str(pre, "resourceVersion"), tmp) != 0) {
      snprintf(msg, sizeof(msg), "Precondition failed: ResourceVersion in precondition: %s, "
               "ResourceVersion in object meta: %s", json_get_str(pre, "resourceVersion"), tmp);
      api_status(req, 409, "Conflict", msg, kind_resource(o->kind), o->name, NULL);
      return 1;
    }
  }
  return 0;
}

/* Deletes one object; returns the JSON to answer with (caller frees) or
 * NULL after answering an error itself. */
static char *delete_one(struct sim *s, struct fr_http_req *req, struct sim_obj *o,
                        json_t *opts) {
  int64_t grace = -1;
  const char *prop = json_get_str(opts, "propagationPolicy");
  json_t *pre = json_object_get(opts, "preconditions");
  char tmp[64], msg[300], *out;
  struct objver *last = o->cur;
  enum sim_kind k = o->kind;
  char name[256], ns[256];
  int dry = qstr(req->query, "dryRun", tmp, sizeof(tmp)) >= 0; /* checked by the caller */

  if (preconditions_failed(req, o, pre))
    return NULL;
  if (json_is_integer(json_object_get(opts, "gracePeriodSeconds")))
    grace = json_get_int(opts, "gracePeriodSeconds", -1);
  if (qstr(req->query, "gracePeriodSeconds", tmp, sizeof(tmp)) > 0)
    fr_parse_int64(tmp, 0, INT64_MAX, &grace);
  if (dry)
    return strdup(o->cur->json);
  if (prop == NULL && qstr(req->query, "propagationPolicy", tmp, sizeof(tmp)) > 0)
    prop = tmp;
  /* <o> may be freed by the deletion below: keep its key. */
  snprintf(name, sizeof(name), "%s", o->name);
  snprintf(ns, sizeof(ns), "%s", o->ns);
  last->refs++;
  switch (k) {
  case K_POD:
    pod_delete(s, o, grace);
    break;
  case K_NAMESPACE:
    if (strcmp(o->name, "default") == 0 || strncmp(o->name, "kube-", 5) == 0) {
      snprintf(msg, sizeof(msg), "namespaces \"%s\" is forbidden: this namespace may not be deleted", o->name);
      api_status(req, 403, "Forbidden", msg, "namespaces", o->name, NULL);
      objver_unref(last);
      return NULL;
    }
    delete_ns_contents(s, o->name);
    free(o->u.nsstate);
    o->u.nsstate = NULL;
    store_commit(s, k, o, obj_json(o), EV_DELETED);
    break;
  case K_NODE:
    api_status(req, 405, "MethodNotAllowed", "kubesim does not delete nodes", "nodes", o->name, NULL);
    objver_unref(last);
    return NULL;
  case K_RS:
    deploy_rs_changed(s, o);
    rs_deleted(s, o, prop != NULL && strcmp(prop, "Orphan") == 0);
    store_commit(s, k, o, obj_json(o), EV_DELETED);
    break;
  case K_PVC:
    pvc_delete(s, o);
    break;
  case K_DEPLOYMENT:
    /* Foreground and Background both remove the ReplicaSets and their
     * pods (graceful); only the Deployment's own removal is immediate. */
    deploy_deleted(s, o, prop != NULL && strcmp(prop, "Orphan") == 0);
    store_commit(s, k, o, obj_json(o), EV_DELETED);
    break;
  default:
    store_commit(s, k, o, obj_json(o), EV_DELETED);
    {
      struct sim_obj *nso = store_get(s, K_NAMESPACE, "", ns);
      if (nso && nso->u.nsstate) {
        nso->u.nsstate->quota_dirty = 1;
        sync_arm(s);
      }
    }
    break;
  }
  /* Answer with the object as it is now: still there while terminating,
   * else its last state. */
  o = store_get(s, k, kind_namespaced(k) ? ns : "", name);
  out = strdup(o ? o->cur->json : last->json);
  objver_unref(last);
  return out;
}

/* Whether the API server's storage of kind <k> answers a DELETE with the
 * deleted object (ReturnDeletedObject: pods, services, claims, storage classes; a namespace
 * answers with itself, Terminating). The others answer a Status once the
 * object is gone (the registry's finalizeDelete). */
static int returns_deleted_object(enum sim_kind k) {
  return k == K_POD || k == K_SERVICE || k == K_PVC || k == K_NAMESPACE || k == K_STORAGECLASS;
}

static void handle_delete(struct sim *s, struct fr_http_req *req, const struct route *r) {
  struct sim_obj *o = lookup(s, r);
  json_t *opts, *st;
  char *out, uid[40];
  int dry;

  if (dry_run(req, &dry) != 0)
    return;
  opts = req->body_len ? json_loadb(req->body, req->body_len, 0, NULL) : json_object();
  if (opts == NULL) {
    api_status(req, 400, "BadRequest", "DeleteOptions body is not valid JSON", NULL, NULL, NULL);
    return;
  }
  if (o == NULL) {
    not_found(req, r->kind, r->name);
    json_decref(opts);
    return;
  }
  snprintf(uid, sizeof(uid), "%s", o->uid);
  out = delete_one(s, req, o, opts);
  json_decref(opts);
  if (out == NULL)
    return;
  if (!dry && !returns_deleted_object(r->kind) && lookup(s, r) == NULL) {
    st = json_pack("{s:s,s:s,s:{},s:s,s:{s:s,s:s,s:s}}", "kind", "Status", "apiVersion", "v1",
                   "metadata", "status", "Success", "details", "name", r->name, "kind",
                   kind_resource(r->kind), "uid", uid);
    if (st != NULL && *kind_group(r->kind) != '\0')
      json_object_set_new(json_object_get(st, "details"), "group", json_string(kind_group(r->kind)));
    api_json(req, 200, st);
  } else {
    api_raw(req, 200, out, strlen(out));
  }
  free(out);
}

static void handle_delete_collection(struct sim *s, struct fr_http_req *req, const struct route *r) {
  struct fr_selector *ls, *fs;
  struct sim_obj *o, *nx;
  json_t *opts;
  struct fr_buf b;
  size_t n = 0;
  char **names = NULL;
  size_t i;
  int dry;

  if (dry_run(req, &dry) != 0)
    return;
  opts = req->body_len ? json_loadb(req->body, req->body_len, 0, NULL) : json_object();
  if (opts == NULL) {
    api_status(req, 400, "BadRequest", "DeleteOptions body is not valid JSON", NULL, NULL, NULL);
    return;
  }
  if (parse_selectors(req, r->kind, &ls, &fs) != 0) {
    json_decref(opts);
    return;
  }
  /* Collect first: deleting may remove objects from the tree. */
  for (o = store_first(s, r->kind, r->ns); o != NULL; o = nx) {
    nx = store_next(s, o);
    if (r->ns != NULL && strcmp(o->ns, r->ns) != 0)
      break;
    if (fr_selector_matches(ls, objver_label, o->cur) && fr_selector_matches(fs, objver_field, o->cur)) {
      char **nn = realloc(names, (n + 1) * sizeof(*names));
      if (nn == NULL)
        break;
      names = nn;
      names[n++] = strdup(o->name);
    }
  }
  fr_buf_init(&b);
  fr_buf_printf(&b, "{\"kind\":\"%s\",\"apiVersion\":\"%s\",\"metadata\":{},\"items\":[",
                kind_list_name(r->kind), kind_api_version(r->kind));
  for (i = 0; i < n; i++) {
    char *out;
    o = names[i] ? store_get(s, r->kind, r->ns ? r->ns : "", names[i]) : NULL;
    free(names[i]);
    if (o == NULL)
      continue;
    out = delete_one(s, req, o, opts);
    if (out == NULL)
      continue; /* cannot happen for namespaced kinds without preconditions */
    if (b.data[b.len - 1] != '[')
      fr_buf_putc(&b, ',');
    fr_buf_puts(&b, out);
    free(out);
  }
  free(names);
  fr_buf_puts(&b, "]}");
  api_raw(req, 200, b.data, b.len);
  fr_buf_free(&b);
  fr_selector_free(ls);
  fr_selector_free(fs);
  json_decref(opts);
}

/* ---------------------------------------------------------------------- */
/* eviction subresource (kubectl drain)                                    */

/* The API server's eviction REST (pkg/registry/core/pod/storage/
 * eviction.go): POST .../pods/NAME/eviction with a policy/v1 Eviction
 * {metadata {name, namespace}, deleteOptions}. A pod that is Pending,
 * Succeeded, Failed or already terminating is deleted without a look at
 * disruption budgets; otherwise the one PodDisruptionBudget whose selector
 * matches it must allow a disruption (pdb_eviction(), which reads the
 * status the disruption controller in pdb.c keeps). Then, as the API server
 * does, the pod gets DisruptionTarget=True (EvictionByEvictionAPI) and is
 * deleted with the Eviction's DeleteOptions, like a DELETE. */

static void handle_eviction(struct sim *s, struct fr_http_req *req, const struct route *r) {
  /* The create handler fills in the code of a Status that has none. */
  static const char ok[] =
      "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\",\"code\":201}";
  json_t *j, *opts, *pod = NULL;
  struct sim_obj *o;
  struct sim_err e;
  const char *name, *ns, *phase;
  int64_t grace = -1;
  int dry;

  if (strcmp(req->method, "POST") != 0) {
    api_status(req, 405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
               NULL, NULL, NULL);
    return;
  }
  if (dry_run(req, &dry) != 0 || (j = parse_body(req)) == NULL)
    return;
  name = json_string_value(json_path(j, "metadata.name"));
  ns = json_string_value(json_path(j, "metadata.namespace"));
  if (name == NULL || strcmp(name, r->name) != 0) {
    api_status(req, 400, "BadRequest", "name in URL does not match name in Eviction object", NULL, NULL, NULL);
    goto out;
  }
  if (ns != NULL && *ns != '\0' && strcmp(ns, r->ns) != 0) {
    api_status(req, 400, "BadRequest", "the namespace of the provided object does not match the namespace "
               "sent on the request", NULL, NULL, NULL);
    goto out;
  }
  if ((o = lookup(s, r)) == NULL) {
    not_found(req, K_POD, r->name);
    goto out;
  }
  opts = json_object_get(j, "deleteOptions");
  if (json_array_size(json_object_get(opts, "dryRun")) > 0)
    dry = 1;
  if (json_is_integer(json_object_get(opts, "gracePeriodSeconds")))
    grace = json_integer_value(json_object_get(opts, "gracePeriodSeconds"));
  if (preconditions_failed(req, o, json_object_get(opts, "preconditions")))
    goto out;
  if ((pod = obj_json(o)) == NULL) {
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    goto out;
  }
  phase = o->cur->fields[F_PHASE];
  if (!(phase != NULL && (strcmp(phase, "Pending") == 0 || strcmp(phase, "Succeeded") == 0 ||
                          strcmp(phase, "Failed") == 0)) &&
      json_path(pod, "metadata.deletionTimestamp") == NULL && pdb_eviction(s, o, pod, dry, &e) != 0) {
    /* The 429 names no object, as NewTooManyRequests does. */
    status_err(req, &e, e.code == 429 ? NULL : "pods", e.code == 429 ? NULL : o->name);
    goto out;
  }
  if (!dry) {
    pod_set_disruption(s, o, "EvictionByEvictionAPI", "Eviction API: evicting");
    pod_delete(s, o, grace);
  }
  api_raw(req, 201, ok, sizeof(ok) - 1);
out:
  json_decref(pod);
  json_decref(j);
}

/* ---------------------------------------------------------------------- */
/* scale subresource (kubectl scale, HPAs, clients' *Scale calls)          */

/* The autoscaling/v1 Scale of <cur> (a ReplicaSet or Deployment, borrowed)
 * as the API server builds it: the parent's identity and resourceVersion,
 * spec.replicas, status.replicas and the selector as a string. */
static json_t *scale_of(json_t *cur) {
  json_t *meta = json_object_get(cur, "metadata"), *m = json_object(), *sc;
  static const char *const keep[] = {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"};
  char *sel = label_selector_text(json_path(cur, "spec.selector"));
  size_t i;

  for (i = 0; i < FR_ARRAY_SIZE(keep); i++)
    if (json_object_get(meta, keep[i]) != NULL)
      json_object_set(m, keep[i], json_object_get(meta, keep[i]));
  sc = json_pack("{s:s,s:s,s:o,s:{s:I},s:{s:I,s:s}}", "kind", "Scale", "apiVersion", "autoscaling/v1",
                 "metadata", m, "spec", "replicas",
                 (json_int_t)json_get_int(json_object_get(cur, "spec"), "replicas", 1), "status",
                 "replicas", (json_int_t)json_get_int(json_object_get(cur, "status"), "replicas", 0),
                 "selector", sel ? sel : "");
  free(sel);
  return sc;
}

static void handle_scale(struct sim *s, struct fr_http_req *req, const struct route *r) {
  struct sim_obj *o = lookup(s, r);
  json_t *cur, *sc, *in = NULL, *nw = NULL, *rep;
  const char *rv, *m = req->method;
  char msg[400];

  if (o == NULL) {
    not_found(req, r->kind, r->name);
    return;
  }
  if (strcmp(m, "GET") != 0 && strcmp(m, "PATCH") != 0 && strcmp(m, "PUT") != 0) {
    api_status(req, 405, "MethodNotAllowed", "method not allowed", NULL, NULL, NULL);
    return;
  }
  cur = obj_json(o);
  sc = scale_of(cur);
  if (cur == NULL || sc == NULL) {
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    goto out;
  }
  if (strcmp(m, "GET") == 0) {
    api_json(req, 200, json_incref(sc));
    goto out;
  }
  /* PUT sends a whole Scale; PATCH is applied to the current one, in any of
   * the patch formats (the JS client sends JSON patch by default). */
  in = json_loadb(req->body, req->body_len, 0, NULL);
  if (in == NULL || (strcmp(m, "PUT") == 0 && !json_is_object(in))) {
    api_status(req, 400, "BadRequest", "the body of the request was in an unknown format - accepted "
               "media types include: application/json", NULL, NULL, NULL);
    goto out;
  }
  if (strcmp(m, "PUT") == 0)
    nw = json_incref(in);
  else if ((nw = patch_apply(req, sc, in, K_COUNT, r->name)) == NULL)
    goto out;
  rep = json_path(nw, "spec.replicas");
  if (rep != NULL && !json_is_integer(rep)) {
    api_status(req, 400, "BadRequest", "json: cannot unmarshal spec.replicas into Go struct field "
               "ScaleSpec.spec.replicas of type int32", NULL, NULL, NULL);
    goto out;
  }
  if (json_integer_value(rep) < 0) {
    snprintf(msg, sizeof(msg), "Scale.autoscaling \"%s\" is invalid: spec.replicas: Invalid value: %lld: "
             "must be greater than or equal to 0", r->name, (long long)json_integer_value(rep));
    api_status(req, 422, "Invalid", msg, kind_resource(r->kind), r->name, NULL);
    goto out;
  }
  /* A resourceVersion in the Scale is a precondition on the parent. */
  rv = json_string_value(json_path(nw, "metadata.resourceVersion"));
  if (rv != NULL && *rv != '\0' && strcmp(rv, json_string_value(json_path(sc, "metadata.resourceVersion"))) != 0) {
    snprintf(msg, sizeof(msg), "Operation cannot be fulfilled on %s \"%s\": the object has been "
             "modified; please apply your changes to the latest version and try again",
             kind_resource(r->kind), r->name);
    api_status(req, 409, "Conflict", msg, kind_resource(r->kind), r->name, NULL);
    goto out;
  }
  /* An absent spec.replicas is zero (omitempty in the Scale type). */
  if (json_get_int(json_object_get(cur, "spec"), "replicas", 1) != json_integer_value(rep)) {
    json_object_set_new(json_obj(cur, "spec"), "replicas", json_integer(json_integer_value(rep)));
    json_object_set_new(json_obj(cur, "metadata"), "generation",
                        json_integer(json_get_int(json_object_get(cur, "metadata"), "generation", 1) + 1));
    o = store_commit(s, r->kind, o, json_incref(cur), EV_MODIFIED);
    if (o == NULL) {
      api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
      goto out;
    }
    if (r->kind == K_RS)
      rs_mark_dirty(s, o);
    else
      deploy_mark_dirty(s, o);
  }
  /* <cur> carries the new resourceVersion: store_commit() set it there. */
  api_json(req, 200, scale_of(cur));
out:
  json_decref(in);
  json_decref(nw);
  json_decref(sc);
  json_decref(cur);
}

/* ---------------------------------------------------------------------- */
/* what a request is, for the stats                                        */

void api_classify(const char *method, const char *path, const char *query, struct api_class *c) {
  char buf[2048];
  struct route r;

  c->kind = K_COUNT;
  c->sub = API_SUB_NONE;
  if (proxy_is_proxy_path(path)) {
    c->verb = API_VERB_CONNECT;
    c->kind = K_POD;
    c->sub = API_SUB_PROXY;
    return;
  }
  if (parse_route(path, buf, sizeof(buf), &r) == 0) {
    c->kind = r.kind;
    c->sub = api_sub_of(r.sub);
  }
  if (c->sub == API_SUB_EXEC || c->sub == API_SUB_ATTACH || c->sub == API_SUB_PORTFORWARD)
    c->verb = API_VERB_CONNECT;
  else if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
    c->verb = qflag(query, "watch") ? API_VERB_WATCH
              : c->kind != K_COUNT && r.name == NULL ? API_VERB_LIST
                                                      : API_VERB_GET;
  else if (strcmp(method, "POST") == 0)
    c->verb = API_VERB_POST;
  else if (strcmp(method, "PUT") == 0)
    c->verb = API_VERB_PUT;
  else if (strcmp(method, "PATCH") == 0)
    c->verb = API_VERB_PATCH;
  else if (strcmp(method, "DELETE") == 0)
    c->verb = c->kind != K_COUNT && r.name == NULL ? API_VERB_DELETECOLLECTION : API_VERB_DELETE;
  else
    c->verb = API_VERB_OTHER;
}

void api_done(const struct fr_http_req *req, int status, size_t body_bytes, uint64_t duration_ms,
              void *arg) {
  struct api_class c;

  (void)body_bytes;
  (void)duration_ms;
  /* Requests the server refused before they were whole, and the admin
   * surface, are not the API's. */
  if (req->method == NULL || req->path == NULL || strncmp(req->path, "/_sim/", 6) == 0)
    return;
  api_classify(req->method, req->path, req->query ? req->query : "", &c);
  stats_response(arg, &c, status);
}

/* GET /metrics: the request counters in Prometheus text. */
static void serve_metrics(struct sim *s, struct fr_http_req *req) {
  struct fr_buf b;

  fr_buf_init(&b);
  if (stats_prometheus(s, &b) != 0 || b.data == NULL)
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
  else
    fr_http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data, b.len);
  fr_buf_free(&b);
}

/* ---------------------------------------------------------------------- */
/* dispatch                                                                */

static void route_request(struct sim *s, struct fr_http_req *req) {
  char buf[2048];
  struct route r;
  const char *m = req->method;

  if (strcmp(m, "GET") == 0 && discovery(s, req))
    return;
  if (strcmp(m, "GET") == 0 && strcmp(req->path, "/metrics") == 0) {
    serve_metrics(s, req);
    return;
  }
  if (proxy_is_proxy_path(req->path)) {
    proxy_handle(s, req);
    return;
  }
  if (parse_route(req->path, buf, sizeof(buf), &r) != 0) {
    api_status(req, 404, "NotFound", "the server could not find the requested resource", NULL,
               NULL, NULL);
    return;
  }
  if (r.sub != NULL) {
    if (r.kind == K_POD && strcmp(r.sub, "exec") == 0 && (strcmp(m, "GET") == 0 || strcmp(m, "POST") == 0)) {
      struct sim_obj *o = lookup(s, &r);
      if (o == NULL)
        not_found(req, K_POD, r.name);
      else
        pod_exec(s, req, o);
      return;
    }
    if (r.kind == K_POD && strcmp(r.sub, "log") == 0 && r.ns != NULL) {
      log_handle(s, req, r.ns, r.name);
      return;
    }
    if ((r.kind == K_RS || r.kind == K_DEPLOYMENT) && strcmp(r.sub, "scale") == 0) {
      handle_scale(s, req, &r);
      return;
    }
    if (r.kind == K_POD && r.ns != NULL && strcmp(r.sub, "eviction") == 0) {
      handle_eviction(s, req, &r);
      return;
    }
    if (strcmp(r.sub, "status") != 0) {
      api_status(req, 404, "NotFound", "the server could not find the requested resource", NULL,
                 NULL, NULL);
      return;
    }
    if (strcmp(m, "GET") == 0)
      handle_get(s, req, &r);
    else if (strcmp(m, "PATCH") == 0 || strcmp(m, "PUT") == 0)
      handle_update(s, req, &r, strcmp(m, "PATCH") == 0);
    else
      api_status(req, 405, "MethodNotAllowed", "method not allowed", NULL, NULL, NULL);
    return;
  }
  if (r.name == NULL) {
    if (strcmp(m, "GET") == 0) {
      if (qflag(req->query, "watch"))
        handle_watch(s, req, &r);
      else
        handle_list(s, req, &r);
    } else if (strcmp(m, "POST") == 0) {
      handle_create(s, req, &r);
    } else if (strcmp(m, "DELETE") == 0) {
      handle_delete_collection(s, req, &r);
    } else {
      api_status(req, 405, "MethodNotAllowed", "method not allowed", NULL, NULL, NULL);
    }
    return;
  }
  if (strcmp(m, "GET") == 0) {
    if (qflag(req->query, "watch"))
      handle_watch(s, req, &r);
    else
      handle_get(s, req, &r);
  } else if (strcmp(m, "PATCH") == 0 || strcmp(m, "PUT") == 0) {
    handle_update(s, req, &r, strcmp(m, "PATCH") == 0);
  } else if (strcmp(m, "DELETE") == 0) {
    handle_delete(s, req, &r);
  } else {
    api_status(req, 405, "MethodNotAllowed", "method not allowed", NULL, NULL, NULL);
  }
}

/* ---------------------------------------------------------------------- */
/* auth and faults                                                         */

struct delayed {
  uv_timer_t timer;
  struct sim *sim;
  struct fr_http_req *req;
};

static void delayed_closed(uv_handle_t *h) {
  free(h->data);
}

static void on_delay(uv_timer_t *t) {
  struct delayed *d = t->data;
  struct fr_http_req *req = d->req;

  req->abort_cb = NULL;
  req->data = NULL;
  uv_close((uv_handle_t *)&d->timer, delayed_closed);
  route_request(d->sim, req);
}

static void on_delay_abort(struct fr_http_req *req) {
  struct delayed *d = req->data;

  uv_close((uv_handle_t *)&d->timer, delayed_closed);
}

static int client_latency(const struct sim *s, const char *ip) {
  int i, ms = s->faults.latency_ms;

  for (i = 0; i < s->faults.nclient_latency; i++)
    if (strcmp(s->faults.client_latency[i].ip, ip) == 0)
      ms += s->faults.client_latency[i].ms;
  return ms;
}

static int authorized(struct sim *s, struct fr_http_req *req) {
  const char *h;
  size_t i;
  int ok = 0;

  if (s->opts.token == NULL && s->napi_tokens == 0)
    return 1;
  h = fr_http_req_header(req, "Authorization");
  if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
    return 0;
  if (s->napi_tokens == 0)
    return fr_secret_equal(h + 7, s->opts.token);
  for (i = 0; i < s->napi_tokens; i++)
    ok |= fr_secret_equal(h + 7, s->api_tokens[i]);
  return ok;
}

int api_stream_body(const struct fr_http_req *req, void *arg) {
  (void)arg;
  /* Only pod proxy bodies may be of any size; they go to the pod as
   * they come. */
  return proxy_is_proxy_path(req->path);
}

void api_handle(struct fr_http_req *req, void *arg) {
  struct sim *s = arg;
  int ms, is_exec;

  if (strncmp(req->path, "/_sim/", 6) == 0) {
    admin_handle(req, arg);
    return;
  }
  snprintf(s->reqlog[s->reqlog_next], SIM_REQLOG_LINE, "%s %s", req->method, req->url);
  s->reqlog_next = (s->reqlog_next + 1) % SIM_REQLOG;
  if (s->reqlog_n < SIM_REQLOG)
    s->reqlog_n++;
  {
    struct api_class c;
    api_classify(req->method, req->path, req->query, &c);
    stats_request(s, &c);
  }
  if (!authorized(s, req)) {
    s->unauthorized++;
    api_status(req, 401, "Unauthorized", "Unauthorized", NULL, NULL, NULL);
    return;
  }
  is_exec = strstr(req->path, "/exec") != NULL;
  if (s->faults.error_rate > 0 && rand01() < s->faults.error_rate) {
    int code = s->faults.error_code ? s->faults.error_code : 500;
    api_status(req, code, code == 503 ? "ServiceUnavailable" : "InternalError",
               "injected fault (kubesim)", NULL, NULL, NULL);
    return;
  }
  /* Priority-and-fairness rejections: plain text with Retry-After; exec is
   * exempt, watches are not (KUBE_PROTOCOL.md section 5). */
  if (!is_exec && ((s->faults.throttle_rate > 0 && rand01() < s->faults.throttle_rate) ||
                   (s->faults.reject_watches && qflag(req->query, "watch")))) {
    char hdr[64];
    const char *body = "Too many requests, please try again later.\n";
    snprintf(hdr, sizeof(hdr), "Retry-After: %d\r\n", s->faults.retry_after_s > 0 ? s->faults.retry_after_s : 1);
    fr_http_respond(req, 429, "text/plain; charset=utf-8", hdr, body, strlen(body));
    return;
  }
  ms = client_latency(s, req->peer_ip);
  if (ms > 0) {
    struct delayed *d = calloc(1, sizeof(*d));
    if (d == NULL) {
      api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
      return;
    }
    d->sim = s;
    d->req = req;
    /* A streamed (proxy) body waits with the request. */
    fr_http_body_pause(req, 1);
    uv_timer_init(s->loop, &d->timer);
    d->timer.data = d;
    req->data = d;
    req->abort_cb = on_delay_abort;
    uv_timer_start(&d->timer, on_delay, (uint64_t)ms, 0);
    return;
  }
  route_request(s, req);
}
