/* fake_kube.c - a scripted Kubernetes API server for tests (see fake_kube.h).
 *
 * Shape: one fr_http server; a table of pods (name -> JSON object); a
 * history of every pod event as the JSON line a watch sends; open watches
 * and held requests as small records ("pends") hung on the request's data,
 * unlinked by the request's abort_cb when the client goes away. A pod watch
 * remembers the resourceVersion it has sent up to and catches up on the
 * history whenever it is not paused, so a watch started from a list's
 * resourceVersion gets exactly the events after it, as from an apiserver.
 */
#include "fake_kube.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/http.h"
#include "fr/util.h"

#define NODES "/api/v1/nodes"
#define ALLPODS "/api/v1/pods"
#define REPLICASETS "/apis/apps/v1/namespaces/" FK_NS "/replicasets"
#define QUOTAS "/api/v1/namespaces/" FK_NS "/resourcequotas"
#define SECRETS "/api/v1/namespaces/" FK_NS "/secrets/"
#define CONFIGMAPS "/api/v1/namespaces/" FK_NS "/configmaps"

enum pend_kind { PEND_WATCH, PEND_HELD };

struct pend {
  struct pend *prev, *next;
  struct fake_kube *fk;
  struct fr_http_req *req;
  enum pend_kind kind;
  int pods;          /* a watch of the sandbox pods: gets the events */
  uint64_t sent_rv;  /* events up to here are sent (watches) */
  size_t log;        /* its entry in the request log (held) */
};

struct pend_list {
  struct pend *head, *tail;
};

struct hist {
  uint64_t rv;
  char *line;
};

struct script {
  char method[8];
  int count;         /* < 0: forever */
  int status;
  char *message;
  char *path_prefix; /* NULL: any path */
};

struct fake_kube {
  uv_loop_t *loop;
  struct fr_http_server *srv;
  char kubeconfig[256];
  json_t *pods;      /* name -> pod object */
  json_t *secrets;   /* name -> Secret object */
  json_t *cms;       /* name -> ConfigMap (never sent on a watch) */
  uint64_t rv;       /* last resourceVersion handed out */
  struct hist *hist;
  size_t nhist, hist_cap;
  struct pend_list watches, held;
  struct fk_request *log;
  size_t nlog, log_cap;
  struct script *scripts;
  size_t nscripts;
  int down, paused;
  void (*free_cb)(void *arg);
  void *free_arg;
};

/* ------------------------------------------------------------ helpers */

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);

  if (q == NULL)
    abort(); /* a test helper: no recovery from OOM */
  return q;
}

static char *xstrdup(const char *s) {
  char *d = strdup(s ? s : "");

  if (d == NULL)
    abort();
  return d;
}

static void pend_link(struct pend_list *l, struct pend *p) {
  p->prev = l->tail;
  p->next = NULL;
  if (l->tail)
    l->tail->next = p;
  else
    l->head = p;
  l->tail = p;
}

static void pend_unlink(struct pend_list *l, struct pend *p) {
  if (p->prev)
    p->prev->next = p->next;
  else
    l->head = p->next;
  if (p->next)
    p->next->prev = p->prev;
  else
    l->tail = p->prev;
}

static struct pend_list *pend_owner(struct pend *p) {
  return p->kind == PEND_WATCH ? &p->fk->watches : &p->fk->held;
}

/* The client went away: forget its watch or held request. */
static void on_pend_abort(struct fr_http_req *req) {
  struct pend *p = req->data;

  pend_unlink(pend_owner(p), p);
  free(p);
}

static const char *reason_of(int status) {
  switch (status) {
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "NotFound";
  case 409: return "Conflict";
  case 410: return "Expired";
  case 422: return "Invalid";
  case 429: return "TooManyRequests";
  case 503: return "ServiceUnavailable";
  default: return status >= 500 ? "InternalError" : "BadRequest";
  }
}

static size_t log_add(struct fake_kube *fk, const struct fr_http_req *req) {
  struct fk_request *r;

  if (fk->nlog == fk->log_cap) {
    fk->log_cap = fk->log_cap ? fk->log_cap * 2 : 64;
    fk->log = xrealloc(fk->log, fk->log_cap * sizeof(*fk->log));
  }
  r = &fk->log[fk->nlog];
  r->method = xstrdup(req->method);
  r->path = xstrdup(req->path);
  r->query = xstrdup(req->query);
  /* By length: fr/http.h promises a NUL-terminated body, but a request
   * without one gets an unterminated buffer today (common/src/http.c
   * conn_dispatch). */
  r->body = strndup(req->body, req->body_len);
  if (r->body == NULL)
    abort();
  r->status = 0;
  return fk->nlog++;
}

