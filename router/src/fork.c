/* fork.c - POST /v1/sandboxes/{id}/fork and a create's `restore_from`:
 * new sandboxes made as a batch (create.c), then directories of a source
 * sandbox streamed into every one of them as tar, agent to agent through
 * this router (GET /tar of the source fanned out to POST /tar of each
 * target), with no storage in between and the source left running.
 *
 * A pipe holds at most PIPE_HIGH bytes not yet taken per target (plus the
 * one chunk that crossed it): the source's stream pauses while any target
 * lags past it and resumes once every one is at PIPE_LOW or below, so memory is bounded by the targets' count,
 * not the tree's size. Paths go one after the other. Each target's agent
 * unpacks into a fresh directory and swaps it in only once the whole
 * archive arrived (agent/README.md), so a failed copy leaves a target's
 * directory as it was; and a fork that fails in any target deletes every
 * sandbox it made (all or nothing, as a batch). The sandboxes are
 * committed before the copy (create.c's batch): a router that dies during
 * it leaves them running, each directory either copied whole or not at all.
 *
 *   created --> PATH i: targets' POSTs started, source GET started
 *      --> data fanned out (pause/resume) --> source done --> targets end
 *      --> every target answered --> PATH i+1 ... --> 201 | delete all, error
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "api.h"
#include "data.h"
#include "router.h"
#include "route_types.h"
#include "tenants.h"
#include "workspaces.h"

/* The source pauses once a target holds more than PIPE_HIGH unsent
 * bytes, and resumes once every target is at PIPE_LOW or below: the
 * adapter's on_drain fires when a call's unsent bytes fall to 256 KiB after
 * passing it (KUBE_DRAIN_LOW), so PIPE_LOW must be that and PIPE_HIGH
 * above it, or a pause would wait for a drain that never comes. */
#define PIPE_HIGH ((size_t)512 << 10)
#define PIPE_LOW ((size_t)256 << 10)
#define FORK_MAX_PATHS 16

struct fork_op;

struct target {
  struct fork_op *f;          /* its fork: the agent call's callbacks get the target */
  struct fr_adapter *a;
  char id[256];
  struct fr_agent_call *call;
  int done, failed;
  char why[300];
};

struct fork_op {
  struct api_req *q;
  struct fr_adapter *src_a;
  char src_id[256], src_pod[200];
  char paths[FORK_MAX_PATHS][MAX_PATH_BYTES + 1];
  size_t npaths, at;
  json_t *answer;             /* the create's 201 answer */
  struct target *t;
  size_t nt;
  struct fr_agent_call *src;
  int src_done, src_failed, src_paused;
  int64_t limit;              /* the tenant's max_file_bytes: each target's bound */
  int64_t bytes, path_bytes;  /* archive bytes read from the source, all paths / this one */
  char why[1024];
  int failed;
};

static void fork_free(struct fork_op *f) {
  size_t i;

  for (i = 0; i < f->nt; i++)
    fr_agent_call_cancel(f->t[i].call);
  fr_agent_call_cancel(f->src);
  json_decref(f->answer);
  free(f->t);
  free(f);
}

/* "/tar?path=<escaped>[&max_bytes=N]". */
static int tar_route(const char *path, int64_t max_bytes, char *out, size_t cap) {
  size_t at = (size_t)snprintf(out, cap, "/tar?path=");
  int n;

  if (fr_url_query_escape(out, cap, &at, path) != 0)
    return -1;
  if (max_bytes <= 0)
    return 0;
  n = snprintf(out + at, cap - at, "&max_bytes=%" PRId64, max_bytes);
  return n < 0 || (size_t)n >= cap - at ? -1 : 0;
}

static void on_deleted(int status, const char *message, void *arg) {
  (void)status;
  (void)message;
  (void)arg;
}

static void fork_finish(struct fork_op *f) {
  struct api_req *q = f->q;
  size_t i;

  if (!f->failed) {
    json_t *ans = f->answer, *paths = json_array();
    for (i = 0; i < f->npaths; i++)
      json_array_append_new(paths, json_string(f->paths[i]));
    json_object_set_new(ans, "copied", json_pack("{s:s,s:o,s:I}", "source", f->src_id, "paths", paths,
                                                 "archive_bytes", (json_int_t)f->bytes));
    f->answer = NULL;
    api_reply(q, 201, ans, NULL);
  } else {
    /* All or nothing: the sandboxes made for it go. */
    json_t *ids = json_array(), *body;
    for (i = 0; i < f->nt; i++) {
      fr_adapter_sandbox_delete(f->t[i].a, data__pod_of(f->t[i].id), q->rid, on_deleted, NULL);
      json_array_append_new(ids, json_string(f->t[i].id));
    }
    body = api_err_body("copy_failed", f->why);
    json_object_set_new(json_object_get(body, "error"), "deleted", ids);
    api_reply(q, 502, body, NULL);
  }
  fork_free(f);
}

