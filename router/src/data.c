/* data.c - inside a sandbox, through its agent (docs/api.md "Inside a
 * sandbox"): what the data-plane handlers share (data.h): the answers for
 * calls that could not start or that the agent refused, and unary agent
 * calls whose answer becomes the request's.
 *
 * The data plane is four files: data.c (this), stream.c (NDJSON streams:
 * streaming exec, process output), procs.c (background processes), files.c
 * (file transfers and the E2B relay). The adapter speaks the agent's
 * protocol (fr_adapter_proc_*, fr_adapter_agent_rpc, fr_adapter_agent_call);
 * these files are the HTTP side: validation, tenant rules, NDJSON,
 * streaming with backpressure both ways. Nothing here buffers more than a
 * bounded window: a slow client pauses the agent's stream (FR_AGENT_PAUSE
 * until the connection drains), a slow agent pauses the client's upload
 * (fr_http_body_pause).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "api.h"
#include "data.h"
#include "router.h"
#include "route_types.h"

const char *data__pod_of(const char *id) {
  return strchr(id, '.') + 1;
}

/* The answer for a seam call that could not start. */
void data__start_failed(struct api_req *q, struct fr_adapter *a, int rc) {
  char msg[300];

  switch (rc) {
  case -ENOENT:
    api_fail(q, 404, "sandbox_not_found", "the sandbox no longer exists", NULL);
    break;
  case -ENOTSUP:
    api_fail(q, 501, "agent_required",
             "this sandbox has no fedrouter agent (created without one, or the router has no agent "
             "config): only the buffered exec works in it",
             NULL);
    break;
  case -EHOSTDOWN:
    snprintf(msg, sizeof(msg), "cluster %s is unavailable", fr_adapter_name(a));
    api_fail(q, 503, "cluster_unavailable", msg, "Retry-After: 5\r\n");
    break;
  case -EAGAIN:
    snprintf(msg, sizeof(msg), "cluster %s has too many streams open", fr_adapter_name(a));
    api_fail(q, 503, "agent_unavailable", msg, "Retry-After: 1\r\n");
    break;
  case -EINVAL:
    api_fail(q, 400, "invalid_request", "the request cannot be sent to the agent", NULL);
    break;
  default:
    api_oom(q);
    break;
  }
}

/* An agent error ({"code","message"} of Connect, or envd's {"code":404,...}
 * of /files) as the v1 answer; <what> names the object ("process",
 * "path") for not_found. */
void data__agent_error(struct api_req *q, const struct fr_agent_result *res, json_t *err, const char *what) {
  const char *code = json_string_value(json_object_get(err, "code"));
  const char *msg = json_string_value(json_object_get(err, "message"));
  int status = res->status;
  char text[400];

  if (res->err != FR_AGENT_OK || status == 401) {
    /* 401: the agent does not know this router's key (rotated without
     * previous_key_file): the same code as an exec that cannot use it. */
    api_fail(q, 503, "agent_unavailable",
             res->err != FR_AGENT_OK ? (res->message != NULL ? res->message : "the agent was not reached")
                                     : "the sandbox's agent refuses this router's key (was the agent key rotated "
                                       "without previous_key_file?)",
             "Retry-After: 1\r\n");
    return;
  }
  if (code == NULL) {
    /* envd's HTTP shape: the status is the code */
    code = status == 404 ? "not_found" : status == 403 ? "permission_denied" : status == 400 ? "invalid_argument"
         : status == 507 ? "disk_full" : status == 409 ? "already_exists" : "unknown";
  }
  if (msg == NULL)
    msg = "the sandbox's agent refused the request";
  snprintf(text, sizeof(text), "%s", msg);
  if (strcmp(code, "not_found") == 0) {
    snprintf(text, sizeof(text), "%s", msg);
    api_fail(q, 404, strcmp(what, "process") == 0 ? "process_not_found" : "path_not_found", text, NULL);
  } else if (strcmp(code, "permission_denied") == 0) {
    api_fail(q, 403, "permission_denied", text, NULL);
  } else if (strcmp(code, "invalid_argument") == 0) {
    api_fail(q, 400, strcmp(what, "path") == 0 ? "invalid_path" : "invalid_request", text, NULL);
  } else if (strcmp(code, "failed_precondition") == 0 || strcmp(code, "already_exists") == 0) {
    api_fail(q, 409, code, text, NULL);
  } else if (strcmp(code, "disk_full") == 0 ||
             (strcmp(code, "resource_exhausted") == 0 && strcmp(what, "path") == 0)) {
    api_fail(q, 507, "disk_full", text, NULL); /* resource_exhausted: the agent's word for ENOSPC */
  } else if (strcmp(code, "resource_exhausted") == 0) {
    api_fail(q, 429, "agent_busy", text, "Retry-After: 1\r\n");
  } else if (strcmp(code, "out_of_range") == 0) {
    api_fail(q, 400, "listing_too_large", text, NULL);
  } else {
    api_fail(q, 502, "agent_error", text, NULL);
  }
}