static void reply_json(struct fake_kube *fk, struct fr_http_req *req, size_t li, int status, json_t *obj) {
  char *text = json_dumps(obj, JSON_COMPACT);

  if (text == NULL)
    abort();
  fk->log[li].status = status;
  fr_http_respond(req, status, "application/json", NULL, text, strlen(text));
  free(text);
}

/* A Kubernetes Status body, as every apiserver error carries. */
static void reply_status(struct fake_kube *fk, struct fr_http_req *req, size_t li, int status,
                         const char *message) {
  json_t *st = json_pack("{s:s,s:s,s:{},s:s,s:s,s:s,s:i}", "kind", "Status", "apiVersion", "v1", "metadata",
                         "status", status < 300 ? "Success" : "Failure", "message", message ? message : "",
                         "reason", reason_of(status), "code", status);

  reply_json(fk, req, li, status, st);
  json_decref(st);
}

static void hold(struct fake_kube *fk, struct fr_http_req *req, size_t li) {
  struct pend *p = calloc(1, sizeof(*p));

  if (p == NULL)
    abort();
  p->fk = fk;
  p->req = req;
  p->kind = PEND_HELD;
  p->log = li;
  req->data = p;
  req->abort_cb = on_pend_abort;
  pend_link(&fk->held, p);
}

/* ------------------------------------------------------------ events */

static void set_rv(json_t *obj, uint64_t rv) {
  char s[24];

  snprintf(s, sizeof(s), "%" PRIu64, rv);
  json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion", json_string(s));
}

static char *event_line(const char *type, json_t *obj) {
  json_t *ev = json_pack("{s:s,s:O}", "type", type, "object", obj);
  char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
  char *line;
  size_t n;

  json_decref(ev);
  if (text == NULL)
    abort();
  n = strlen(text);
  line = xrealloc(text, n + 2);
  memcpy(line + n, "\n", 2);
  return line;
}

/* Writes one line to a watch; a watch whose connection is gone is dropped
 * (the server calls no abort_cb after a failed write). Returns -1 then. */
static int watch_write(struct pend *w, const char *line) {
  if (fr_http_stream_write(w->req, line, strlen(line)) == 0)
    return 0;
  pend_unlink(&w->fk->watches, w);
  free(w);
  return -1;
}

static void watch_catch_up(struct pend *w) {
  struct fake_kube *fk = w->fk;
  size_t i;

  if (fk->paused || !w->pods)
    return;
  for (i = 0; i < fk->nhist; i++) {
    if (fk->hist[i].rv <= w->sent_rv)
      continue;
    if (watch_write(w, fk->hist[i].line) != 0)
      return;
    w->sent_rv = fk->hist[i].rv;
  }
}

static void flush(struct fake_kube *fk) {
  struct pend *w, *nx;

  for (w = fk->watches.head; w != NULL; w = nx) {
    nx = w->next;
    watch_catch_up(w);
  }
}

/* Records an event of <obj> (which carries its new resourceVersion) and
 * sends it unless the watches are paused. */
static void publish(struct fake_kube *fk, const char *type, json_t *obj) {
  if (fk->nhist == fk->hist_cap) {
    fk->hist_cap = fk->hist_cap ? fk->hist_cap * 2 : 64;
    fk->hist = xrealloc(fk->hist, fk->hist_cap * sizeof(*fk->hist));
  }
  fk->hist[fk->nhist].rv = fk->rv;
  fk->hist[fk->nhist].line = event_line(type, obj);
  fk->nhist++;
  flush(fk);
}

/* RFC 7386 JSON merge patch of <patch> into object <target>. */
static void merge_into(json_t *target, json_t *patch) {
  const char *k;
  json_t *v;

  json_object_foreach(patch, k, v) {
    json_t *cur = json_object_get(target, k);
    if (json_is_null(v)) {
      json_object_del(target, k);
    } else if (json_is_object(v)) {
      if (!json_is_object(cur)) {
        cur = json_object();
        json_object_set_new(target, k, cur);
      }
      merge_into(cur, v);
    } else {
      json_object_set_new(target, k, json_deep_copy(v));
    }
  }
}

