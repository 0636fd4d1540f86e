/* fuzz_kube.c - what the cluster adapter parses from a Kubernetes API
 * server (cluster_adapter/src): a buggy or hostile cluster must not crash
 * the router. A real fr_kube_client talks plain HTTP to a stand-in API
 * server on loopback (on the harness's own uv loop) that answers every
 * request with bytes from the input and then closes the connection.
 *
 * Input: the first byte picks what is asked, the rest is the answer:
 *   'E'  pods/exec (kube_exec.c): the answer to the WebSocket upgrade, raw
 *        bytes from the status line on: the head (101 or a refusal with a
 *        Status body, Content-Length or chunked), then WebSocket frames of
 *        the channel protocol (stdout 1, stderr 2, the Status on 3, close).
 *        "@ACCEPT@" is replaced by the Sec-WebSocket-Accept that matches
 *        the request's key, so the fuzzer gets past the handshake.
 *   'I'  an informer (informer.c) on pods: the answers to the list and to
 *        the watch after it, separated by the line "@@WATCH@@\n" (each a
 *        whole HTTP response: status line, head, body of a PodList / watch
 *        event lines). Every object the informer delivers also goes
 *        through podstore_parse() (podstore.c), the adapter's pod record.
 * Any other first byte picks one of these by its value's parity.
 *
 * Checked beyond "no crash": an exec's callback runs exactly once, with
 * an error and a message, or an exit code, within the output caps (out and
 * err NUL-terminated at their lengths); a refusal carries an HTTP status
 * from 100 to 599; the shared output budget is given back once the exec
 * is gone; the informer hands over only objects with a name, and a pod
 * record keeps what it was parsed from (name, resourceVersion, every
 * string label).
 */
#define _GNU_SOURCE /* memmem, strcasestr */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <uv.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/informer.h"
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/ws.h"
#include "podstore.h"

#define MAX_OUT 64
#define MAX_ERR 48
#define WATCH_SEP "@@WATCH@@\n"
/* Loop turns an input may take: far above what one needs (an exchange is
 * a few dozen turns), a hang is reported by libFuzzer's -timeout. */
#define MAX_TURNS 200000

static uv_loop_t loop;
static uv_tcp_t listener;
static struct fr_kube_client *client;
static int port;

static void check(int cond) {
  if (!cond)
    abort();
}

/* ---- the stand-in API server ---- */

struct answers {
  const uint8_t *part[2];
  size_t len[2];
  int nparts, served, open;
  int exec; /* substitute @ACCEPT@ */
};

static struct answers ans;

struct sconn {
  uv_tcp_t tcp;
  uv_write_t wr;
  struct fr_buf in, out;
  int answered;
};

static void on_sconn_closed(uv_handle_t *h) {
  struct sconn *s = h->data;

  fr_buf_free(&s->in);
  fr_buf_free(&s->out);
  free(s);
  ans.open--;
}

static void on_written(uv_write_t *w, int status) {
  struct sconn *s = w->data;

  (void)status;
  uv_close((uv_handle_t *)&s->tcp, on_sconn_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char mem[65536];

  (void)h;
  (void)suggested;
  buf->base = mem;
  buf->len = sizeof(mem);
}

/* The answer for the request in s->in, with @ACCEPT@ filled in. */
static void build_answer(struct sconn *s) {
  const uint8_t *a = NULL;
  size_t alen = 0, i;
  char accept[29] = "";

  if (ans.served < ans.nparts) {
    a = ans.part[ans.served];
    alen = ans.len[ans.served];
  }
  ans.served++;
  if (ans.exec) {
    const char *k = strcasestr(s->in.data, "\r\nSec-WebSocket-Key:");
    char key[64];
    size_t n = 0;
    if (k != NULL) {
      k += 20;
      while (*k == ' ')
        k++;
      while (n < sizeof(key) - 1 && k[n] != '\r' && k[n] != '\0') {
        key[n] = k[n];
        n++;
      }
      key[n] = '\0';
      fr_ws_accept_key(key, accept);
    }
  }
  for (i = 0; i < alen;) {
    if (ans.exec && alen - i >= 8 && memcmp(a + i, "@ACCEPT@", 8) == 0) {
      check(fr_buf_puts(&s->out, accept) == 0);
      i += 8;
    } else {
      check(fr_buf_putc(&s->out, (char)a[i]) == 0);
      i++;
    }
  }
}

static void on_sread(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  struct sconn *s = st->data;
  uv_buf_t b;

  if (n < 0) {
    if (!s->answered) {
      s->answered = 1;
      uv_close((uv_handle_t *)&s->tcp, on_sconn_closed);
    }
    return;
  }
  if (n == 0 || s->answered)
    return;
  check(fr_buf_append(&s->in, buf->base, (size_t)n) == 0);
  if (strstr(s->in.data, "\r\n\r\n") == NULL)
    return;
  /* The requests here have no body: the head is all there is. */
  s->answered = 1;
  uv_read_stop(st);
  build_answer(s);
  b = uv_buf_init(s->out.data != NULL ? s->out.data : "", (unsigned)s->out.len);
  s->wr.data = s;
  if (uv_write(&s->wr, st, &b, 1, on_written) != 0)
    uv_close((uv_handle_t *)&s->tcp, on_sconn_closed);
}

static void on_sconn(uv_stream_t *l, int status) {
  struct sconn *s;

  if (status != 0)
    return;
  s = calloc(1, sizeof(*s));
  check(s != NULL);
  fr_buf_init(&s->in);
  fr_buf_init(&s->out);
  uv_tcp_init(&loop, &s->tcp);
  s->tcp.data = s;
  ans.open++;
  if (uv_accept(l, (uv_stream_t *)&s->tcp) != 0) {
    uv_close((uv_handle_t *)&s->tcp, on_sconn_closed);
    return;
  }
  uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_sread);
}

