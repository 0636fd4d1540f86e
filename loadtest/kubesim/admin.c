/* admin.c - the /_sim/ admin surface: inspect the simulated cluster and
 * switch faults (down, latency, 5xx, 429, dropped watches, a node's kubelet
 * lost or NotReady) at run time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

static json_t *faults_json(const struct sim *s) {
  json_t *cl = json_object();
  int i;

  for (i = 0; i < s->faults.nclient_latency; i++)
    json_object_set_new(cl, s->faults.client_latency[i].ip, json_integer(s->faults.client_latency[i].ms));
  return json_pack("{s:b,s:b,s:i,s:o,s:f,s:i,s:f,s:i}", "down", s->faults.down,
                   "reject_watches", s->faults.reject_watches, "latency_ms",
                   s->faults.latency_ms, "client_latency_ms", cl, "error_rate", s->faults.error_rate,
                   "error_code", s->faults.error_code ? s->faults.error_code : 500, "throttle_rate",
                   s->faults.throttle_rate, "retry_after_s",
                   s->faults.retry_after_s ? s->faults.retry_after_s : 1);
}

static void admin_error(struct fr_http_req *req, int status, const char *code, const char *msg) {
  json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);

  api_json(req, status, j);
}

static int set_down(struct sim *s, int down) {
  if (down == s->faults.down)
    return 0;
  s->faults.down = down;
  if (down) {
    FR_WARN("kubesim", "%s: going down (fault injected)", s->opts.name);
    watch_drop_all(s);
    fr_http_server_unlisten(s->api, 1);
    return 0;
  }
  FR_WARN("kubesim", "%s: coming back up", s->opts.name);
  return fr_http_server_listen(s->api, NULL, 0);
}

static void admin_faults(struct sim *s, struct fr_http_req *req) {
  json_t *in, *v;
  json_error_t e;
  const char *key;
  struct sim_faults f;

  if (strcmp(req->method, "GET") == 0) {
    api_json(req, 200, faults_json(s));
    return;
  }
  in = json_loadb(req->body, req->body_len, 0, &e);
  if (!json_is_object(in)) {
    json_decref(in);
    admin_error(req, 400, "invalid_json", "body must be a JSON object");
    return;
  }
  f = s->faults;
  json_object_foreach(in, key, v) {
    if (strcmp(key, "down") == 0 && json_is_boolean(v)) {
      f.down = json_is_true(v);
    } else if (strcmp(key, "latency_ms") == 0 && json_is_integer(v) && json_integer_value(v) >= 0 &&
               json_integer_value(v) <= 600000) {
      f.latency_ms = (int)json_integer_value(v);
    } else if (strcmp(key, "error_rate") == 0 && json_is_number(v) && json_number_value(v) >= 0 &&
               json_number_value(v) <= 1) {
      f.error_rate = json_number_value(v);
    } else if (strcmp(key, "error_code") == 0 && json_is_integer(v) && json_integer_value(v) >= 500 &&
               json_integer_value(v) <= 599) {
      f.error_code = (int)json_integer_value(v);
    } else if (strcmp(key, "throttle_rate") == 0 && json_is_number(v) && json_number_value(v) >= 0 &&
               json_number_value(v) <= 1) {
      f.throttle_rate = json_number_value(v);
    } else if (strcmp(key, "retry_after_s") == 0 && json_is_integer(v) && json_integer_value(v) >= 1 &&
               json_integer_value(v) <= 3600) {
      f.retry_after_s = (int)json_integer_value(v);
    } else if (strcmp(key, "client_latency_ms") == 0 && json_is_object(v)) {
      const char *ip;
      json_t *ms;
      f.nclient_latency = 0;
      json_object_foreach(v, ip, ms) {
        if (!json_is_integer(ms) || json_integer_value(ms) < 0 || strlen(ip) >= sizeof(f.client_latency[0].ip) ||
            f.nclient_latency == (int)FR_ARRAY_SIZE(f.client_latency)) {
          json_decref(in);
          admin_error(req, 400, "invalid_field", "client_latency_ms maps at most 16 IPs to milliseconds");
          return;
        }
        snprintf(f.client_latency[f.nclient_latency].ip, sizeof(f.client_latency[0].ip), "%s", ip);
        f.client_latency[f.nclient_latency++].ms = (int)json_integer_value(ms);
      }
    } else if (strcmp(key, "reject_watches") == 0 && json_is_boolean(v)) {
      f.reject_watches = json_is_true(v);
    } else if (strcmp(key, "drop_watches") == 0 && json_is_boolean(v)) {
      /* an action, not a state */
    } else {
      char msg[200];
      snprintf(msg, sizeof(msg), "unknown or invalid field \"%s\"", key);
      json_decref(in);
      admin_error(req, 400, "invalid_field", msg);
      return;
    }
  }
  {
    int down = f.down;
    f.down = s->faults.down;
    s->faults = f;
    if (json_is_true(json_object_get(in, "drop_watches")))
      watch_drop_all(s);
    if (set_down(s, down) != 0) {
      json_decref(in);
      admin_error(req, 500, "listen_failed", "could not listen again on the API address");
      return;
    }
  }
  json_decref(in);
  api_json(req, 200, faults_json(s));
}