/* ------------------------------------------------------------ API */

static void list(struct fake_kube *fk, struct fr_http_req *req, size_t li, const char *kind, json_t *items) {
  char rv[24];
  json_t *doc;

  snprintf(rv, sizeof(rv), "%" PRIu64, fk->rv);
  doc = json_pack("{s:s,s:s,s:{s:s},s:o}", "kind", kind, "apiVersion", "v1", "metadata", "resourceVersion", rv,
                  "items", items);
  reply_json(fk, req, li, 200, doc);
  json_decref(doc);
}

static json_t *one_node(void) {
  return json_pack("[{s:s,s:s,s:{s:s},s:{s:{s:s,s:s,s:s},s:[{s:s,s:s}]}}]", "apiVersion", "v1", "kind", "Node",
                   "metadata", "name", "node-1", "status", "allocatable", "cpu", "8", "memory", "32Gi", "pods",
                   "110", "conditions", "type", "Ready", "status", "True");
}

static void watch(struct fake_kube *fk, struct fr_http_req *req, size_t li, int pods) {
  struct pend *w = calloc(1, sizeof(*w));
  char rv[32];
  int64_t from;

  if (w == NULL)
    abort();
  w->fk = fk;
  w->req = req;
  w->kind = PEND_WATCH;
  w->pods = pods;
  /* From the given resourceVersion (the informer's list), else from now. */
  w->sent_rv = fk->rv;
  if (fr_http_query_get(req->query, "resourceVersion", rv, sizeof(rv)) > 0 &&
      fr_parse_int64(rv, 0, INT64_MAX, &from) == 0 && from > 0)
    w->sent_rv = (uint64_t)from;
  fk->log[li].status = 200;
  if (fr_http_stream_begin(req, 200, "application/json", NULL) != 0) {
    free(w);
    return;
  }
  req->data = w;
  req->abort_cb = on_pend_abort;
  pend_link(&fk->watches, w);
  watch_catch_up(w);
}

static void create_pod(struct fake_kube *fk, struct fr_http_req *req, size_t li) {
  json_t *pod = json_loadb(req->body, req->body_len, 0, NULL);
  const char *name = json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));

  if (name == NULL) {
    reply_status(fk, req, li, 422, "a pod needs metadata.name");
  } else if (json_object_get(fk->pods, name) != NULL) {
    reply_status(fk, req, li, 409, "pods already exists");
  } else {
    json_object_set_new(pod, "status", json_pack("{s:s}", "phase", "Pending"));
    fk_add_pod(fk, json_incref(pod));
    reply_json(fk, req, li, 201, fk_pod(fk, name));
  }
  json_decref(pod);
}

static void patch_pod(struct fake_kube *fk, struct fr_http_req *req, size_t li, const char *name) {
  json_t *pod = json_object_get(fk->pods, name);
  json_t *patch = json_loadb(req->body, req->body_len, 0, NULL);
  const char *want = json_string_value(json_object_get(json_object_get(patch, "metadata"), "resourceVersion"));

  if (pod == NULL) {
    reply_status(fk, req, li, 404, "pods not found");
  } else if (!json_is_object(patch)) {
    reply_status(fk, req, li, 400, "the patch is not a JSON object");
  } else if (want != NULL && strcmp(want, fk_pod_rv(fk, name)) != 0) {
    /* A resourceVersion in the patch is a precondition. */
    reply_status(fk, req, li, 409, "Operation cannot be fulfilled on pods: the object has been modified; "
                                   "please apply your changes to the latest version and try again");
  } else {
    json_object_del(json_object_get(patch, "metadata"), "resourceVersion");
    merge_into(pod, patch);
    set_rv(pod, ++fk->rv);
    publish(fk, "MODIFIED", pod);
    reply_json(fk, req, li, 200, pod);
  }
  json_decref(patch);
}

static void delete_pod(struct fake_kube *fk, struct fr_http_req *req, size_t li, const char *name) {
  json_t *pod = json_incref(json_object_get(fk->pods, name));

  /* No grace period: gone at once, as with gracePeriodSeconds=0. */
  if (pod == NULL || fk_pod_delete(fk, name) != 0)
    reply_status(fk, req, li, 404, "pods not found");
  else
    reply_json(fk, req, li, 200, pod); /* its last state, as the DELETED event has it */
  json_decref(pod);
}

