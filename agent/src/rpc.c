/* rpc.c — routing, auth, /init, and the Connect protocol for envd's
 * process.Process service (filesystem.Filesystem is in files.c, its
 * watchers in watch.c).
 *
 * Connect over HTTP/1.1 with the JSON codec, as the E2B SDK speaks it:
 *  - unary: POST /<service>/<Method>, application/json in and out; errors
 *    are {"code":"not_found","message":...} with Connect's HTTP status.
 *  - server streaming: application/connect+json, one enveloped request
 *    message (flags byte, 4-byte big-endian length, JSON); the response is
 *    200, chunked, one envelope per event, ended by an end-stream envelope
 *    (flags 0x02) carrying {} or {"error":{...}}.
 * Responses carry only fields of envd's messages: the SDK's protobuf-es
 * parser rejects unknown fields. Our extensions are request fields (read by
 * us alone) and response headers.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "agent.h"

extern char **environ;

enum {
  R_NONE,
  R_INIT,
  R_FILES_POST,
  R_RPC,
};

#define RPC_BODY_MAX (8 * 1024 * 1024) /* SendInput carries stdin in base64 */
#define INIT_BODY_MAX (1024 * 1024)
#define DEFAULT_KEEPALIVE_S 50

static const struct {
  const char *code;
  int status;
} codes[] = {
    {"canceled", 499},          {"unknown", 500},           {"invalid_argument", 400},
    {"deadline_exceeded", 504}, {"not_found", 404},         {"already_exists", 409},
    {"permission_denied", 403}, {"resource_exhausted", 429}, {"failed_precondition", 400},
    {"aborted", 409},           {"out_of_range", 400},      {"unimplemented", 501},
    {"internal", 500},          {"unavailable", 503},       {"data_loss", 500},
    {"unauthenticated", 401},
};

int connect_http_status(const char *code) {
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
    if (strcmp(codes[i].code, code) == 0)
      return codes[i].status;
  return 500;
}