static void setup(void) {
  struct sockaddr_in sa;
  struct sockaddr_storage ss;
  int sl = sizeof(ss);
  struct fr_kube_creds creds;
  struct fr_kube_client_opts o;
  char server[64];

  fr_log_set_level(FR_LOG_ERROR);
  check(uv_loop_init(&loop) == 0);
  check(uv_tcp_init(&loop, &listener) == 0);
  check(uv_ip4_addr("127.0.0.1", 0, &sa) == 0);
  check(uv_tcp_bind(&listener, (const struct sockaddr *)&sa, 0) == 0);
  check(uv_listen((uv_stream_t *)&listener, 64, on_sconn) == 0);
  check(uv_tcp_getsockname(&listener, (struct sockaddr *)&ss, &sl) == 0);
  port = ntohs(((struct sockaddr_in *)&ss)->sin_port);

  memset(&creds, 0, sizeof(creds));
  snprintf(server, sizeof(server), "http://127.0.0.1:%d", port);
  creds.server = server;
  creds.token = "fuzz-token";
  memset(&o, 0, sizeof(o));
  o.name = "fuzz";
  /* No retry: one answer per request, and no backoff to wait through. */
  o.max_retries = 0;
  o.backoff_base_ms = 1;
  o.backoff_cap_ms = 1;
  check(fr_kube_client_new(&loop, &creds, &o, &client) == 0);
}

/* ---- exec ---- */

struct exec_seen {
  int calls;
};

static void on_exec(const struct fr_kube_exec_result *r, void *arg) {
  struct exec_seen *x = arg;

  x->calls++;
  check(r->out != NULL && r->err != NULL && r->out[r->out_len] == '\0' && r->err[r->err_len] == '\0');
  check(r->out_len <= MAX_OUT && r->err_len <= MAX_ERR);
  if (r->error != 0) {
    check(r->error < 0 && r->message != NULL && r->exit_code == -1);
  } else {
    check(!r->timed_out && r->exit_code >= 0 && r->http_status == 0);
    check(r->protocol != NULL);
  }
  if (r->http_status != 0)
    check(r->error != 0 && r->http_status >= 100 && r->http_status <= 599);
}

static void run_exec(void) {
  static char *const argv[] = {"sh", "-c", "echo hi", NULL};
  struct fr_kube_exec_opts o;
  struct fr_exec_budget budget = {0, 80};
  struct exec_seen x = {0};
  int turns;

  memset(&o, 0, sizeof(o));
  o.argv = argv;
  o.max_stdout = MAX_OUT;
  o.max_stderr = MAX_ERR;
  o.timeout_ms = 5000;
  o.budget = &budget;
  check(fr_kube_exec(client, "default", "sb-fuzz", &o, on_exec, &x, NULL) == 0);
  for (turns = 0; x.calls == 0 && turns < MAX_TURNS; turns++)
    uv_run(&loop, UV_RUN_ONCE);
  check(x.calls == 1);
  /* The exec's handles close on the next turns; then its share of the
   * budget is given back. */
  for (turns = 0; (budget.used != 0 || ans.open > 0) && turns < MAX_TURNS; turns++)
    uv_run(&loop, UV_RUN_NOWAIT);
  check(budget.used == 0 && x.calls == 1);
}