void data__rpc_gone(struct api_req *q, void *arg) {
  struct rpc *c = arg;

  c->q = NULL;   /* the agent's answer is dropped when it comes */
  api_reply(q, 499, NULL, NULL);
}

static void rpc_finish(struct rpc *c) {
  json_decref(c->pty_retry);
  free(c);
}

static int rpc_send(struct rpc *c, const char *method, json_t *req);

static void on_rpc(const struct fr_agent_result *res, json_t *answer, void *arg) {
  struct rpc *c = arg;
  struct api_req *q = c->q;

  if (q == NULL) {
    rpc_finish(c);
    return;
  }
  q->gone_cb = NULL;
  if (res->err == FR_AGENT_OK && res->status >= 200 && res->status < 300) {
    if (c->close_after) {
      json_t *req = json_pack("{s:{s:I}}", "process", "pid", (json_int_t)c->pid);
      c->close_after = 0;
      json_decref(c->pty_retry);
      c->pty_retry = NULL;
      if (req != NULL && rpc_send(c, "process.Process/CloseStdin", req) == 0) {
        json_decref(req);
        q->gone_cb = data__rpc_gone;
        return;
      }
      json_decref(req);
      api_fail(q, 502, "agent_error", "could not close stdin", NULL);
    } else if (c->shape != NULL) {
      json_t *body = c->shape(answer);
      if (body != NULL)
        api_reply(q, c->status, body, NULL);
      else
        api_fail(q, 502, "agent_error", "the agent's answer could not be read", NULL);
    } else {
      api_reply(q, 204, NULL, NULL);
    }
  } else if (c->pty_retry != NULL && res->err == FR_AGENT_OK && answer != NULL &&
             strcmp(json_string_value(json_object_get(answer, "code")) ?: "", "failed_precondition") == 0 &&
             strstr(json_string_value(json_object_get(answer, "message")) ?: "", "has a pty") != NULL) {
    /* A PTY process takes its input as "pty". */
    json_t *req = c->pty_retry;
    c->pty_retry = NULL;
    if (rpc_send(c, "process.Process/SendInput", req) == 0) {
      json_decref(req);
      q->gone_cb = data__rpc_gone;
      return;
    }
    json_decref(req);
    api_fail(q, 502, "agent_error", "could not send the input", NULL);
  } else {
    data__agent_error(q, res, answer, c->what);
  }
  rpc_finish(c);
}

static int rpc_send(struct rpc *c, const char *method, json_t *req) {
  return fr_adapter_agent_rpc(c->a, c->pod, method, req, c->q->rid, on_rpc, c);
}

/* Starts <method> with <req> (taken) for <q>; answers it later. */
struct rpc *data__rpc_start(struct api_req *q, struct fr_adapter *a, const char *id, const char *method,
                             json_t *req, const char *what, json_t *(*shape)(json_t *), int status) {
  struct rpc *c = calloc(1, sizeof(*c));
  int rc;

  if (c == NULL || req == NULL) {
    free(c);
    json_decref(req);
    api_oom(q);
    return NULL;
  }
  c->q = q;
  c->a = a;
  c->what = what;
  c->shape = shape;
  c->status = status;
  snprintf(c->pod, sizeof(c->pod), "%s", data__pod_of(id));
  rc = rpc_send(c, method, req);
  json_decref(req);
  if (rc != 0) {
    free(c);
    data__start_failed(q, a, rc);
    return NULL;
  }
  api_defer(q);
  q->gone_cb = data__rpc_gone;
  q->gone_arg = c;
  return c;
}