int envelope_write(struct conn *c, uint8_t flags, json_t *msg) {
  char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
  json_decref(msg);
  if (s == NULL)
    return -ENOMEM;
  size_t n = strlen(s);
  struct buf env = {0};
  unsigned char hdr[5] = {flags, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
  int rc = buf_append(&env, hdr, 5);
  if (rc == 0)
    rc = buf_append(&env, s, n);
  if (rc == 0)
    rc = http_stream_write(c, env.p, env.len);
  buf_free(&env);
  free(s);
  return rc;
}

void rpc_error(struct conn *c, bool streaming, const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  text_fix(msg);
  json_t *err = json_pack("{s:s,s:s}", "code", code, "message", msg);
  if (!streaming) {
    http_respond_json(c, connect_http_status(code), err);
    return;
  }
  if (!c->streaming && !c->resp_done)
    http_stream_begin(c, 200, "application/connect+json", NULL);
  envelope_write(c, 2, json_pack("{s:o}", "error", err));
  http_stream_end(c);
  conn_service(c);
}

static const char *errno_code(int err) {
  switch (err) {
  case -ENOENT: case -ESRCH: return "not_found";
  case -EACCES: case -EPERM: case -EROFS: return "permission_denied";
  case -EEXIST: return "already_exists";
  case -ENOMEM: case -ENOBUFS: case -ENOSPC: case -EMFILE: case -ENFILE: case -EAGAIN:
    return "resource_exhausted";
  case -EPIPE: case -ENOTTY: case -EBUSY: return "failed_precondition";
  case -EINVAL: case -ENAMETOOLONG: case -ENOTDIR: case -E2BIG: return "invalid_argument";
  default: return "internal";
  }
}

/* ---- auth ---- */

static bool authorized(struct conn *c) {
  struct agent *a = c->a;
  if (a->token == NULL)
    return false;
  const char *given = c->req.has_token ? c->req.token : c->req.has_bearer ? c->req.bearer : NULL;
  return given != NULL && token_equal(given, a->token);
}

static void deny(struct conn *c, bool rpc) {
  c->close_after = c->req.content_length != 0 || c->req.chunked; /* body unread */
  if (rpc)
    rpc_error(c, false, "unauthenticated",
              c->a->token ? "invalid or missing access token" : "agent not initialized: POST /init first");
  else
    http_error(c, 401, c->a->token ? "invalid or missing access token"
                                   : "agent not initialized: POST /init first");
}

/* Only a router initialises an agent, ever. The pod was created carrying
 * the SHA-256 of its init token (FR_AGENT_INIT_SHA256), which the router
 * derives from its agent key and the sandbox cannot; the /init must carry
 * that token (X-Access-Token or Bearer), before and after the first one.
 * The token is wiped from the request once checked: the token of a pool's
 * pods opens every warm pod of the pool. Answers the refusal itself. */
static bool init_allowed(struct conn *c) {
  struct agent *a = c->a;
  struct req *r = &c->req;
  const char *given = r->has_token ? r->token : r->has_bearer ? r->bearer : NULL;
  unsigned char digest[32];
  bool ok = false;

  if (a->init_hash_set) {
    if (given != NULL) {
      sha256(given, strlen(given), digest);
      ok = bytes_equal(digest, a->init_sha256, sizeof(digest));
      explicit_bzero(digest, sizeof(digest));
    }
  } else if (a->open_init) {
    ok = a->token == NULL || authorized(c); /* --allow-open-init: the first caller */
  }
  explicit_bzero(r->token, sizeof(r->token));
  explicit_bzero(r->bearer, sizeof(r->bearer));
  r->has_token = r->has_bearer = false;
  if (ok)
    return true;
  c->close_after = r->content_length != 0 || r->chunked; /* body unread */
  if (!a->init_hash_set && !a->open_init)
    http_error(c, 403, "this agent takes no /init: it was started without FR_AGENT_INIT_SHA256 "
                       "(an agent made by an older router; --allow-open-init accepts the first caller)");
  else if (a->init_hash_set)
    http_error(c, 401, "invalid or missing init token");
  else
    http_error(c, 401, "invalid or missing access token");
  return false;
}

/* ---- query strings ---- */

/* Finds <key> in the query and decodes it into <out>, its length (NULs
 * included) into *<len>. 1 found, 0 absent, negative on a bad encoding. */
static int query_get(const char *q, const char *key, char *out, size_t cap, size_t *len) {
  size_t kl = strlen(key);
  while (q && *q) {
    const char *amp = strchr(q, '&');
    size_t l = amp ? (size_t)(amp - q) : strlen(q);
    if (l > kl && strncmp(q, key, kl) == 0 && q[kl] == '=') {
      int rc = percent_decode(q + kl + 1, l - kl - 1, out, cap);
      *len = rc < 0 ? 0 : (size_t)rc;
      return rc < 0 ? rc : 1;
    }
    if (l == kl && strncmp(q, key, kl) == 0) {
      out[0] = '\0';
      *len = 0;
      return 1;
    }
    q = amp ? amp + 1 : NULL;
  }
  return 0;
}

static bool ctype_is(const char *ct, const char *want) {
  size_t n = strlen(want);
  return strncasecmp(ct, want, n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static bool rpc_is_streaming(const char *svc_method) {
  return strcmp(svc_method, "process.Process/Start") == 0 ||
         strcmp(svc_method, "process.Process/Connect") == 0 ||
         strcmp(svc_method, "process.Process/StreamInput") == 0 ||
         strcmp(svc_method, "filesystem.Filesystem/WatchDir") == 0;
}

json_t *agent_held_json(const struct agent *a) {
  size_t nconns = 0, out_len = 0, out_cap = 0, body_cap = 0, stdin_cap = 0, nprocs = 0, paused, kbytes;
  const struct conn *c;
  const struct proc *p;
  json_t *j;

  for (c = a->conns; c != NULL; c = c->next) {
    nconns++;
    out_len += buf_size(&c->out);
    out_cap += c->out.cap;
    body_cap += c->body.cap;
  }
  for (p = a->procs; p != NULL; p = p->next) {
    nprocs++;
    stdin_cap += p->in_buf.cap;
  }
  /* total_bytes: every buffer that grows with what clients and processes
   * send (capacity, not length: what is allocated), plus the fixed size of
   * each connection (its input buffer is part of it). Watcher events are
   * counted, not sized: each is a small JSON object. */
  watch_held(a, &paused, &kbytes);
  j = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "connections", (json_int_t)nconns,
                   "watchers", (json_int_t)a->nwatches,
                   "connection_bytes", (json_int_t)(nconns * sizeof(struct conn)), "output_queued",
                   (json_int_t)out_len, "output_capacity", (json_int_t)out_cap, "body_capacity", (json_int_t)body_cap,
                   "process_output_bytes", (json_int_t)a->buffered_total, "stdin_capacity", (json_int_t)stdin_cap,
                   "processes", (json_int_t)nprocs, "watch_events_queued", (json_int_t)a->watch_queued,
                   "total_bytes",
                   (json_int_t)(nconns * sizeof(struct conn) + out_cap + body_cap + a->buffered_total + stdin_cap));
  /* Not held by the agent, but what tells a lagging watch stream apart:
   * it stopped reading (paused) and the kernel keeps the events. */
  if (j != NULL) {
    json_object_set_new(j, "watch_streams_paused", json_integer((json_int_t)paused));
    json_object_set_new(j, "watch_kernel_bytes", json_integer((json_int_t)kbytes));
  }
  return j;
}

void route_head(struct conn *c) {
  struct agent *a = c->a;
  struct req *r = &c->req;
  const char *m = r->method;
  if (strcmp(r->path, "/health") == 0) {
    if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
      http_error(c, 405, "use GET");
      return;
    }
    http_respond(c, 204, NULL, NULL, NULL, 0);
    return;
  }
  if (strcmp(r->path, "/init") == 0) {
    if (strcmp(m, "POST") != 0) {
      http_error(c, 405, "use POST");
      return;
    }
    if (!init_allowed(c))
      return;
    r->route = R_INIT;
    c->body_limit = INIT_BODY_MAX;
    return;
  }
  bool is_rpc = strncmp(r->path, "/process.Process/", 17) == 0 ||
                strncmp(r->path, "/filesystem.Filesystem/", 23) == 0;
  if (!authorized(c)) {
    deny(c, is_rpc);
    return;
  }
  if (strcmp(r->path, "/_fr/held") == 0) {
    /* What the agent holds now, by its own count (an internal path the
     * router never relays): tests bound memory behind slow clients by
     * this, the same in every build, where RSS would also count an
     * allocator's caches (ASan's quarantine keeps freed blocks). */
    if (strcmp(m, "GET") != 0) {
      http_error(c, 405, "use GET");
      return;
    }
    http_respond_json(c, 200, agent_held_json(a));
    return;
  }
  if (strcmp(r->path, "/envs") == 0) {
    /* envd's: the sandbox's create-time env as /init set it, without the
     * values /init named as secrets. */
    if (strcmp(m, "GET") != 0) {
      http_error(c, 405, "use GET");
      return;
    }
    http_respond_json(c, 200, a->init_envs ? json_incref(a->init_envs) : json_object());
    return;
  }
  if (strcmp(r->path, "/version") == 0) {
    http_respond_json(c, 200, json_pack("{s:s,s:s}", "version", AGENT_ENVD_VERSION,
                                        "agent", "fedrouter-agent/" AGENT_VERSION));
    return;
  }
  if (strcmp(r->path, "/files") == 0) {
    char path[4096], shown[600];
    size_t plen;
    int have = query_get(r->query, "path", path, sizeof(path), &plen);
    if (have < 0) {
      http_error(c, 400, "bad path parameter");
      return;
    }
    if (have && !path_valid(path, plen)) {
      /* "/tmp/a%00b" would be "/tmp/a" to open(2); "%ff" no protobuf string */
      path_show(path, plen, shown, sizeof(shown));
      http_error(c, 400, "invalid path %s: a path is UTF-8 text without NUL bytes", shown);
      return;
    }
    if (strcmp(m, "GET") == 0) {
      if (have == 0) {
        http_error(c, 400, "path parameter required");
        return;
      }
      files_get(c, path);
      return;
    }
    if (strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0) {
      if (r->content_encoding[0] && strcasecmp(r->content_encoding, "identity") != 0) {
        c->close_after = true;
        http_error(c, 400, "Content-Encoding %s not supported: send the file uncompressed",
                   r->content_encoding);
        return;
      }
      r->route = R_FILES_POST;
      upload_begin(c, have ? path : NULL);
      return;
    }
    http_error(c, 405, "use GET or POST");
    return;
  }
  if (is_rpc) {
    if (strcmp(m, "POST") != 0) {
      c->close_after = true;
      rpc_error(c, false, "unimplemented", "Connect RPCs use POST");
      return;
    }
    const char *sm = r->path + 1;
    if (strlen(sm) >= sizeof(r->rpc)) {
      rpc_error(c, false, "unimplemented", "unknown method");
      return;
    }
    snprintf(r->rpc, sizeof(r->rpc), "%s", sm);
    bool want_stream = rpc_is_streaming(sm);
    if (want_stream ? !ctype_is(r->content_type, "application/connect+json")
                    : !ctype_is(r->content_type, "application/json")) {
      c->close_after = true;
      static const char msg[] =
          "{\"code\":\"internal\",\"message\":\"only the Connect JSON codec is served\"}";
      http_respond(c, 415, "application/json", NULL, msg, sizeof(msg) - 1);
      return;
    }
    if (strcmp(sm, "process.Process/StreamInput") == 0) {
      c->close_after = true; /* the client stream is not read */
      rpc_error(c, true, "unimplemented", "%s is not implemented by fedrouter-agent", sm);
      return;
    }
    r->rpc_stream = want_stream;
    r->route = R_RPC;
    c->body_limit = RPC_BODY_MAX;
    return;
  }
  http_error(c, 404, "no such endpoint: %s", r->path);
}

/* ---- /init ---- */

static int env_set(char ***vec, size_t *n, const char *key, const char *val) {
  size_t kl = strlen(key);
  size_t sz = kl + strlen(val) + 2;
  char *kv = malloc(sz);
  if (kv == NULL)
    return -ENOMEM;
  snprintf(kv, sz, "%s=%s", key, val);
  for (size_t i = 0; i < *n; i++) {
    if (strncmp((*vec)[i], key, kl) == 0 && (*vec)[i][kl] == '=') {
      explicit_bzero((*vec)[i], strlen((*vec)[i])); /* values may be secrets */
      free((*vec)[i]);
      (*vec)[i] = kv;
      return 0;
    }
  }
  char **nv = realloc(*vec, (*n + 2) * sizeof(char *));
  if (nv == NULL) {
    free(kv);
    return -ENOMEM;
  }
  nv[(*n)++] = kv;
  nv[*n] = NULL;
  *vec = nv;
  return 0;
}

static bool valid_env_key(const char *k) {
  if (*k == '\0')
    return false;
  for (const char *p = k; *p; p++)
    if (*p == '=')
      return false;
  return true;
}

/* A JSON string usable as a C string (no embedded NUL). */
static const char *cstr(json_t *j) {
  if (!json_is_string(j) || strlen(json_string_value(j)) != json_string_length(j))
    return NULL;
  return json_string_value(j);
}

static void env_free(char **vec, size_t n) {
  for (size_t i = 0; i < n; i++) {
    explicit_bzero(vec[i], strlen(vec[i])); /* values may be secrets */
    free(vec[i]);
  }
  free(vec);
}

static char *dup_or_null(const char *s, bool *failed) {
  char *d = s != NULL ? strdup(s) : NULL;

  if (s != NULL && d == NULL)
    *failed = true;
  return d;
}

/* POST /init (the router's, init_allowed() checked it): sets everything
 * /init sets as a whole. The env, the default workdir and user are
 * replaced, never merged (nothing an earlier /init set survives); the
 * access token changes when the body has one. */
static void handle_init(struct conn *c) {
  struct agent *a = c->a;
  json_error_t jerr;
  json_t *j = json_loadb(c->body.p ? c->body.p + c->body.off : "{}",
                         c->body.p ? buf_size(&c->body) : 2, 0, &jerr);
  json_t *ev, *tok, *wd, *du, *sn, *val, *envs = NULL;
  char **env = NULL, *token = NULL, *workdir = NULL, *user = NULL;
  size_t env_n = 0, i;
  const char *key;
  bool failed = false;

  if (c->body.p != NULL)
    explicit_bzero(c->body.p, c->body.cap); /* the env's values may be secrets */
  if (!json_is_object(j))
    goto bad;
  ev = json_object_get(j, "envVars");
  tok = json_object_get(j, "accessToken");
  wd = json_object_get(j, "defaultWorkdir");
  du = json_object_get(j, "defaultUser");
  sn = json_object_get(j, "secretNames");
  if (ev && !json_is_object(ev) && !json_is_null(ev))
    goto bad;
  json_object_foreach(ev, key, val) {
    if (!valid_env_key(key) || cstr(val) == NULL)
      goto bad;
  }
  if (tok && !json_is_null(tok) && (cstr(tok) == NULL || strlen(cstr(tok)) > 500))
    goto bad;
  if (wd && !json_is_null(wd) && (cstr(wd) == NULL || cstr(wd)[0] != '/'))
    goto bad;
  if (du && !json_is_null(du) && cstr(du) == NULL)
    goto bad;
  if (sn && !json_is_array(sn) && !json_is_null(sn))
    goto bad;
  json_array_foreach(sn, i, val) {
    if (cstr(val) == NULL)
      goto bad;
  }
  /* Everything is built before anything is replaced: out of memory
   * leaves the previous /init's state whole. */
  envs = json_object();
  failed = envs == NULL;
  json_object_foreach(ev, key, val) {
    bool secret = false;
    json_t *s;
    size_t k;
    json_array_foreach(sn, k, s) secret |= strcmp(json_string_value(s), key) == 0;
    if (failed || env_set(&env, &env_n, key, json_string_value(val)) != 0 ||
        (!secret && json_object_set(envs, key, val) != 0))
      failed = true;
  }
  token = cstr(tok) && cstr(tok)[0] ? dup_or_null(cstr(tok), &failed) : NULL;
  workdir = dup_or_null(cstr(wd), &failed);
  user = dup_or_null(cstr(du), &failed);
  if (failed) {
    env_free(env, env_n);
    json_decref(envs);
    free(token);
    free(workdir);
    free(user);
    json_decref(j);
    http_error(c, 503, "out of memory");
    return;
  }
  env_free(a->init_env, a->init_env_n);
  a->init_env = env;
  a->init_env_n = env_n;
  json_decref(a->init_envs);
  a->init_envs = envs;
  if (token != NULL) {
    if (a->token != NULL)
      explicit_bzero(a->token, strlen(a->token));
    free(a->token);
    a->token = token;
  }
  free(a->default_workdir);
  a->default_workdir = workdir;
  free(a->default_user);
  a->default_user = user;
  /* Names only: values may be secrets. */
  log_msg("init: %zu env vars set, token %s", env_n, a->token ? "set" : "not set");
  json_decref(j);
  http_respond(c, 204, NULL, NULL, NULL, 0);
  return;
bad:
  json_decref(j);
  http_error(c, 400, "bad /init body: envVars must map names to strings; accessToken, "
                     "defaultUser strings; defaultWorkdir an absolute path; secretNames strings");
}

/* ---- process.Process ---- */

static int get_u32(json_t *j, uint32_t *out) {
  if (json_is_integer(j)) {
    json_int_t v = json_integer_value(j);
    if (v < 0 || v > 0xffffffffLL)
      return -EINVAL;
    *out = (uint32_t)v;
    return 0;
  }
  const char *s = cstr(j);
  if (s) { /* protobuf JSON accepts numbers as strings */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno || v > 0xffffffffULL || *s == '-')
      return -EINVAL;
    *out = (uint32_t)v;
    return 0;
  }
  return -EINVAL;
}