static void start_path(struct fork_op *f);

/* Called whenever a side finishes: the next path once all of this one did. */
static void path_check(struct fork_op *f) {
  size_t i;

  if (!f->src_done)
    return;
  for (i = 0; i < f->nt; i++)
    if (!f->t[i].done)
      return;
  for (i = 0; i < f->nt && !f->failed; i++)
    if (f->t[i].failed) {
      f->failed = 1;
      snprintf(f->why, sizeof(f->why), "copying %.200s into %.200s failed: %.300s", f->paths[f->at], f->t[i].id,
               f->t[i].why);
    }
  if (f->failed || ++f->at == f->npaths) {
    fork_finish(f);
    return;
  }
  start_path(f);
}

static size_t max_pending(struct fork_op *f) {
  size_t i, m = 0, p;

  for (i = 0; i < f->nt; i++)
    if (!f->t[i].done && f->t[i].call != NULL && (p = fr_agent_call_pending(f->t[i].call)) > m)
      m = p;
  return m;
}

static void t_drain(void *arg) {
  struct target *t = arg;
  struct fork_op *f = t->f;

  if (f->src_paused && f->src != NULL && max_pending(f) <= PIPE_LOW) {
    f->src_paused = 0;
    fr_agent_call_resume(f->src);
  }
}

static void t_done(const struct fr_agent_result *res, void *arg) {
  struct target *t = arg;
  struct fork_op *f = t->f;

  t->call = NULL;
  t->done = 1;
  if (res->err != FR_AGENT_OK || res->status < 200 || res->status >= 300) {
    json_t *e = res->err == FR_AGENT_OK ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(e, "message"));
    t->failed = 1;
    snprintf(t->why, sizeof(t->why), "%s%.250s",
             res->err != FR_AGENT_OK ? "the agent was not reached: "
             : res->status == 413   ? "past the tenant's max_file_bytes: "
                                    : "",
             m != NULL ? m : res->message != NULL ? res->message : "refused");
    json_decref(e);
  } else if (!f->src_done || f->src_failed) {
    t->failed = 1;
    snprintf(t->why, sizeof(t->why), "the target answered before the archive ended");
  }
  /* A lagging target that went: the others may take more now. */
  if (f->src_paused && f->src != NULL && max_pending(f) <= PIPE_LOW) {
    f->src_paused = 0;
    fr_agent_call_resume(f->src);
  }
  path_check(f);
}

static int src_data(const char *data, size_t len, void *arg) {
  struct fork_op *f = arg;
  size_t i;

  f->bytes += (int64_t)len;
  f->path_bytes += (int64_t)len;
  for (i = 0; i < f->nt; i++)
    if (!f->t[i].done && f->t[i].call != NULL)
      fr_agent_call_write(f->t[i].call, data, len); /* a target ending now answers in t_done */
  if (max_pending(f) > PIPE_HIGH) {
    f->src_paused = 1;
    return FR_AGENT_PAUSE;
  }
  return 0;
}

static void src_done(const struct fr_agent_result *res, void *arg) {
  struct fork_op *f = arg;
  size_t i;

  f->src = NULL;
  f->src_done = 1;
  if (res->err != FR_AGENT_OK || res->status != 200) {
    json_t *e = res->err == FR_AGENT_OK ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(e, "message"));
    f->src_failed = 1;
    f->failed = 1;
    snprintf(f->why, sizeof(f->why), "reading %.200s of %.200s failed: %.300s", f->paths[f->at], f->src_id,
             m != NULL ? m : res->message != NULL ? res->message : "the stream was cut");
    json_decref(e);
    /* The targets must not take a cut archive for a whole one. */
    for (i = 0; i < f->nt; i++)
      if (!f->t[i].done) {
        fr_agent_call_cancel(f->t[i].call);
        f->t[i].call = NULL;
        f->t[i].done = 1;
        f->t[i].failed = 1;
        snprintf(f->t[i].why, sizeof(f->t[i].why), "the source failed");
      }
  } else {
    for (i = 0; i < f->nt; i++)
      if (!f->t[i].done && f->t[i].call != NULL)
        fr_agent_call_end(f->t[i].call);
  }
  path_check(f);
}