/* ConfigMaps: stored, listed, created, merge-patched and deleted; their
 * watches stay silent (the adapter reads its own writes back). */
static void configmap(struct fake_kube *fk, struct fr_http_req *req, size_t li, const char *name, int is_watch) {
  json_t *cm = name != NULL ? json_object_get(fk->cms, name) : NULL, *in;
  const char *k;

  if (name == NULL && strcmp(req->method, "GET") == 0) {
    json_t *items = json_array(), *v;
    if (is_watch) {
      json_decref(items);
      watch(fk, req, li, 0);
      return;
    }
    json_object_foreach(fk->cms, k, v) json_array_append(items, v);
    list(fk, req, li, "ConfigMapList", items);
  } else if (name == NULL && strcmp(req->method, "POST") == 0) {
    in = json_loadb(req->body, req->body_len, 0, NULL);
    k = json_string_value(json_object_get(json_object_get(in, "metadata"), "name"));
    if (k == NULL) {
      reply_status(fk, req, li, 422, "a configmap needs metadata.name");
    } else if (json_object_get(fk->cms, k) != NULL) {
      reply_status(fk, req, li, 409, "configmaps already exists");
    } else {
      set_rv(in, ++fk->rv);
      json_object_set(fk->cms, k, in);
      reply_json(fk, req, li, 201, in);
    }
    json_decref(in);
  } else if (cm == NULL) {
    reply_status(fk, req, li, 404, "configmaps not found");
  } else if (strcmp(req->method, "PATCH") == 0) {
    in = json_loadb(req->body, req->body_len, 0, NULL);
    merge_into(cm, in);
    set_rv(cm, ++fk->rv);
    reply_json(fk, req, li, 200, cm);
    json_decref(in);
  } else if (strcmp(req->method, "DELETE") == 0) {
    reply_json(fk, req, li, 200, cm);
    json_object_del(fk->cms, name);
  } else {
    reply_json(fk, req, li, 200, cm);
  }
}

static struct script *script_take(struct fake_kube *fk, const char *method, const char *path) {
  size_t i;

  for (i = 0; i < fk->nscripts; i++) {
    struct script *s = &fk->scripts[i];
    if (s->count != 0 && strcmp(s->method, method) == 0 &&
        (s->path_prefix == NULL || strncmp(path, s->path_prefix, strlen(s->path_prefix)) == 0)) {
      if (s->count > 0)
        s->count--;
      return s;
    }
  }
  return NULL;
}