static int get_u64(json_t *j, uint64_t *out) {
  if (json_is_integer(j)) {
    if (json_integer_value(j) < 0)
      return -EINVAL;
    *out = (uint64_t)json_integer_value(j);
    return 0;
  }
  const char *s = cstr(j);
  if (s && *s && *s != '-') {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno)
      return -EINVAL;
    *out = v;
    return 0;
  }
  return -EINVAL;
}

/* Resolves a ProcessSelector {pid} | {tag}. */
static struct proc *select_proc(struct conn *c, json_t *req, bool streaming) {
  json_t *sel = json_object_get(req, "process");
  json_t *pid = json_object_get(sel, "pid");
  json_t *tag = json_object_get(sel, "tag");
  struct proc *p = NULL;
  uint32_t v = 0;
  bool by_pid = pid && get_u32(pid, &v) == 0;
  if (by_pid)
    p = proc_find_pid(c->a, (pid_t)v);
  else if (cstr(tag))
    p = proc_find_tag(c->a, cstr(tag));
  else {
    rpc_error(c, streaming, "invalid_argument", "process selector needs a pid or a tag");
    return NULL;
  }
  if (p == NULL) {
    if (by_pid)
      rpc_error(c, streaming, "not_found", "process with pid %u not found", v);
    else
      rpc_error(c, streaming, "not_found", "process with tag %s not found", cstr(tag));
  }
  return p;
}