static void start_path(struct fork_op *f) {
  struct fr_agent_call_opts o;
  char route[3 * MAX_PATH_BYTES + 64];
  size_t i;

  f->src_done = f->src_failed = f->src_paused = 0;
  f->path_bytes = 0;
  if (tar_route(f->paths[f->at], f->limit, route, sizeof(route)) != 0) {
    f->failed = 1;
    snprintf(f->why, sizeof(f->why), "the path %.200s is too long", f->paths[f->at]);
    fork_finish(f);
    return;
  }
  for (i = 0; i < f->nt; i++) {
    struct target *t = &f->t[i];
    t->done = t->failed = 0;
    t->why[0] = '\0';
    memset(&o, 0, sizeof(o));
    o.method = "POST";
    o.path = route;
    o.internal_route = 1;
    o.content_type = "application/x-tar";
    o.stream_body = 1;
    o.body_size = -1;
    o.request_id = f->q->rid;
    o.on_drain = t_drain;
    o.on_done = t_done;
    o.arg = t;
    t->f = f;
    if (t->a == NULL || fr_adapter_agent_call(t->a, data__pod_of(t->id), &o, &t->call) != 0) {
      t->done = t->failed = 1;
      snprintf(t->why, sizeof(t->why), "its agent cannot be called");
    }
  }
  if (tar_route(f->paths[f->at], 0, route, sizeof(route)) != 0)
    route[0] = '\0';
  memset(&o, 0, sizeof(o));
  o.method = "GET";
  o.path = route;
  o.internal_route = 1;
  o.request_id = f->q->rid;
  o.on_data = src_data;
  o.on_done = src_done;
  o.arg = f;
  if (fr_adapter_agent_call(f->src_a, f->src_pod, &o, &f->src) != 0) {
    struct fr_agent_result res;
    memset(&res, 0, sizeof(res));
    res.err = FR_AGENT_UNAVAILABLE;
    res.message = "the source's agent cannot be called";
    src_done(&res, f);
  }
}

/* The batch made the sandboxes: copy into each. */
static void on_created(struct api_req *q, json_t *answer, void *arg) {
  struct fork_op *f = arg;
  json_t *sb;
  size_t i;

  if (answer == NULL) {
    /* The create failed (and answered): nothing to copy into. */
    fork_free(f);
    return;
  }
  f->answer = answer;
  f->nt = json_array_size(json_object_get(answer, "sandboxes"));
  f->t = calloc(f->nt ? f->nt : 1, sizeof(*f->t));
  if (f->t == NULL) {
    f->nt = 0;
    api_reply(q, 201, json_incref(answer), NULL); /* made, not copied: said below */
    fork_free(f);
    return;
  }
  json_array_foreach(json_object_get(answer, "sandboxes"), i, sb) {
    const char *id = json_string_value(json_object_get(sb, "id"));
    const char *dot = id ? strchr(id, '.') : NULL;
    char cluster[64];
    if (dot == NULL || (size_t)(dot - id) >= sizeof(cluster))
      continue;
    memcpy(cluster, id, (size_t)(dot - id));
    cluster[dot - id] = '\0';
    f->t[i].a = api_adapter(q->r, cluster);
    snprintf(f->t[i].id, sizeof(f->t[i].id), "%s", id);
  }
  start_path(f);
}

/* Reads "paths" (a non-empty array of absolute paths) into <f>; 0, or -1
 * after answering. */
static int read_paths(struct api_req *q, json_t *v, struct fork_op *f, const char *field) {
  json_t *e;
  size_t i;

  if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > FORK_MAX_PATHS) {
    api_field_fail(q, field, "paths is a non-empty array of at most 16 absolute directory paths");
    return -1;
  }
  json_array_foreach(v, i, e) {
    const char *p = json_string_value(e);
    if (p == NULL || p[0] != '/' || strlen(p) > MAX_PATH_BYTES || strcmp(p, "/") == 0 || strstr(p, "/../") != NULL ||
        (strlen(p) >= 3 && strcmp(p + strlen(p) - 3, "/..") == 0)) {
      api_field_fail(q, field, "each path is an absolute directory other than /, without '..'");
      return -1;
    }
    snprintf(f->paths[f->npaths++], sizeof(f->paths[0]), "%s", p);
  }
  return 0;
}

static struct fork_op *fork_new(struct api_req *q, struct fr_adapter *a, const struct fr_pod *pod) {
  struct fork_op *f = calloc(1, sizeof(*f));

  if (f == NULL) {
    api_oom(q);
    return NULL;
  }
  f->q = q;
  f->src_a = a;
  snprintf(f->src_pod, sizeof(f->src_pod), "%s", pod->name);
  snprintf(f->src_id, sizeof(f->src_id), "%s.%s", fr_adapter_name(a), pod->name);
  f->limit = q->ts != NULL ? q->ts->max_file_bytes : FR_DEFAULT_TENANT_FILE_BYTES;
  return f;
}