static void handle(struct fr_http_req *req, void *arg) {
  struct fake_kube *fk = arg;
  const char *auth = fr_http_req_header(req, "Authorization");
  size_t li = log_add(fk, req), n = strlen(FK_PODS);
  char watch_q[8] = "";
  int is_watch, is_get = strcmp(req->method, "GET") == 0;
  struct script *sc;

  if (auth == NULL || strcmp(auth, "Bearer " FK_TOKEN) != 0) {
    reply_status(fk, req, li, 401, "Unauthorized");
    return;
  }
  if (fk->down) {
    reply_status(fk, req, li, 503, "the fake API server is down");
    return;
  }
  if ((sc = script_take(fk, req->method, req->path)) != NULL) {
    if (sc->status == FK_HOLD)
      hold(fk, req, li);
    else
      reply_status(fk, req, li, sc->status, sc->message);
    return;
  }
  fr_http_query_get(req->query, "watch", watch_q, sizeof(watch_q));
  is_watch = strcmp(watch_q, "true") == 0 || strcmp(watch_q, "1") == 0;

  if (is_get && strcmp(req->path, "/version") == 0) {
    json_t *v = json_pack("{s:s,s:s,s:s}", "major", "1", "minor", "32", "gitVersion", "v1.32.0");
    reply_json(fk, req, li, 200, v);
    json_decref(v);
  } else if (strcmp(req->path, FK_PODS) == 0) {
    if (is_get && is_watch) {
      watch(fk, req, li, 1);
    } else if (is_get) {
      json_t *items = json_array(), *pod;
      const char *k;
      json_object_foreach(fk->pods, k, pod) json_array_append(items, pod);
      list(fk, req, li, "PodList", items);
    } else if (strcmp(req->method, "POST") == 0) {
      create_pod(fk, req, li);
    } else {
      reply_status(fk, req, li, 405, "method not allowed");
    }
  } else if (strncmp(req->path, FK_PODS "/", n + 1) == 0 && strchr(req->path + n + 1, '/') == NULL) {
    const char *name = req->path + n + 1;
    if (strcmp(req->method, "PATCH") == 0)
      patch_pod(fk, req, li, name);
    else if (strcmp(req->method, "DELETE") == 0)
      delete_pod(fk, req, li, name);
    else if (is_get && fk_pod(fk, name) != NULL)
      reply_json(fk, req, li, 200, fk_pod(fk, name));
    else
      reply_status(fk, req, li, is_get ? 404 : 405, "pods not found");
  } else if (is_get && strncmp(req->path, SECRETS, strlen(SECRETS)) == 0) {
    json_t *sec = json_object_get(fk->secrets, req->path + strlen(SECRETS));
    if (sec != NULL)
      reply_json(fk, req, li, 200, sec);
    else
      reply_status(fk, req, li, 404, "secrets not found");
  } else if (strcmp(req->path, CONFIGMAPS) == 0) {
    configmap(fk, req, li, NULL, is_watch);
  } else if (strncmp(req->path, CONFIGMAPS "/", strlen(CONFIGMAPS) + 1) == 0) {
    configmap(fk, req, li, req->path + strlen(CONFIGMAPS) + 1, 0);
  } else if (strcmp(req->method, "POST") == 0 && strcmp(req->path, REPLICASETS) == 0) {
    /* A pool's ReplicaSet: answered as created, never listed (the
     * caches are static), so only the answer can show it. */
    json_t *in = json_loadb(req->body, req->body_len, 0, NULL);
    if (in == NULL) {
      reply_status(fk, req, li, 400, "the body is not JSON");
    } else {
      json_object_set_new(json_object_get(in, "metadata"), "namespace", json_string(FK_NS));
      set_rv(in, ++fk->rv);
      reply_json(fk, req, li, 201, in);
      json_decref(in);
    }
  } else if (is_get && (strcmp(req->path, NODES) == 0 || strcmp(req->path, ALLPODS) == 0 ||
                        strcmp(req->path, REPLICASETS) == 0 || strcmp(req->path, QUOTAS) == 0)) {
    /* The other caches: static, so their watches never send anything. */
    if (is_watch)
      watch(fk, req, li, 0);
    else if (strcmp(req->path, NODES) == 0)
      list(fk, req, li, "NodeList", one_node());
    else
      list(fk, req, li, "List", json_array());
  } else {
    reply_status(fk, req, li, 404, "the server could not find the requested resource");
  }
}

/* ------------------------------------------------------------ public */

int fk_new(uv_loop_t *loop, const char *dir, struct fake_kube **out) {
  struct fake_kube *fk = calloc(1, sizeof(*fk));
  FILE *f;
  int rc;

  if (fk == NULL)
    return -ENOMEM;
  fk->loop = loop;
  fk->rv = 100;
  fk->pods = json_object();
  fk->secrets = json_object();
  fk->cms = json_object();
  rc = fr_http_server_new(loop, NULL, handle, fk, &fk->srv);
  if (rc == 0)
    rc = fr_http_server_listen(fk->srv, "127.0.0.1", 0);
  snprintf(fk->kubeconfig, sizeof(fk->kubeconfig), "%s/kubeconfig", dir);
  f = rc == 0 ? fopen(fk->kubeconfig, "w") : NULL;
  if (f == NULL) {
    fk_free(fk, NULL, NULL);
    return rc ? rc : -EIO;
  }
  fprintf(f,
          "apiVersion: v1\nkind: Config\n"
          "clusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:%d\n"
          "users:\n- name: fake\n  user:\n    token: " FK_TOKEN "\n"
          "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: " FK_NS "\n"
          "current-context: fake\n",
          fr_http_server_port(fk->srv));
  if (fclose(f) != 0) {
    fk_free(fk, NULL, NULL);
    return -EIO;
  }
  *out = fk;
  return 0;
}

const char *fk_kubeconfig(const struct fake_kube *fk) {
  return fk->kubeconfig;
}