/* Keepalive messages of a stream (c->ka_msg): a process stream's is
 * {"event":{"keepalive":{}}}, WatchDir's {"keepalive":{}}. */
#define KA_PROCESS "{\"event\":{\"keepalive\":{}}}"
#define KA_WATCH "{\"keepalive\":{}}"

static void ka_cb(struct agent *a, struct timer *t) {
  struct conn *c = container_of(t, struct conn, ka_timer);
  if (c->dead || c->resp_done || c->ka_msg == NULL)
    return;
  envelope_write(c, 0, json_loads(c->ka_msg, 0, NULL));
  conn_service(c);
  if (!c->dead && !c->resp_done && c->ka_msg != NULL)
    timer_start(a, &c->ka_timer, (uint64_t)c->ka_interval_s * 1000, ka_cb);
}

/* The stream's Connect-Timeout-Ms: only Connect and WatchDir streams carry
 * one (Start's is the command's lifetime). It ends the stream with
 * deadline_exceeded, as envd's context does; a process lives on, a
 * watcher is let go. */
static void dl_cb(struct agent *a, struct timer *t) {
  struct conn *c = container_of(t, struct conn, dl_timer);
  (void)a;
  if (c->dead || c->resp_done)
    return;
  conn_drop_producer(c);
  envelope_write(c, 2, json_pack("{s:{s:s,s:s}}", "error", "code", "deadline_exceeded",
                                 "message", "stream deadline (Connect-Timeout-Ms) exceeded"));
  http_stream_end(c);
  conn_service(c);
}