/* ---- informer ---- */

struct inf_seen {
  struct podstore ps;
  int events, synced;
};

static void check_pod(struct inf_seen *w, json_t *obj) {
  json_t *meta = json_object_get(obj, "metadata");
  const char *name = json_string_value(json_object_get(meta, "name"));
  const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
  json_t *labels = json_object_get(meta, "labels"), *v;
  struct fr_pod *p, *old = NULL;
  const char *k;

  check(name != NULL);
  p = podstore_parse(&w->ps, obj);
  if (p == NULL)
    return;
  check(strcmp(p->name, name) == 0 && rv != NULL && strcmp(p->rv, rv) == 0);
  /* Every string label reads back as it was (the sandbox label is
   * implied: the cache holds only pods with it; an empty key, which the
   * API never serves, is dropped). */
  json_object_foreach(labels, k, v) {
    const char *got = fr_pod_label(p, k);
    if (k[0] == '\0')
      check(got == NULL);
    else if (json_is_string(v) && strcmp(k, FR_LABEL_SANDBOX) != 0)
      check(got != NULL && strcmp(got, json_string_value(v)) == 0);
  }
  if (podstore_put(&w->ps, p, &old) != 0) {
    podstore_release(&w->ps, p);
    return;
  }
  podstore_release(&w->ps, old);
  check(podstore_get(&w->ps, name) == p);
}

static void on_event(struct fr_informer *inf, enum fr_informer_event ev, json_t *obj, json_t *old, void *arg) {
  struct inf_seen *w = arg;

  (void)inf;
  (void)old;
  w->events++;
  if (ev == FR_INF_SYNCED) {
    check(obj == NULL);
    w->synced++;
    return;
  }
  check(json_is_object(obj));
  if (ev == FR_INF_DELETED) {
    const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    check(name != NULL);
    podstore_release(&w->ps, podstore_take(&w->ps, name));
    return;
  }
  check_pod(w, obj);
}

static void run_informer(void) {
  struct fr_informer *inf;
  struct inf_seen w;
  size_t cur = 0;
  struct fr_pod *p;
  int turns, quiet = 0, served = -1, events = -1;

  memset(&w, 0, sizeof(w));
  check(podstore_init(&w.ps) == 0);
  check(fr_informer_new(client, "/api/v1/namespaces/sandboxes/pods", "fedrouter.io/sandbox", on_event, &w, &inf) ==
        0);
  check(fr_informer_start(inf) == 0);
  /* Until no answer is being served, none has been asked for and no
   * event delivered for a few dozen turns: the informer is then waiting
   * for a backoff timer (a failed list or watch) or for more bytes of a
   * watch that has ended. */
  for (turns = 0; turns < MAX_TURNS; turns++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    if (ans.open == 0 && ans.served == served && w.events == events) {
      if (++quiet > 50)
        break;
    } else {
      quiet = 0;
    }
    served = ans.served;
    events = w.events;
  }
  check(w.synced <= 1);
  if (w.synced)
    check(fr_informer_synced(inf));
  fr_informer_free(inf);
  while ((p = podstore_next(&w.ps, &cur)) != NULL) {
    podstore_release(&w.ps, podstore_take(&w.ps, p->name));
    cur = 0;
  }
  podstore_free(&w.ps);
  /* The cancelled calls' connections close on the next turns. */
  for (turns = 0; ans.open > 0 && turns < MAX_TURNS; turns++)
    uv_run(&loop, UV_RUN_NOWAIT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int exec;

  if (size == 0)
    return 0;
  if (client == NULL)
    setup();
  exec = data[0] == 'E' || (data[0] != 'I' && (data[0] & 1));
  memset(&ans, 0, sizeof(ans));
  ans.exec = exec;
  ans.part[0] = data + 1;
  ans.len[0] = size - 1;
  ans.nparts = 1;
  if (!exec) {
    const uint8_t *sep = memmem(data + 1, size - 1, WATCH_SEP, sizeof(WATCH_SEP) - 1);
    if (sep != NULL) {
      ans.len[0] = (size_t)(sep - (data + 1));
      ans.part[1] = sep + sizeof(WATCH_SEP) - 1;
      ans.len[1] = size - 1 - ans.len[0] - (sizeof(WATCH_SEP) - 1);
      ans.nparts = 2;
    }
  }
  if (exec)
    run_exec();
  else
    run_informer();
  check(ans.open == 0);
  return 0;
}