static json_t *node_json(struct sim_obj *o) {
  struct sim_node *nd = o->u.node;

  return json_pack("{s:s,s:s,s:s}", "name", o->name, "kubelet", node_kubelet_name(nd->kubelet), "ready",
                   nd->ready == 'T' ? "True" : nd->ready == 'F' ? "False" : "Unknown");
}

/* GET /_sim/nodes: every node's kubelet and Ready condition.
 * POST /_sim/nodes/NAME {"kubelet":"ready"|"not-ready"|"lost"}: what the
 * node's kubelet does from now on (nodelife.c). */
static void admin_nodes(struct sim *s, struct fr_http_req *req) {
  const char *name = req->path + strlen("/_sim/nodes");
  struct sim_obj *o;
  enum node_kubelet k;
  json_t *in, *arr;
  json_error_t e;

  if (*name == '\0' && strcmp(req->method, "GET") == 0) {
    arr = json_array();
    for (o = store_first(s, K_NODE, NULL); o != NULL; o = store_next(s, o))
      json_array_append_new(arr, node_json(o));
    api_json(req, 200, json_pack("{s:i,s:o}", "node_monitor_grace_ms", s->opts.node_grace_ms, "nodes", arr));
    return;
  }
  if (*name != '/' || name[1] == '\0' || strchr(name + 1, '/') != NULL) {
    admin_error(req, 404, "not_found", "node endpoints: GET /_sim/nodes, GET|POST /_sim/nodes/NAME");
    return;
  }
  o = store_get(s, K_NODE, "", name + 1);
  if (o == NULL || o->u.node == NULL) {
    admin_error(req, 404, "not_found", "no such node");
    return;
  }
  if (strcmp(req->method, "GET") == 0) {
    api_json(req, 200, node_json(o));
    return;
  }
  if (strcmp(req->method, "POST") != 0 && strcmp(req->method, "PUT") != 0) {
    admin_error(req, 405, "method_not_allowed", "GET or POST");
    return;
  }
  in = json_loadb(req->body, req->body_len, 0, &e);
  if (!json_is_object(in) || json_object_size(in) != 1 ||
      node_kubelet_parse(json_string_value(json_object_get(in, "kubelet")), &k) != 0) {
    json_decref(in);
    admin_error(req, 400, "invalid_field", "body must be {\"kubelet\": \"ready\" | \"not-ready\" | \"lost\"}");
    return;
  }
  json_decref(in);
  if (node_set_kubelet(s, o, k) != 0) {
    admin_error(req, 503, "out_of_memory", "out of memory");
    return;
  }
  api_json(req, 200, node_json(o));
}

/* GET /_sim/tokens: how many bearer tokens the API accepts.
 * PUT|POST /_sim/tokens {"tokens":["a","b"]}: accept exactly these from
 * now on (a service-account token rotation: the new one is added, then
 * the old one dropped). The admin surface keeps --token. */
static void admin_tokens(struct sim *s, struct fr_http_req *req) {
  char *next[SIM_MAX_TOKENS];
  json_t *in, *arr, *v;
  json_error_t e;
  size_t i, n = 0;

  if (strcmp(req->method, "GET") == 0) {
    api_json(req, 200, json_pack("{s:I}", "tokens", (json_int_t)(s->napi_tokens ? s->napi_tokens : s->opts.token != NULL)));
    return;
  }
  in = json_loadb(req->body, req->body_len, 0, &e);
  arr = json_object_get(in, "tokens");
  if (!json_is_object(in) || json_object_size(in) != 1 || !json_is_array(arr) || json_array_size(arr) == 0 ||
      json_array_size(arr) > SIM_MAX_TOKENS) {
    json_decref(in);
    admin_error(req, 400, "invalid_field", "body must be {\"tokens\": [1 to 8 tokens]}");
    return;
  }
  json_array_foreach(arr, i, v) {
    const char *t = json_string_value(v);
    size_t k;
    int bad = t == NULL || t[0] == '\0' || strlen(t) > 4096;
    for (k = 0; !bad && t[k] != '\0'; k++)
      bad = t[k] <= ' ' || t[k] == 0x7f;
    if (bad || (next[n] = strdup(t)) == NULL) {
      while (n > 0)
        free(next[--n]);
      json_decref(in);
      admin_error(req, bad ? 400 : 503, bad ? "invalid_field" : "out_of_memory",
                  bad ? "a token is a non-empty string of printable characters without spaces" : "out of memory");
      return;
    }
    n++;
  }
  json_decref(in);
  for (i = 0; i < s->napi_tokens; i++)
    fr_secret_free(s->api_tokens[i]);
  memcpy(s->api_tokens, next, n * sizeof(next[0]));
  s->napi_tokens = n;
  FR_INFO("kubesim", "%s: the API now accepts %zu bearer token(s)", s->opts.name, n);
  api_json(req, 200, json_pack("{s:I}", "tokens", (json_int_t)n));
}