static void stream_timers(struct conn *c, bool deadline, const char *ka_msg) {
  c->ka_msg = ka_msg;
  c->ka_interval_s = c->req.keepalive_s ? c->req.keepalive_s : DEFAULT_KEEPALIVE_S;
  timer_start(c->a, &c->ka_timer, (uint64_t)c->ka_interval_s * 1000, ka_cb);
  if (deadline && c->req.timeout_ms > 0)
    timer_start(c->a, &c->dl_timer, (uint64_t)c->req.timeout_ms, dl_cb);
}

static int decode_b64_field(json_t *j, unsigned char **out, size_t *n);

static void free_strv(char **v) {
  for (char **p = v; p && *p; p++) {
    explicit_bzero(*p, strlen(*p)); /* an envp: values may be secrets */
    free(*p);
  }
  free(v);
}

static void handle_start(struct conn *c, json_t *req) {
  struct agent *a = c->a;
  json_t *pc = json_object_get(req, "process");
  const char *cmd = cstr(json_object_get(pc, "cmd"));
  json_t *args = json_object_get(pc, "args");
  json_t *envs = json_object_get(pc, "envs");
  json_t *cwdj = json_object_get(pc, "cwd");
  json_t *pty = json_object_get(req, "pty");
  json_t *tag = json_object_get(req, "tag");
  json_t *stdin_j = json_object_get(req, "stdin");
  json_t *tmo = json_object_get(req, "timeoutMs");
  json_t *kod = json_object_get(req, "killOnDisconnect");
  json_t *sdata = json_object_get(req, "stdinData");
  unsigned char *input = NULL;
  size_t input_n = 0;
  char **argv = NULL, **envp = NULL;
  size_t envn = 0;
  json_t *config = NULL;
  char err[512] = "";
  const char *key;
  json_t *val;
  uint32_t cols = 80, rows = 24;
  uint64_t timeout_ms = 0;

  if (!json_is_object(pc) || cmd == NULL || cmd[0] == '\0') {
    rpc_error(c, true, "invalid_argument", "process.cmd is required");
    return;
  }
  if ((args && !json_is_array(args) && !json_is_null(args)) ||
      (envs && !json_is_object(envs) && !json_is_null(envs)) ||
      (cwdj && !json_is_null(cwdj) && (cstr(cwdj) == NULL)) ||
      (tag && !json_is_null(tag) && cstr(tag) == NULL) ||
      (stdin_j && !json_is_boolean(stdin_j) && !json_is_null(stdin_j)) ||
      (kod && !json_is_boolean(kod) && !json_is_null(kod)) ||
      (pty && !json_is_object(pty) && !json_is_null(pty))) {
    rpc_error(c, true, "invalid_argument", "malformed StartRequest");
    return;
  }
  if (tmo && !json_is_null(tmo) && get_u64(tmo, &timeout_ms) != 0) {
    rpc_error(c, true, "invalid_argument", "timeoutMs must be a non-negative integer");
    return;
  }
  if (sdata && !json_is_null(sdata) &&
      (json_is_object(pty) || decode_b64_field(sdata, &input, &input_n) != 0)) {
    rpc_error(c, true, "invalid_argument", "stdinData must be base64 bytes, without a pty");
    return;
  }
  if (json_is_object(pty)) {
    json_t *size = json_object_get(pty, "size");
    json_t *jc = json_object_get(size, "cols"), *jr = json_object_get(size, "rows");
    if ((jc && get_u32(jc, &cols) != 0) || (jr && get_u32(jr, &rows) != 0) || cols > 65535 ||
        rows > 65535) {
      rpc_error(c, true, "invalid_argument", "pty.size cols/rows out of range");
      return;
    }
  }
  if (a->nprocs_running >= a->max_procs) {
    /* Retrying after one ended works: resource_exhausted (a router's 429). */
    rpc_error(c, true, "resource_exhausted",
              "too many running processes: at most %d run at once in this sandbox; wait for one to end or "
              "stop one", a->max_procs);
    return;
  }
  size_t nargs = json_array_size(args);
  argv = calloc(nargs + 2, sizeof(char *));
  config = json_pack("{s:s,s:[],s:{}}", "cmd", cmd, "args", "envs");
  if (argv == NULL || config == NULL)
    goto oom;
  argv[0] = strdup(cmd);
  for (size_t i = 0; i < nargs; i++) {
    const char *s = cstr(json_array_get(args, i));
    if (s == NULL) {
      rpc_error(c, true, "invalid_argument", "process.args must be strings");
      goto out;
    }
    argv[i + 1] = strdup(s);
    json_array_append_new(json_object_get(config, "args"), json_string(s));
  }
  /* env: the agent's, then /init's, then the request's; later wins */
  for (char **e = environ; e && *e; e++) {
    char *eq = strchr(*e, '=');
    if (eq == NULL || strncmp(*e, "FR_AGENT_PROC=", 14) == 0)
      continue;
    char k[256];
    size_t kl = (size_t)(eq - *e);
    if (kl == 0 || kl >= sizeof(k))
      continue;
    memcpy(k, *e, kl);
    k[kl] = '\0';
    if (env_set(&envp, &envn, k, eq + 1) != 0)
      goto oom;
  }
  for (size_t i = 0; i < a->init_env_n; i++) {
    char *eq = strchr(a->init_env[i], '=');
    char k[256];
    size_t kl = (size_t)(eq - a->init_env[i]);
    if (kl >= sizeof(k))
      continue;
    memcpy(k, a->init_env[i], kl);
    k[kl] = '\0';
    if (env_set(&envp, &envn, k, eq + 1) != 0)
      goto oom;
  }
  json_object_foreach(envs, key, val) {
    if (!valid_env_key(key) || cstr(val) == NULL || strcmp(key, "FR_AGENT_PROC") == 0) {
      rpc_error(c, true, "invalid_argument", "process.envs must map names to strings");
      goto out;
    }
    if (env_set(&envp, &envn, key, cstr(val)) != 0)
      goto oom;
    json_object_set_new(json_object_get(config, "envs"), key, json_string(cstr(val)));
  }
  if (envp == NULL && env_set(&envp, &envn, "PATH",
                              "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") != 0)
    goto oom;
  const char *cwd = cstr(cwdj) && cstr(cwdj)[0] ? cstr(cwdj) : NULL;
  if (cwd)
    json_object_set_new(config, "cwd", json_string(cwd));
  else
    cwd = a->default_workdir ? a->default_workdir : agent_home(a);

  struct start_opts o = {
      .cmd = cmd, .argv = argv, .envp = envp, .cwd = cwd,
      .pty = json_is_object(pty), .cols = (unsigned short)cols, .rows = (unsigned short)rows,
      .stdin_open = json_is_true(stdin_j) || input != NULL, .tag = cstr(tag), .timeout_ms = timeout_ms,
      .config = config,
  };
  struct proc *p = NULL;
  int rc = proc_start(a, &o, &p, err, sizeof(err));
  if (rc == -EAGAIN) {
    /* fork(2): RLIMIT_NPROC or the pod's pids limit, below our own */
    rpc_error(c, true, "resource_exhausted",
              "cannot start %s: the sandbox's limit on processes is reached (fork: %s); wait for some to end",
              cmd, strerror(EAGAIN));
    goto out;
  }
  if (rc != 0) {
    rpc_error(c, true, rc == -ENOENT ? "not_found" : errno_code(rc), "%s", err);
    goto out;
  }
  /* Connect-Timeout-Ms on Start is the command's lifetime, as in envd
   * (its process context takes the header's deadline, not the request's):
   * the command dies at the deadline even if the client went away first. */
  if (c->req.timeout_ms > 0 && (timeout_ms == 0 || (uint64_t)c->req.timeout_ms < timeout_ms)) {
    timeout_ms = (uint64_t)c->req.timeout_ms;
    p->deadline_from_header = true;
  }
  if (timeout_ms > 0)
    proc_set_timeout(p, timeout_ms);
  if (input) {
    /* The whole of stdin in the request: written as the pipe takes it,
     * then closed. EPIPE (the command did not read it) is not an error. */
    rc = proc_write_stdin(p, input, input_n);
    if (rc != 0 && rc != -EPIPE)
      log_msg("pid %d: stdinData: %s", (int)p->pid, strerror(-rc));
    proc_close_stdin(p);
  }
  log_msg("started pid %d (%s)%s", (int)p->pid, cmd, o.pty ? " with a pty" : "");
  http_stream_begin(c, 200, "application/connect+json", NULL);
  envelope_write(c, 0, json_pack("{s:{s:{s:i}}}", "event", "start", "pid", (int)p->pid));
  struct sub *s = proc_attach(p, c, 0, true);
  if (s == NULL) {
    rpc_error(c, true, "resource_exhausted", "out of memory");
    goto out;
  }
  s->is_start = true;
  s->kill_on_disconnect = json_is_true(kod);
  stream_timers(c, false, KA_PROCESS);
  conn_service(c);
  goto out;
oom:
  rpc_error(c, true, "resource_exhausted", "out of memory");
out:
  free(input);
  free_strv(argv);
  free_strv(envp);
  json_decref(config);
}