static void on_server_closed(struct fr_http_server *srv, void *arg) {
  struct fake_kube *fk = arg;
  void (*cb)(void *) = fk->free_cb;
  void *cb_arg = fk->free_arg;
  size_t i;

  (void)srv;
  for (i = 0; i < fk->nlog; i++) {
    free(fk->log[i].method);
    free(fk->log[i].path);
    free(fk->log[i].query);
    free(fk->log[i].body);
  }
  free(fk->log);
  for (i = 0; i < fk->nhist; i++)
    free(fk->hist[i].line);
  free(fk->hist);
  fk_script_clear(fk);
  json_decref(fk->pods);
  json_decref(fk->secrets);
  json_decref(fk->cms);
  free(fk);
  if (cb != NULL)
    cb(cb_arg);
}

void fk_free(struct fake_kube *fk, void (*cb)(void *arg), void *arg) {
  struct pend *p;

  if (fk == NULL)
    return;
  /* fr_http_abort calls no abort_cb: unlink here. */
  while ((p = fk->watches.head) != NULL || (p = fk->held.head) != NULL) {
    pend_unlink(pend_owner(p), p);
    fr_http_abort(p->req);
    free(p);
  }
  fk->free_cb = cb;
  fk->free_arg = arg;
  if (fk->srv != NULL) {
    fr_http_server_free(fk->srv, on_server_closed, fk);
  } else {
    on_server_closed(NULL, fk);
  }
}

void fk_add_secret(struct fake_kube *fk, const char *name, json_t *data) {
  json_object_set_new(fk->secrets, name,
                      json_pack("{s:s,s:s,s:{s:s,s:s},s:s,s:O}", "apiVersion", "v1", "kind", "Secret",
                                "metadata", "name", name, "namespace", FK_NS, "type", "Opaque", "data", data));
}

json_t *fk_warm_pod(const char *name, const char *pool) {
  char now[21];

  fr_time_rfc3339(fr_wall_ms() / 1000, now);
  return json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s,s:s}},"
                   "s:{s:s,s:[{s:s,s:s,s:{s:{s:s,s:s}}}]},"
                   "s:{s:s,s:s,s:[{s:s,s:s},{s:s,s:s}]}}",
                   "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "namespace", FK_NS, "labels",
                   "fedrouter.io/sandbox", "true", "fedrouter.io/pool", pool, "fedrouter.io/state", "warm",
                   "spec", "nodeName", "node-1", "containers", "name", "sandbox", "image", "python:3.12",
                   "resources", "requests", "cpu", "500m", "memory", "256Mi", "status", "phase", "Running",
                   "startTime", now, "conditions", "type", "PodScheduled", "status", "True", "type", "Ready",
                   "status", "True");
}

json_t *fk_sandbox_pod(const char *name, const char *tenant, const char *sbname) {
  json_t *pod = fk_warm_pod(name, "none");
  json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");

  json_object_del(labels, "fedrouter.io/pool");
  json_object_set_new(labels, "fedrouter.io/state", json_string("claimed"));
  json_object_set_new(labels, "fedrouter.io/tenant", json_string(tenant));
  json_object_set_new(labels, "fedrouter.io/name", json_string(sbname));
  return pod;
}

void fk_add_configmap(struct fake_kube *fk, json_t *cm) {
  set_rv(cm, ++fk->rv);
  json_object_set_new(fk->cms, json_string_value(json_object_get(json_object_get(cm, "metadata"), "name")), cm);
}

json_t *fk_configmap(const struct fake_kube *fk, const char *name) {
  return json_object_get(fk->cms, name);
}

void fk_add_pod(struct fake_kube *fk, json_t *pod) {
  json_t *meta = json_object_get(pod, "metadata");
  const char *name = json_string_value(json_object_get(meta, "name"));
  char now[21], uid[40];

  if (name == NULL)
    abort();
  fr_time_rfc3339(fr_wall_ms() / 1000, now);
  snprintf(uid, sizeof(uid), "uid-%" PRIu64, fk->rv + 1);
  json_object_set_new(meta, "namespace", json_string(FK_NS));
  json_object_set_new(meta, "uid", json_string(uid));
  if (json_object_get(meta, "creationTimestamp") == NULL)
    json_object_set_new(meta, "creationTimestamp", json_string(now));
  set_rv(pod, ++fk->rv);
  json_object_set_new(fk->pods, name, pod);
  publish(fk, "ADDED", pod);
}

json_t *fk_pod(const struct fake_kube *fk, const char *name) {
  return json_object_get(fk->pods, name);
}