static void admin_state(struct sim *s, struct fr_http_req *req) {
  json_t *j = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:I,s:o,s:o}", "name", s->opts.name,
                        "resource_version", (json_int_t)s->rv, "pods", (json_int_t)s->counts[K_POD],
                        "nodes", (json_int_t)s->counts[K_NODE], "replicasets",
                        (json_int_t)s->counts[K_RS], "watchers", (json_int_t)s->nwatchers,
                        "unschedulable", (json_int_t)s->nunsched, "execs_started",
                        (json_int_t)s->execs_started, "connections",
                        (json_int_t)fr_http_server_nconns(s->api), "port",
                        fr_http_server_port(s->api), "unauthorized", (json_int_t)s->unauthorized, "faults",
                        faults_json(s), "pod_network", podnet_json(s));
  api_json(req, 200, j);
}

/* GET: the recorded requests, oldest first; DELETE: forget them. */
static void admin_requests(struct sim *s, struct fr_http_req *req) {
  json_t *arr;
  size_t i;

  if (strcmp(req->method, "DELETE") == 0) {
    s->reqlog_n = s->reqlog_next = 0;
    api_json(req, 200, json_pack("{s:i}", "requests", 0));
    return;
  }
  arr = json_array();
  for (i = 0; arr != NULL && i < s->reqlog_n; i++)
    json_array_append_new(arr, json_string(s->reqlog[(s->reqlog_next + SIM_REQLOG - s->reqlog_n + i) % SIM_REQLOG]));
  api_json(req, 200, json_pack("{s:o}", "requests", arr != NULL ? arr : json_array()));
}

void admin_handle(struct fr_http_req *req, void *arg) {
  struct sim *s = arg;
  const char *h;

  if (s->opts.token != NULL) {
    h = fr_http_req_header(req, "Authorization");
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0 || !fr_secret_equal(h + 7, s->opts.token)) {
      admin_error(req, 401, "unauthorized", "missing or wrong bearer token");
      return;
    }
  }
  if (strcmp(req->path, "/_sim/state") == 0 && strcmp(req->method, "GET") == 0)
    admin_state(s, req);
  else if (strcmp(req->path, "/_sim/faults") == 0 &&
           (strcmp(req->method, "GET") == 0 || strcmp(req->method, "POST") == 0 ||
            strcmp(req->method, "PUT") == 0))
    admin_faults(s, req);
  else if (strcmp(req->path, "/_sim/nodes") == 0 || strncmp(req->path, "/_sim/nodes/", 12) == 0)
    admin_nodes(s, req);
  else if (strcmp(req->path, "/_sim/tokens") == 0 &&
           (strcmp(req->method, "GET") == 0 || strcmp(req->method, "PUT") == 0 || strcmp(req->method, "POST") == 0))
    admin_tokens(s, req);
  else if (strcmp(req->path, "/_sim/requests") == 0 &&
           (strcmp(req->method, "GET") == 0 || strcmp(req->method, "DELETE") == 0))
    admin_requests(s, req);
  else if (strcmp(req->path, "/_sim/stats") == 0 &&
           (strcmp(req->method, "GET") == 0 || strcmp(req->method, "DELETE") == 0)) {
    json_t *j;
    if (strcmp(req->method, "DELETE") == 0)
      stats_reset(s);
    j = stats_json(s);
    if (j == NULL)
      admin_error(req, 503, "out_of_memory", "out of memory");
    else
      api_json(req, 200, j);
  } else if (strcmp(req->path, "/metrics") == 0 && strcmp(req->method, "GET") == 0) {
    struct fr_buf b;
    fr_buf_init(&b);
    if (stats_prometheus(s, &b) != 0 || b.data == NULL)
      admin_error(req, 503, "out_of_memory", "out of memory");
    else
      fr_http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data, b.len);
    fr_buf_free(&b);
  } else if (strcmp(req->path, "/_sim/netpol") == 0 && strcmp(req->method, "GET") == 0) {
    json_t *j = netpol_json(s);
    if (j == NULL)
      admin_error(req, 503, "out_of_memory", "out of memory");
    else
      api_json(req, 200, j);
  } else if (strcmp(req->path, "/_sim/compact") == 0 && strcmp(req->method, "POST") == 0) {
    store_compact(s);
    api_json(req, 200, json_pack("{s:I}", "compacted_to", (json_int_t)s->rv));
  } else if (strcmp(req->path, "/_sim/healthz") == 0)
    fr_http_respond(req, 200, "text/plain", NULL, "ok", 2);
  else
    admin_error(req, 404, "not_found", "admin endpoints: GET /_sim/state, GET|POST /_sim/faults, GET /_sim/nodes, "
                "GET|POST /_sim/nodes/NAME, GET|DELETE /_sim/requests, GET|PUT /_sim/tokens, GET|DELETE /_sim/stats, "
                "GET /_sim/netpol, POST /_sim/compact, GET /metrics (admin port)");
}