static void handle_connect(struct conn *c, json_t *req) {
  struct proc *p = select_proc(c, req, true);
  if (p == NULL)
    return;
  uint64_t from = 0;
  json_t *rf = json_object_get(req, "replayFrom");
  json_t *fo = json_object_get(req, "follow");
  if (rf && !json_is_null(rf) && get_u64(rf, &from) != 0) {
    rpc_error(c, true, "invalid_argument", "replayFrom must be a non-negative integer");
    return;
  }
  if (fo && !json_is_null(fo) && !json_is_boolean(fo)) {
    rpc_error(c, true, "invalid_argument", "follow must be a boolean");
    return;
  }
  uint64_t start = p->head ? p->head->off : p->out_end;
  uint64_t first = from < start ? start : from > p->out_end ? p->out_end : from;
  char hdr[256];
  snprintf(hdr, sizeof(hdr),
           "Fr-Output-Start: %llu\r\nFr-Output-End: %llu\r\nFr-Output-Dropped: %llu\r\n",
           (unsigned long long)first, (unsigned long long)p->out_end,
           (unsigned long long)(from < start ? start - from : 0));
  http_stream_begin(c, 200, "application/connect+json", hdr);
  envelope_write(c, 0, json_pack("{s:{s:{s:i}}}", "event", "start", "pid", (int)p->pid));
  struct sub *s = proc_attach(p, c, from, !json_is_false(fo));
  if (s == NULL) {
    rpc_error(c, true, "resource_exhausted", "out of memory");
    return;
  }
  json_t *kod = json_object_get(req, "killOnDisconnect");
  s->kill_on_disconnect = json_is_true(kod);
  stream_timers(c, true, KA_PROCESS);
  conn_service(c);
}