const char *fk_pod_rv(const struct fake_kube *fk, const char *name) {
  const char *rv =
      json_string_value(json_object_get(json_object_get(fk_pod(fk, name), "metadata"), "resourceVersion"));

  return rv ? rv : "";
}

int fk_pod_merge(struct fake_kube *fk, const char *name, const char *merge) {
  json_t *pod = json_object_get(fk->pods, name), *patch = json_loads(merge, 0, NULL);

  if (pod == NULL || !json_is_object(patch)) {
    json_decref(patch);
    return -1;
  }
  merge_into(pod, patch);
  json_decref(patch);
  set_rv(pod, ++fk->rv);
  publish(fk, "MODIFIED", pod);
  return 0;
}

int fk_pod_delete(struct fake_kube *fk, const char *name) {
  json_t *pod = json_incref(json_object_get(fk->pods, name));

  if (pod == NULL)
    return -1;
  json_object_del(fk->pods, name);
  set_rv(pod, ++fk->rv);
  publish(fk, "DELETED", pod);
  json_decref(pod);
  return 0;
}

void fk_pause_watch(struct fake_kube *fk, int paused) {
  fk->paused = paused;
  if (!paused)
    flush(fk);
}

void fk_send_raw(struct fake_kube *fk, const char *type, json_t *obj) {
  char *line = event_line(type, obj);
  struct pend *w, *nx;

  for (w = fk->watches.head; w != NULL; w = nx) {
    nx = w->next;
    if (w->pods)
      watch_write(w, line);
  }
  free(line);
}

int fk_pod_watches(const struct fake_kube *fk) {
  const struct pend *w;
  int n = 0;

  for (w = fk->watches.head; w != NULL; w = w->next)
    n += w->pods;
  return n;
}

void fk_script_path(struct fake_kube *fk, const char *method, const char *path_prefix, int count, int status,
                    const char *message) {
  struct script *s;

  fk->scripts = xrealloc(fk->scripts, (fk->nscripts + 1) * sizeof(*fk->scripts));
  s = &fk->scripts[fk->nscripts++];
  snprintf(s->method, sizeof(s->method), "%s", method);
  s->count = count;
  s->status = status;
  s->message = xstrdup(message);
  s->path_prefix = path_prefix != NULL ? xstrdup(path_prefix) : NULL;
}

void fk_script(struct fake_kube *fk, const char *method, int count, int status, const char *message) {
  fk_script_path(fk, method, NULL, count, status, message);
}

void fk_script_clear(struct fake_kube *fk) {
  size_t i;

  for (i = 0; i < fk->nscripts; i++) {
    free(fk->scripts[i].message);
    free(fk->scripts[i].path_prefix);
  }
  free(fk->scripts);
  fk->scripts = NULL;
  fk->nscripts = 0;
}

void fk_set_down(struct fake_kube *fk, int down) {
  fk->down = down;
}

size_t fk_held(const struct fake_kube *fk) {
  const struct pend *p;
  size_t n = 0;

  for (p = fk->held.head; p != NULL; p = p->next)
    n++;
  return n;
}

const struct fk_request *fk_held_request(const struct fake_kube *fk) {
  return fk->held.head ? &fk->log[fk->held.head->log] : NULL;
}

int fk_answer_held(struct fake_kube *fk, int status, const char *message) {
  struct pend *p = fk->held.head;

  if (p == NULL)
    return -1;
  pend_unlink(&fk->held, p);
  p->req->abort_cb = NULL;
  reply_status(fk, p->req, p->log, status, message);
  free(p);
  return 0;
}

static int log_match(const struct fk_request *r, const char *method, const char *prefix) {
  return strcmp(r->method, method) == 0 && (prefix == NULL || strncmp(r->path, prefix, strlen(prefix)) == 0);
}

int fk_count(const struct fake_kube *fk, const char *method, const char *path_prefix) {
  size_t i;
  int n = 0;

  for (i = 0; i < fk->nlog; i++)
    n += log_match(&fk->log[i], method, path_prefix);
  return n;
}

const struct fk_request *fk_nth(const struct fake_kube *fk, const char *method, const char *path_prefix,
                                int n) {
  size_t i;

  for (i = 0; i < fk->nlog; i++)
    if (log_match(&fk->log[i], method, path_prefix) && n-- == 0)
      return &fk->log[i];
  return NULL;
}