/* The source needs an agent to read from. */
static int source_ok(struct api_req *q, struct fr_adapter *a, const struct fr_pod *pod) {
  if (fr_adapter_pod_has_agent(a, pod))
    return 1;
  api_fail(q, 409, "agent_required", "the source sandbox runs no agent: its directories cannot be read", NULL);
  return 0;
}

int fork_prepare(struct api_req *q, const struct route_params *p, json_t **out) {
  json_error_t jerr;
  json_t *j = json_loadb(q->req->body, q->req->body_len, 0, &jerr), *v;
  struct fork_op *f;
  struct fr_workspace w;

  /* The other fields are a create's, checked as such (create.c). */
  if (!json_is_object(j)) {
    char msg[300];
    snprintf(msg, sizeof(msg), "the body must be a JSON object with count and paths (%s)",
             j ? "got another JSON value" : jerr.text);
    json_decref(j);
    api_fail(q, 400, "invalid_json", msg, NULL);
    return -1;
  }
  if (!source_ok(q, p->a, p->pod) || (f = fork_new(q, p->a, p->pod)) == NULL) {
    json_decref(j);
    return -1;
  }
  v = json_object_get(j, "count");
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > q->r->cfg->max_batch) {
    char msg[120];
    snprintf(msg, sizeof(msg), "count is an integer from 1 to %" PRId64, q->r->cfg->max_batch);
    api_field_fail(q, "count", msg);
    goto fail;
  }
  json_object_set(j, "num_sandboxes", v);
  json_object_del(j, "count");
  if (read_paths(q, json_object_get(j, "paths"), f, "paths") != 0)
    goto fail;
  json_object_del(j, "paths");
  /* What the new sandboxes are, unless the body says: the source's pool,
   * or the image and shape its workspace record keeps. */
  if (json_object_get(j, "pool") == NULL && json_object_get(j, "image") == NULL) {
    if (p->pod->pool != NULL) {
      json_object_set_new(j, "pool", json_string(p->pod->pool));
    } else if (fr_adapter_workspace(p->a, p->pod->name, &w) == 0 &&
               json_string_value(json_object_get(w.spec, "image")) != NULL) {
      json_object_set(j, "image", json_object_get(w.spec, "image"));
      if (json_object_get(j, "cpus") == NULL)
        json_object_set_new(j, "cpus", json_real((double)json_integer_value(json_object_get(w.spec, "cpu_m")) / 1000));
      if (json_object_get(j, "memory_gb") == NULL)
        json_object_set_new(j, "memory_gb",
                            json_real((double)json_integer_value(json_object_get(w.spec, "mem_b")) / (1 << 30)));
      fr_workspace_clear(&w);
    } else {
      fr_workspace_clear(&w);
      api_field_fail(q, "image", "the source was not made from a pool: give the forks' pool or image");
      goto fail;
    }
  }
  if (json_object_get(j, "name") == NULL && p->pod->sbname != NULL) {
    char name[64];
    snprintf(name, sizeof(name), "%.40s-fork", p->pod->sbname);
    json_object_set_new(j, "name", json_string(name));
  }
  q->created_cb = on_created;
  q->created_arg = f;
  *out = j;
  return 0;
fail:
  json_decref(j);
  fork_free(f);
  return -1;
}

int restore_from_prepare(struct api_req *q, json_t *j) {
  json_t *v = json_object_get(j, "restore_from");
  struct fr_adapter *a;
  const struct fr_pod *pod;
  struct fork_op *f;
  const char *sb, *path;

  if (v == NULL)
    return 0;
  sb = json_string_value(json_object_get(v, "sandbox"));
  path = json_string_value(json_object_get(v, "path"));
  if (!json_is_object(v) || sb == NULL || path == NULL || json_object_size(v) != 2) {
    api_field_fail(q, "restore_from", "restore_from is {\"sandbox\": id, \"path\": \"/abs/dir\"}");
    return -1;
  }
  if ((pod = api_find_reachable_sandbox(q, sb, &a)) == NULL)
    return -1;
  if (!source_ok(q, a, pod) || (f = fork_new(q, a, pod)) == NULL)
    return -1;
  {
    json_t *paths = json_pack("[s]", path);
    int rc = read_paths(q, paths, f, "restore_from");
    json_decref(paths);
    if (rc != 0) {
      fork_free(f);
      return -1;
    }
  }
  json_object_del(j, "restore_from");
  q->created_cb = on_created;
  q->created_arg = f;
  return 0;
}

void restore_from_settle(struct api_req *q) {
  /* Answered at once (refused before anything was made: a limit, no
   * room, a bad field): the copy will not happen. Deferred: the batch's
   * end calls on_created (with NULL when it failed). */
  if (q->created_cb == on_created && !q->deferred) {
    q->created_cb = NULL;
    fork_free(q->created_arg);
    q->created_arg = NULL;
  }
}