static void handle_list(struct conn *c) {
  json_t *arr = json_array();
  for (struct proc *p = c->a->procs; p; p = p->next) {
    if (p->ended)
      continue;
    json_t *pi = json_pack("{s:O,s:i}", "config", p->config, "pid", (int)p->pid);
    if (pi && p->tag)
      json_object_set_new(pi, "tag", json_string(p->tag));
    json_array_append_new(arr, pi);
  }
  http_respond_json(c, 200, json_pack("{s:o}", "processes", arr));
}

static int decode_b64_field(json_t *j, unsigned char **out, size_t *n) {
  const char *s = cstr(j);
  if (s == NULL)
    return -EINVAL;
  size_t l = strlen(s);
  unsigned char *d = malloc(l / 4 * 3 + 3);
  if (d == NULL)
    return -ENOMEM;
  ssize_t dl = b64_decode(s, l, d);
  if (dl < 0) {
    free(d);
    return -EINVAL;
  }
  *out = d;
  *n = (size_t)dl;
  return 0;
}

static void handle_send_input(struct conn *c, json_t *req) {
  json_t *in = json_object_get(req, "input");
  json_t *sd = json_object_get(in, "stdin"), *pt = json_object_get(in, "pty");
  if ((sd == NULL) == (pt == NULL)) {
    rpc_error(c, false, "invalid_argument", "input needs exactly one of stdin or pty");
    return;
  }
  struct proc *p = select_proc(c, req, false);
  if (p == NULL)
    return;
  if (p->ended) {
    rpc_error(c, false, "not_found", "process %d has exited", (int)p->pid);
    return;
  }
  if ((pt != NULL) != p->pty) {
    rpc_error(c, false, "failed_precondition", pt ? "process has no pty" : "process has a pty: send input.pty");
    return;
  }
  unsigned char *data = NULL;
  size_t n = 0;
  int rc = decode_b64_field(sd ? sd : pt, &data, &n);
  if (rc != 0) {
    rpc_error(c, false, "invalid_argument", "input must be base64 bytes");
    return;
  }
  rc = proc_write_stdin(p, data, n);
  free(data);
  if (rc == -EPIPE)
    rpc_error(c, false, "failed_precondition", "stdin of process %d is not open (start it with stdin: true)", (int)p->pid);
  else if (rc == -ESHUTDOWN)
    rpc_error(c, false, "failed_precondition", "process %d closed its stdin: %zu bytes were not delivered",
              (int)p->pid, p->stdin_undelivered);
  else if (rc == -ENOBUFS)
    rpc_error(c, false, "resource_exhausted", "stdin backlog of process %d is full", (int)p->pid);
  else if (rc != 0)
    rpc_error(c, false, errno_code(rc), "write stdin: %s", strerror(-rc));
  else
    http_respond_json(c, 200, json_object());
}

static int parse_signal(json_t *j) {
  static const struct { const char *name; int sig; } sigs[] = {
      {"SIGKILL", SIGKILL}, {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP},
      {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGSTOP", SIGSTOP},
      {"SIGCONT", SIGCONT}, {"SIGWINCH", SIGWINCH},
  };
  if (json_is_integer(j)) {
    json_int_t v = json_integer_value(j);
    return v >= 1 && v < 65 ? (int)v : -1;
  }
  const char *s = cstr(j);
  if (s == NULL)
    return -1;
  if (strncmp(s, "SIGNAL_", 7) == 0)
    s += 7;
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
    if (strcmp(sigs[i].name, s) == 0)
      return sigs[i].sig;
  return -1;
}

static void handle_send_signal(struct conn *c, json_t *req) {
  int sig = parse_signal(json_object_get(req, "signal"));
  if (sig < 0) {
    rpc_error(c, false, "invalid_argument", "unknown signal");
    return;
  }
  struct proc *p = select_proc(c, req, false);
  if (p == NULL)
    return;
  int rc = proc_signal(p, sig);
  if (rc == -ESRCH)
    rpc_error(c, false, "not_found", "process %d has exited", (int)p->pid);
  else if (rc != 0)
    rpc_error(c, false, errno_code(rc), "signal: %s", strerror(-rc));
  else
    http_respond_json(c, 200, json_object());
}

static void handle_update(struct conn *c, json_t *req) {
  json_t *size = json_object_get(json_object_get(req, "pty"), "size");
  uint32_t cols, rows;
  if (!size || get_u32(json_object_get(size, "cols"), &cols) != 0 ||
      get_u32(json_object_get(size, "rows"), &rows) != 0 || cols == 0 || rows == 0 ||
      cols > 65535 || rows > 65535) {
    rpc_error(c, false, "invalid_argument", "pty.size needs cols and rows (1..65535)");
    return;
  }
  struct proc *p = select_proc(c, req, false);
  if (p == NULL)
    return;
  int rc = proc_resize(p, (unsigned short)cols, (unsigned short)rows);
  if (rc == -ESRCH)
    rpc_error(c, false, "not_found", "process %d has exited", (int)p->pid);
  else if (rc == -ENOTTY)
    rpc_error(c, false, "failed_precondition", "process %d has no pty", (int)p->pid);
  else if (rc != 0)
    rpc_error(c, false, errno_code(rc), "resize: %s", strerror(-rc));
  else
    http_respond_json(c, 200, json_object());
}

static void handle_close_stdin(struct conn *c, json_t *req) {
  struct proc *p = select_proc(c, req, false);
  if (p == NULL)
    return;
  int rc = proc_close_stdin(p);
  if (rc == -ESRCH)
    rpc_error(c, false, "not_found", "process %d has exited before taking all of its input (%zu bytes not delivered)",
              (int)p->pid, p->stdin_undelivered);
  else if (rc == -ENOTTY)
    rpc_error(c, false, "failed_precondition", "process %d has a pty: send EOT (0x04) as input instead", (int)p->pid);
  else
    http_respond_json(c, 200, json_object());
}

static void handle_rpc(struct conn *c) {
  const char *body = c->body.p ? c->body.p + c->body.off : "";
  size_t n = c->body.p ? buf_size(&c->body) : 0;
  bool st = c->req.rpc_stream;
  if (st) {
    /* exactly one enveloped message */
    if (n < 5) {
      rpc_error(c, true, "invalid_argument", "missing request envelope");
      return;
    }
    const unsigned char *u = (const unsigned char *)body;
    uint32_t len = (uint32_t)u[1] << 24 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 8 | u[4];
    if (u[0] == 0x01) {
      rpc_error(c, true, "internal", "compressed messages are not supported");
      return;
    }
    if (u[0] != 0) {
      /* 0x02 ends a server's stream; a request is one plain message */
      rpc_error(c, true, "invalid_argument", "request envelope with flags 0x%02x: a request is one message with flags 0",
                u[0]);
      return;
    }
    if ((size_t)len != n - 5) {
      rpc_error(c, true, "invalid_argument", "request envelope length mismatch");
      return;
    }
    body += 5;
    n -= 5;
  } else if (n >= 5 && (unsigned char)body[0] <= 3 &&
             ((uint32_t)(unsigned char)body[1] << 24 | (uint32_t)(unsigned char)body[2] << 16 |
              (uint32_t)(unsigned char)body[3] << 8 | (unsigned char)body[4]) == n - 5) {
    /* application/json: the body is the message itself, never a framed one */
    rpc_error(c, false, "invalid_argument",
              "a unary request's body is one JSON message, not a Connect envelope (those are for "
              "application/connect+json streams)");
    return;
  }
  json_error_t jerr;
  /* NUL bytes are let in: paths are refused by name (rpc_path), other
   * strings where they are read (cstr). */
  json_t *req = n ? json_loadb(body, n, JSON_ALLOW_NUL, &jerr) : json_object();
  if (!json_is_object(req)) {
    json_decref(req);
    rpc_error(c, st, "invalid_argument", "request must be a JSON object");
    return;
  }
  const char *m = c->req.rpc;
  if (strcmp(m, "process.Process/Start") == 0)
    handle_start(c, req);
  else if (strcmp(m, "process.Process/Connect") == 0)
    handle_connect(c, req);
  else if (strcmp(m, "process.Process/List") == 0)
    handle_list(c);
  else if (strcmp(m, "process.Process/SendInput") == 0)
    handle_send_input(c, req);
  else if (strcmp(m, "process.Process/SendSignal") == 0)
    handle_send_signal(c, req);
  else if (strcmp(m, "process.Process/Update") == 0)
    handle_update(c, req);
  else if (strcmp(m, "process.Process/CloseStdin") == 0)
    handle_close_stdin(c, req);
  else if (strcmp(m, "filesystem.Filesystem/WatchDir") == 0) {
    if (watch_stream_start(c, req) == 0) {
      stream_timers(c, true, KA_WATCH);
      conn_service(c);
    }
  } else if (strcmp(m, "filesystem.Filesystem/CreateWatcher") == 0 ||
             strcmp(m, "filesystem.Filesystem/GetWatcherEvents") == 0 ||
             strcmp(m, "filesystem.Filesystem/RemoveWatcher") == 0)
    watch_rpc(c, m + 22, req);
  else if (strncmp(m, "filesystem.Filesystem/", 22) == 0)
    fs_rpc(c, m + 22, req);
  else
    rpc_error(c, st, "unimplemented", "%s is not implemented by fedrouter-agent", m);
  json_decref(req);
}

void route_body_done(struct conn *c) {
  switch (c->req.route) {
  case R_INIT:
    handle_init(c);
    break;
  case R_RPC:
    handle_rpc(c);
    break;
  default:
    http_error(c, 500, "no handler");
  }
}
