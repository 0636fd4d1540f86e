/* kubecreds.c - the credentials of one Kubernetes client: a static token
 * or client certificate, a bearer token file (read again after
 * token_reread_ms, and on a 401), or an exec credential plugin
 * (client.authentication.k8s.io, run through uv_spawn, refreshed before
 * it expires).
 *
 * The client (kube.c) and its execs (kube_exec.c) wait for usable
 * credentials with kube__creds_wait(); the answer always comes from a
 * later loop turn (the "kick" timer), never from inside the call. This
 * file owns struct kube_creds and calls nothing above it: a waiter hears
 * through its own callback, the client learns that every handle of the
 * credentials has closed through the callback of kube__creds_close().
 *
 * States (cstate): NONE (must be loaded) -> LOADING (token file read or
 * plugin running; waiters queued) -> READY, or back to NONE on failure;
 * FAILED when a load could not even start (its waiters get the error a
 * turn later). READY goes back to NONE when the credentials expire or a
 * 401 rejects them (kube__creds_invalidate).
 */
#include "kubecreds.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/util.h"

extern char **environ;

/* ExecCredential output is a few KiB (a token or a cert + key). */
#define KUBE_PLUGIN_MAX_OUT ((size_t)1 << 20)
/* How much of a plugin's stderr is kept for the error text. */
#define KUBE_PLUGIN_MAX_ERR 1024
/* kubectl has no limit; a hung plugin would otherwise hold every request of
 * this cluster forever. gcloud/aws cold starts take a few seconds. */
#define KUBE_PLUGIN_TIMEOUT_MS 60000
/* Plugin credentials are refreshed this long before they expire (client-go
 * refreshes on expiry; early refresh avoids a 401 round trip). */
#define KUBE_REFRESH_EARLY_MS 30000
/* A bearer token file (projected service-account tokens are ~1 KiB). */
#define KUBE_TOKEN_MAX ((size_t)64 << 10)

#define LOGC "kube"

enum creds_state {
  CREDS_NONE,     /* must be (re)loaded before use */
  CREDS_LOADING,  /* token file read or plugin running; waiters queued */
  CREDS_READY,
  CREDS_FAILED,   /* a load failed synchronously; waiters get the error */
};

struct creds_waiter {
  struct creds_waiter *prev, *next;
  kube__creds_cb cb;
  void *arg;
  uint64_t seq;
};

/* An exec credential plugin run. */
struct kube_plugin {
  struct kube_creds *cr;
  uv_process_t proc;
  uv_pipe_t out, err;
  uv_timer_t timer;
  int nopen;                 /* handles of this run not yet closed */
  int spawned, exited, out_eof, err_eof, finished, closing;
  int64_t exit_status;
  int term_signal;
  int fail;                  /* -ETIMEDOUT, -E2BIG, -ENOMEM: set by us */
  struct fr_buf obuf, ebuf;
  char oscratch[16384], escratch[4096];
};

/* An asynchronous read of the token file (open, read..., close). */
struct token_read {
  uv_fs_t req;
  struct kube_creds *cr;
  uv_file fd;
  int err;
  struct fr_buf buf;
  char chunk[4096];
};

struct kube_creds {
  uv_loop_t *loop;
  struct fr_kube_client *owner;       /* handed to the waiters' callbacks, never used here */
  const char *name;                   /* the client's, for messages (borrowed) */
  const struct fr_kube_creds *creds;  /* the client's copy of the kubeconfig's (borrowed) */
  uint64_t reread_ms;                 /* token_reread_ms */
  uv_timer_t kick;                    /* delivers credential waits a turn later */
  int started, closing;
  unsigned nopen;                     /* the kick timer, the plugin's handles, a token read */
  void (*closed_cb)(void *arg);
  void *closed_arg;
  enum creds_state cstate;
  struct creds_waiter *whead, *wtail;
  uint64_t wseq;
  uint64_t creds_gen;                 /* bumped on every successful load */
  int fail_status;
  char creds_err[1024];
  char *token;                        /* bearer token in use, or NULL */
  char *cert_pem, *key_pem;           /* from a plugin, else NULL */
  size_t cert_len, key_len;
  int64_t expiry_ms;                  /* plugin credential expiry; 0 = none */
  uint64_t token_read_ms;             /* uv_now() of the last token file read */
  struct kube_plugin *plugin;
  struct token_read *tread;
};

static void creds_kick(struct kube_creds *cr);
static void creds_loaded(struct kube_creds *cr, int status);

/* The transitions of the diagram at the top: allowed[from] has bit <to>. */
#define CREDS_BIT(s) (1u << (s))
static const unsigned creds_allowed[] = {
    [CREDS_NONE] = CREDS_BIT(CREDS_LOADING) | CREDS_BIT(CREDS_READY) | CREDS_BIT(CREDS_FAILED),
    [CREDS_LOADING] = CREDS_BIT(CREDS_READY) | CREDS_BIT(CREDS_NONE),
    [CREDS_READY] = CREDS_BIT(CREDS_NONE),
    [CREDS_FAILED] = CREDS_BIT(CREDS_NONE),
};

static void creds_set_state(struct kube_creds *cr, enum creds_state s) {
  FR_ASSERT(creds_allowed[cr->cstate] & CREDS_BIT(s));
  /* Loading exactly while a plugin runs or the token file is read. */
  FR_ASSERT((s == CREDS_LOADING) == (cr->plugin != NULL || cr->tread != NULL) || s == CREDS_NONE);
  cr->cstate = s;
}
static void plugin_close(struct kube_plugin *p);

/* ------------------------------------------------------------ small helpers */

static char *xstrdup(const char *s) {
  return s != NULL ? strdup(s) : NULL;
}

/* Header values must not smuggle a second header. */
static int header_safe(const char *s) {
  for (; s != NULL && *s != '\0'; s++)
    if (*s == '\r' || *s == '\n')
      return 0;
  return 1;
}

/* Trims trailing whitespace in place. */
static void rtrim(char *s) {
  size_t n = strlen(s);

  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
    s[--n] = '\0';
}

/* Once closing and every handle and request is gone: the owner hears. */
static void maybe_closed(struct kube_creds *cr) {
  void (*cb)(void *);

  if (!cr->closing || cr->nopen > 0 || cr->closed_cb == NULL)
    return;
  cb = cr->closed_cb;
  cr->closed_cb = NULL;
  cb(cr->closed_arg);
}

/* ------------------------------------------------------------ waits */

const char *kube__creds_error(const struct kube_creds *cr) {
  return cr->creds_err[0] != '\0' ? cr->creds_err : "credentials unavailable";
}

static int creds_refreshable(const struct kube_creds *cr) {
  return cr->creds->exec != NULL || cr->creds->token_file != NULL;
}

int kube__creds_refreshable(const struct kube_creds *cr) {
  return creds_refreshable(cr);
}

uint64_t kube__creds_gen(const struct kube_creds *cr) {
  return cr->creds_gen;
}

static void creds_set_error(struct kube_creds *cr, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void creds_set_error(struct kube_creds *cr, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(cr->creds_err, sizeof(cr->creds_err), fmt, ap);
  va_end(ap);
}

static int creds_expired(const struct kube_creds *cr) {
  if (cr->creds->exec == NULL && cr->creds->token_file != NULL)
    return uv_now(cr->loop) - cr->token_read_ms >= cr->reread_ms;
  return cr->expiry_ms > 0 && fr_wall_ms() >= cr->expiry_ms - KUBE_REFRESH_EARLY_MS;
}

static void waiter_unlink(struct kube_creds *cr, struct creds_waiter *w) {
  if (w->prev != NULL)
    w->prev->next = w->next;
  else
    cr->whead = w->next;
  if (w->next != NULL)
    w->next->prev = w->prev;
  else
    cr->wtail = w->prev;
}

int kube__creds_wait(struct kube_creds *cr, kube__creds_cb cb, void *arg) {
  struct creds_waiter *w;

  if (cr == NULL || cb == NULL)
    return -EINVAL;
  if (cr->closing)
    return -ECANCELED;
  w = calloc(1, sizeof(*w));
  if (w == NULL)
    return -ENOMEM;
  w->cb = cb;
  w->arg = arg;
  w->seq = ++cr->wseq;
  w->prev = cr->wtail;
  if (cr->wtail != NULL)
    cr->wtail->next = w;
  else
    cr->whead = w;
  cr->wtail = w;
  creds_kick(cr);
  return 0;
}

void kube__creds_unwait(struct kube_creds *cr, kube__creds_cb cb, void *arg) {
  struct creds_waiter *w, *next;

  for (w = cr->whead; w != NULL; w = next) {
    next = w->next;
    if (w->cb == cb && w->arg == arg) {
      waiter_unlink(cr, w);
      free(w);
    }
  }
}

void kube__creds_invalidate(struct kube_creds *cr) {
  if (creds_refreshable(cr) && cr->cstate == CREDS_READY) {
    FR_DEBUG(LOGC, "%s: credentials rejected, will reload", cr->name);
    creds_set_state(cr, CREDS_NONE);
  }
}

/* Answers the waiters queued so far (not those queued by the callbacks it
 * runs: they wait for the next kick). With <status> 0, stops as soon as the
 * credentials are no longer ready (a callback invalidated them). */
static void creds_flush(struct kube_creds *cr, int status) {
  uint64_t upto = cr->wseq;
  struct creds_waiter *w;
  kube__creds_cb cb;
  void *arg;

  while (!cr->closing && (w = cr->whead) != NULL && w->seq <= upto) {
    if (status == 0 && cr->cstate != CREDS_READY)
      break;
    cb = w->cb;
    arg = w->arg;
    waiter_unlink(cr, w);
    free(w);
    cb(cr->owner, status, arg);
  }
  if (!cr->closing && cr->whead != NULL)
    creds_kick(cr);
}

static void on_kick(uv_timer_t *t) {
  struct kube_creds *cr = fr_container_of(t, struct kube_creds, kick);
  int st;

  if (cr->closing)
    return;
  switch (cr->cstate) {
  case CREDS_READY:
    creds_flush(cr, 0);
    break;
  case CREDS_FAILED:
    st = cr->fail_status;
    creds_set_state(cr, CREDS_NONE);
    creds_flush(cr, st);
    break;
  case CREDS_NONE:
    creds_kick(cr);
    break;
  case CREDS_LOADING:
    break;
  }
}

/* -- token file, read asynchronously (uv_fs on the thread pool) -- */

static void tr_done(struct token_read *tr) {
  struct kube_creds *cr = tr->cr;
  int err = tr->err;
  char *tok = NULL;

  cr->tread = NULL;
  cr->nopen--;
  if (!cr->closing && err == 0) {
    if (tr->buf.len == 0) {
      err = -EINVAL;
      creds_set_error(cr, "token file %s is empty", cr->creds->token_file);
    } else if (memchr(tr->buf.data, '\0', tr->buf.len) != NULL) {
      err = -EINVAL;
      creds_set_error(cr, "token file %s holds binary data", cr->creds->token_file);
    } else {
      rtrim(tr->buf.data);
      tok = fr_buf_detach(&tr->buf, NULL);
      if (tok == NULL) {
        err = -ENOMEM;
        creds_set_error(cr, "token file %s: out of memory", cr->creds->token_file);
      } else if (tok[0] == '\0' || !header_safe(tok)) {
        err = -EINVAL;
        creds_set_error(cr, "token file %s does not hold a single-line token",
                        cr->creds->token_file);
        free(tok);
        tok = NULL;
      }
    }
  } else if (!cr->closing) {
    creds_set_error(cr, "token file %s: %s", cr->creds->token_file,
                    err == -EFBIG ? "larger than 64 KiB" : uv_strerror(err));
  }
  fr_buf_free(&tr->buf);
  free(tr);
  if (cr->closing) {
    free(tok);
    maybe_closed(cr);
    return;
  }
  if (err == 0) {
    free(cr->token);
    cr->token = tok;
    cr->token_read_ms = uv_now(cr->loop);
  }
  creds_loaded(cr, err);
}

static void on_tr_closed(uv_fs_t *req) {
  struct token_read *tr = fr_container_of(req, struct token_read, req);

  uv_fs_req_cleanup(req);
  tr_done(tr);
}

static void tr_close(struct token_read *tr) {
  if (uv_fs_close(tr->cr->loop, &tr->req, tr->fd, on_tr_closed) != 0)
    tr_done(tr);   /* leaks nothing: the fd is only lost on a failed close */
}

static void tr_read(struct token_read *tr);

static void on_tr_read(uv_fs_t *req) {
  struct token_read *tr = fr_container_of(req, struct token_read, req);
  ssize_t n = req->result;

  uv_fs_req_cleanup(req);
  if (tr->cr->closing) {
    tr->err = -ECANCELED;
  } else if (n < 0) {
    tr->err = (int)n;
  } else if (n > 0) {
    if (tr->buf.len + (size_t)n > KUBE_TOKEN_MAX)
      tr->err = -EFBIG;
    else if (fr_buf_append(&tr->buf, tr->chunk, (size_t)n) != 0)
      tr->err = -ENOMEM;
    else {
      tr_read(tr);
      return;
    }
  }
  tr_close(tr);
}

static void tr_read(struct token_read *tr) {
  uv_buf_t b = uv_buf_init(tr->chunk, sizeof(tr->chunk));
  int r = uv_fs_read(tr->cr->loop, &tr->req, tr->fd, &b, 1, -1, on_tr_read);

  if (r != 0) {
    tr->err = r;
    tr_close(tr);
  }
}

static void on_tr_open(uv_fs_t *req) {
  struct token_read *tr = fr_container_of(req, struct token_read, req);
  ssize_t r = req->result;

  uv_fs_req_cleanup(req);
  if (r < 0) {
    tr->err = (int)r;
    tr_done(tr);
    return;
  }
  tr->fd = (uv_file)r;
  if (tr->cr->closing) {
    tr->err = -ECANCELED;
    tr_close(tr);
    return;
  }
  tr_read(tr);
}

static int token_read_start(struct kube_creds *cr) {
  struct token_read *tr = calloc(1, sizeof(*tr));
  int r;

  if (tr == NULL) {
    creds_set_error(cr, "token file %s: out of memory", cr->creds->token_file);
    return -ENOMEM;
  }
  tr->cr = cr;
  tr->fd = -1;
  fr_buf_init(&tr->buf);
  r = uv_fs_open(cr->loop, &tr->req, cr->creds->token_file, O_RDONLY | O_CLOEXEC, 0, on_tr_open);
  if (r != 0) {
    creds_set_error(cr, "token file %s: %s", cr->creds->token_file, uv_strerror(r));
    free(tr);
    return r;
  }
  cr->nopen++;
  cr->tread = tr;
  return 0;
}

/* -- exec credential plugin (client.authentication.k8s.io), via uv_spawn -- */

/* Copies a plugin's stderr into <out> for an error text: at most
 * KUBE_PLUGIN_MAX_ERR bytes (the capture is capped there too), one line. */
static void plugin_stderr_text(const struct kube_plugin *p, char *out, size_t outlen) {
  size_t i, j = 0;
  const char *s = p->ebuf.data;

  if (outlen == 0)
    return;
  for (i = 0; s != NULL && i < p->ebuf.len && j + 1 < outlen; i++) {
    unsigned char ch = (unsigned char)s[i];
    out[j++] = (ch == '\n' || ch == '\r' || ch == '\t') ? ' ' : (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
  }
  out[j] = '\0';
  rtrim(out);
  if (p->ebuf.len >= KUBE_PLUGIN_MAX_ERR && j + 4 < outlen) {
    out[j] = '\0';
    memcpy(out + strlen(out), "...", 4);
  }
}

/* Parses an RFC 3339 time, with fractional seconds and a Z or +hh:mm
 * offset (Go's time.Time marshals either), into milliseconds. */
static int parse_expiry(const char *s, int64_t *ms) {
  char base[32];
  int64_t t;
  size_t n = strlen(s), k;
  int sign, hh, mm;

  if (fr_time_parse_rfc3339(s, &t) == 0) {
    *ms = t * 1000;
    return 0;
  }
  /* "...[.frac]+hh:mm" */
  if (n < 6 || n - 6 >= sizeof(base) - 1)
    return -EINVAL;
  k = n - 6;
  if ((s[k] != '+' && s[k] != '-') || s[k + 3] != ':')
    return -EINVAL;
  if (s[k + 1] < '0' || s[k + 1] > '9' || s[k + 2] < '0' || s[k + 2] > '9' ||
      s[k + 4] < '0' || s[k + 4] > '9' || s[k + 5] < '0' || s[k + 5] > '9')
    return -EINVAL;
  sign = s[k] == '-' ? -1 : 1;
  hh = (s[k + 1] - '0') * 10 + (s[k + 2] - '0');
  mm = (s[k + 4] - '0') * 10 + (s[k + 5] - '0');
  memcpy(base, s, k);
  base[k] = 'Z';
  base[k + 1] = '\0';
  if (fr_time_parse_rfc3339(base, &t) != 0)
    return -EINVAL;
  *ms = (t - sign * (int64_t)(hh * 3600 + mm * 60)) * 1000;
  return 0;
}

/* Reads the finished plugin's output into the client's credentials.
 * Returns 0 or a negative error with cr->creds_err set. */
static int plugin_result(struct kube_plugin *p) {
  struct kube_creds *cr = p->cr;
  const char *cmd = cr->creds->exec->command;
  char etext[KUBE_PLUGIN_MAX_ERR + 8];
  json_error_t jerr;
  json_t *root = NULL, *status;
  const char *kind, *token, *cert, *key, *exp;
  int64_t expiry = 0;
  int r = -EIO;

  plugin_stderr_text(p, etext, sizeof(etext));
  if (p->fail == -ETIMEDOUT) {
    creds_set_error(cr, "exec plugin \"%s\" timed out after %d s%s%s", cmd,
                    KUBE_PLUGIN_TIMEOUT_MS / 1000, etext[0] ? "; stderr: " : "", etext);
    return -ETIMEDOUT;
  }
  if (p->fail != 0) {
    creds_set_error(cr, "exec plugin \"%s\": %s", cmd,
                    p->fail == -E2BIG ? "output larger than 1 MiB" : "out of memory");
    return p->fail;
  }
  if (p->term_signal != 0 || p->exit_status != 0) {
    if (p->term_signal != 0)
      creds_set_error(cr, "exec plugin \"%s\" killed by signal %d%s%s", cmd, p->term_signal,
                      etext[0] ? "; stderr: " : "", etext);
    else
      creds_set_error(cr, "exec plugin \"%s\" failed with exit status %" PRId64 "%s%s", cmd,
                      p->exit_status, etext[0] ? "; stderr: " : "", etext);
    return -EIO;
  }
  root = json_loadb(p->obuf.data != NULL ? p->obuf.data : "", p->obuf.len, 0, &jerr);
  if (root == NULL) {
    creds_set_error(cr, "exec plugin \"%s\" did not print an ExecCredential (invalid JSON: %s)%s%s",
                    cmd, jerr.text, etext[0] ? "; stderr: " : "", etext);
    return -EIO;
  }
  kind = json_string_value(json_object_get(root, "kind"));
  status = json_object_get(root, "status");
  if (kind == NULL || strcmp(kind, "ExecCredential") != 0 || !json_is_object(status)) {
    creds_set_error(cr, "exec plugin \"%s\" did not print an ExecCredential (%s)%s%s", cmd,
                    kind == NULL || strcmp(kind, "ExecCredential") != 0
                        ? "kind is not \"ExecCredential\"" : "no status object",
                    etext[0] ? "; stderr: " : "", etext);
    goto out;
  }
  token = json_string_value(json_object_get(status, "token"));
  cert = json_string_value(json_object_get(status, "clientCertificateData"));
  key = json_string_value(json_object_get(status, "clientKeyData"));
  exp = json_string_value(json_object_get(status, "expirationTimestamp"));
  if (token != NULL && token[0] == '\0')
    token = NULL;
  if (token == NULL && (cert == NULL || key == NULL || !cert[0] || !key[0])) {
    creds_set_error(cr, "exec plugin \"%s\": ExecCredential has neither status.token nor "
                       "status.clientCertificateData and status.clientKeyData", cmd);
    goto out;
  }
  if (token != NULL && !header_safe(token)) {
    creds_set_error(cr, "exec plugin \"%s\": status.token spans several lines", cmd);
    goto out;
  }
  if (exp != NULL && parse_expiry(exp, &expiry) != 0) {
    creds_set_error(cr, "exec plugin \"%s\": status.expirationTimestamp \"%.40s\" is not RFC 3339",
                    cmd, exp);
    goto out;
  }
  {
    char *nt = xstrdup(token), *nc = NULL, *nk = NULL;

    if (cert != NULL && key != NULL && cert[0] && key[0]) {
      nc = strdup(cert);
      nk = strdup(key);
    }
    if ((token != NULL && nt == NULL) || (cert != NULL && key != NULL && cert[0] && key[0] &&
                                          (nc == NULL || nk == NULL))) {
      free(nt);
      free(nc);
      free(nk);
      creds_set_error(cr, "exec plugin \"%s\": out of memory", cmd);
      r = -ENOMEM;
      goto out;
    }
    free(cr->token);
    free(cr->cert_pem);
    free(cr->key_pem);
    cr->token = nt;
    cr->cert_pem = nc;
    cr->key_pem = nk;
    cr->cert_len = nc != NULL ? strlen(nc) : 0;
    cr->key_len = nk != NULL ? strlen(nk) : 0;
    cr->expiry_ms = exp != NULL ? expiry : 0;
  }
  r = 0;
out:
  json_decref(root);
  return r;
}

static void on_plugin_handle_closed(uv_handle_t *h) {
  struct kube_plugin *p = h->data;
  struct kube_creds *cr = p->cr;

  cr->nopen--;
  if (--p->nopen == 0) {
    fr_buf_free(&p->obuf);
    fr_buf_free(&p->ebuf);
    free(p);
  }
  maybe_closed(cr);
}

static void close_if_open(uv_handle_t *h) {
  if (!uv_is_closing(h))
    uv_close(h, on_plugin_handle_closed);
}

/* Closes the run's handles. The process handle stays open until the child
 * has been reaped (killed first if still running), so no zombie is left. */
static void plugin_close(struct kube_plugin *p) {
  p->closing = 1;
  close_if_open((uv_handle_t *)&p->out);
  close_if_open((uv_handle_t *)&p->err);
  close_if_open((uv_handle_t *)&p->timer);
  if (!p->spawned || p->exited)
    close_if_open((uv_handle_t *)&p->proc);
  else
    uv_process_kill(&p->proc, SIGKILL);
}

static void plugin_finish(struct kube_plugin *p) {
  struct kube_creds *cr = p->cr;
  int r;

  if (p->finished)
    return;
  p->finished = 1;
  cr->plugin = NULL;
  r = plugin_result(p);
  plugin_close(p);
  if (r == 0)
    FR_DEBUG(LOGC, "%s: exec plugin gave credentials%s", cr->name, cr->expiry_ms ? " (expiring)" : "");
  creds_loaded(cr, r);
}

static void plugin_maybe_finish(struct kube_plugin *p) {
  if (p->exited && p->out_eof && p->err_eof)
    plugin_finish(p);
}

static void on_plugin_exit(uv_process_t *proc, int64_t status, int sig) {
  struct kube_plugin *p = proc->data;

  p->exited = 1;
  p->exit_status = status;
  p->term_signal = sig;
  if (p->closing) {
    close_if_open((uv_handle_t *)&p->proc);
    return;
  }
  plugin_maybe_finish(p);
}

static void on_plugin_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct kube_plugin *p = h->data;

  if (h == (uv_handle_t *)&p->out)
    *buf = uv_buf_init(p->oscratch, sizeof(p->oscratch));
  else
    *buf = uv_buf_init(p->escratch, sizeof(p->escratch));
}

static void on_plugin_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct kube_plugin *p = s->data;
  int is_out = s == (uv_stream_t *)&p->out;

  if (n < 0) {
    uv_read_stop(s);
    if (is_out)
      p->out_eof = 1;
    else
      p->err_eof = 1;
    plugin_maybe_finish(p);
    return;
  }
  if (n == 0 || p->finished)
    return;
  if (is_out) {
    if (p->obuf.len + (size_t)n > KUBE_PLUGIN_MAX_OUT)
      p->fail = -E2BIG;
    else if (fr_buf_append(&p->obuf, buf->base, (size_t)n) != 0)
      p->fail = -ENOMEM;
    if (p->fail != 0) {
      uv_process_kill(&p->proc, SIGKILL);
      plugin_finish(p);
    }
  } else if (p->ebuf.len < KUBE_PLUGIN_MAX_ERR) {
    size_t take = (size_t)n;

    if (take > KUBE_PLUGIN_MAX_ERR - p->ebuf.len)
      take = KUBE_PLUGIN_MAX_ERR - p->ebuf.len;
    (void)fr_buf_append(&p->ebuf, buf->base, take);  /* best effort: only for messages */
  }
}

static void on_plugin_timeout(uv_timer_t *t) {
  struct kube_plugin *p = t->data;

  p->fail = -ETIMEDOUT;
  plugin_finish(p);
}

/* "NAME=value" entries of <env> (parent), minus those whose NAME <over>
 * sets or KUBERNETES_EXEC_INFO. */
static int env_overridden(const char *entry, char *const *over) {
  size_t n = strcspn(entry, "=");

  if (n == strlen("KUBERNETES_EXEC_INFO") && strncmp(entry, "KUBERNETES_EXEC_INFO", n) == 0)
    return 1;
  for (; over != NULL && *over != NULL; over++)
    if (strncmp(*over, entry, n) == 0 && (*over)[n] == '=')
      return 1;
  return 0;
}

static int plugin_start(struct kube_creds *cr) {
  const struct fr_kube_exec_plugin *ex = cr->creds->exec;
  const char *api = ex->api_version != NULL ? ex->api_version : "client.authentication.k8s.io/v1";
  struct kube_plugin *p;
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  struct fr_buf info;
  char **argv = NULL, **envp = NULL;
  size_t nargs = 0, nenv = 0, nover = 0, i, k;
  int r;

  if (ex->command == NULL || ex->command[0] == '\0') {
    creds_set_error(cr, "exec plugin has no command");
    return -EINVAL;
  }
  p = calloc(1, sizeof(*p));
  if (p == NULL)
    goto oom;
  p->cr = cr;
  fr_buf_init(&p->obuf);
  fr_buf_init(&p->ebuf);
  fr_buf_init(&info);

  /* KUBERNETES_EXEC_INFO: what client-go passes (no cluster info, since
   * kubeconfigs rarely set provideClusterInfo; never interactive). */
  if (fr_buf_puts(&info, "KUBERNETES_EXEC_INFO={\"kind\":\"ExecCredential\",\"apiVersion\":") != 0 ||
      fr_buf_put_json_str(&info, api, strlen(api)) != 0 ||
      fr_buf_puts(&info, ",\"spec\":{\"interactive\":false}}") != 0)
    goto oom;
  for (; ex->args != NULL && ex->args[nargs] != NULL; nargs++)
    ;
  for (; environ != NULL && environ[nenv] != NULL; nenv++)
    ;
  for (; ex->env != NULL && ex->env[nover] != NULL; nover++)
    ;
  argv = calloc(nargs + 2, sizeof(*argv));
  envp = calloc(nenv + nover + 2, sizeof(*envp));
  if (argv == NULL || envp == NULL)
    goto oom;
  argv[0] = ex->command;
  for (i = 0; i < nargs; i++)
    argv[i + 1] = ex->args[i];
  k = 0;
  for (i = 0; i < nenv; i++)
    if (!env_overridden(environ[i], ex->env))
      envp[k++] = environ[i];
  for (i = 0; i < nover; i++)
    envp[k++] = ex->env[i];
  envp[k++] = info.data;

  uv_pipe_init(cr->loop, &p->out, 0);
  uv_pipe_init(cr->loop, &p->err, 0);
  uv_timer_init(cr->loop, &p->timer);
  p->out.data = p->err.data = p->timer.data = p->proc.data = p;
  p->nopen = 4;   /* the process handle is initialised by uv_spawn even on failure */
  cr->nopen += 4;

  memset(&po, 0, sizeof(po));
  memset(stdio, 0, sizeof(stdio));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&p->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&p->err;
  po.file = ex->command;
  po.args = argv;
  po.env = envp;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_plugin_exit;
  r = uv_spawn(cr->loop, &p->proc, &po);
  free(argv);
  free(envp);
  fr_buf_free(&info);
  if (r != 0) {
    creds_set_error(cr, "exec plugin \"%s\" could not start: %s", ex->command, uv_strerror(r));
    p->finished = 1;
    plugin_close(p);
    return r;
  }
  p->spawned = 1;
  uv_read_start((uv_stream_t *)&p->out, on_plugin_alloc, on_plugin_read);
  uv_read_start((uv_stream_t *)&p->err, on_plugin_alloc, on_plugin_read);
  uv_timer_start(&p->timer, on_plugin_timeout, KUBE_PLUGIN_TIMEOUT_MS, 0);
  cr->plugin = p;
  FR_DEBUG(LOGC, "%s: running exec plugin %s (pid %d)", cr->name, ex->command, p->proc.pid);
  return 0;

oom:
  free(argv);
  free(envp);
  if (p != NULL) {
    fr_buf_free(&info);
    free(p);
  }
  creds_set_error(cr, "exec plugin \"%s\": out of memory", ex->command);
  return -ENOMEM;
}

/* -- state machine of the credentials -- */

static int creds_load_start(struct kube_creds *cr) {
  if (cr->creds->exec != NULL)
    return plugin_start(cr);
  if (cr->creds->token_file != NULL)
    return token_read_start(cr);
  return 0;   /* static credentials: nothing to load */
}

static void creds_loaded(struct kube_creds *cr, int status) {
  if (status == 0) {
    creds_set_state(cr, CREDS_READY);
    cr->creds_gen++;
    cr->creds_err[0] = '\0';
  } else {
    creds_set_state(cr, CREDS_NONE);
    FR_WARN(LOGC, "%s: %s", cr->name, cr->creds_err);
  }
  creds_flush(cr, status);
}

/* Moves the credentials towards answering the queued waiters: a kick a turn
 * later if they are usable (or failed), a load if they are not. */
static void creds_kick(struct kube_creds *cr) {
  int r;

  if (cr->closing || cr->whead == NULL)
    return;
  switch (cr->cstate) {
  case CREDS_LOADING:
    return;
  case CREDS_READY:
    if (!creds_refreshable(cr) || !creds_expired(cr)) {
      uv_timer_start(&cr->kick, on_kick, 0, 0);
      return;
    }
    FR_DEBUG(LOGC, "%s: %s", cr->name, cr->creds->exec != NULL ? "exec credentials expire soon, refreshing"
                                                               : "reading the token file again");
    creds_set_state(cr, CREDS_NONE);
    break;
  case CREDS_FAILED:
    uv_timer_start(&cr->kick, on_kick, 0, 0);
    return;
  case CREDS_NONE:
    break;
  }
  r = creds_load_start(cr);
  if (r < 0) {
    creds_set_state(cr, CREDS_FAILED);
    cr->fail_status = r;
    FR_WARN(LOGC, "%s: %s", cr->name, cr->creds_err);
    uv_timer_start(&cr->kick, on_kick, 0, 0);
  } else if (cr->plugin != NULL || cr->tread != NULL) {
    creds_set_state(cr, CREDS_LOADING);
  } else {
    creds_set_state(cr, CREDS_READY);
    uv_timer_start(&cr->kick, on_kick, 0, 0);
  }
}

/* ------------------------------------------------------------ lifecycle */

int kube__creds_new(const struct fr_kube_creds *creds, const char *name, uint64_t reread_ms,
                    struct kube_creds **out) {
  struct kube_creds *cr = calloc(1, sizeof(*cr));

  *out = NULL;
  if (cr == NULL)
    return -ENOMEM;
  cr->creds = creds;
  cr->name = name;
  cr->reread_ms = reread_ms;
  if (creds->token != NULL && (cr->token = strdup(creds->token)) == NULL) {
    kube__creds_free(cr);
    return -ENOMEM;
  }
  if (!header_safe(cr->token)) {
    kube__creds_free(cr);
    return -EINVAL;
  }
  *out = cr;
  return 0;
}

void kube__creds_start(struct kube_creds *cr, uv_loop_t *loop, struct fr_kube_client *owner) {
  FR_ASSERT(!cr->started);
  cr->loop = loop;
  cr->owner = owner;
  cr->started = 1;
  uv_timer_init(loop, &cr->kick);
  cr->nopen = 1; /* the kick timer */
  cr->token_read_ms = uv_now(loop); /* a token from a file was read by the loader just now */
  if (cr->creds->exec != NULL || (cr->creds->token_file != NULL && cr->token == NULL))
    cr->cstate = CREDS_NONE;
  else
    cr->cstate = CREDS_READY;
}

/* The kick timer closes after the owner asked fr_curluv to close its
 * handles: credential waits still queued (kube_exec.c keeps its memory
 * until its wait answers) get -ECANCELED here, a loop turn after
 * fr_kube_client_free() and while the client is still allocated (it waits
 * for kube__creds_close()'s callback). */
static void on_kick_closed(uv_handle_t *h) {
  struct kube_creds *cr = fr_container_of(h, struct kube_creds, kick);
  struct creds_waiter *w;
  kube__creds_cb cb;
  void *arg;

  while ((w = cr->whead) != NULL) {
    cb = w->cb;
    arg = w->arg;
    waiter_unlink(cr, w);
    free(w);
    cb(cr->owner, -ECANCELED, arg);
  }
  cr->nopen--;
  maybe_closed(cr);
}

void kube__creds_close(struct kube_creds *cr, void (*cb)(void *arg), void *arg) {
  FR_ASSERT(cr->started && !cr->closing);
  cr->closing = 1;
  cr->closed_cb = cb;
  cr->closed_arg = arg;
  uv_close((uv_handle_t *)&cr->kick, on_kick_closed);
  if (cr->plugin != NULL) {
    struct kube_plugin *p = cr->plugin;

    cr->plugin = NULL;
    p->finished = 1;
    plugin_close(p);
  }
  if (cr->tread != NULL)
    uv_cancel((uv_req_t *)&cr->tread->req);   /* else its callbacks see cr->closing */
  maybe_closed(cr);
}

void kube__creds_free(struct kube_creds *cr) {
  struct creds_waiter *w;

  if (cr == NULL)
    return;
  /* Never started, or closed and every handle gone. */
  FR_ASSERT(!cr->started || (cr->closing && cr->nopen == 0));
  while ((w = cr->whead) != NULL) {
    waiter_unlink(cr, w);
    free(w);
  }
  if (cr->token != NULL)
    memset(cr->token, 0, strlen(cr->token));
  free(cr->token);
  free(cr->cert_pem);
  free(cr->key_pem);
  free(cr);
}

/* ------------------------------------------------------------ a request */

int kube__creds_apply(const struct kube_creds *cr, CURL *easy, struct curl_slist **headers) {
  const struct fr_kube_creds *cfg = cr->creds;
  const char *cert = cr->cert_pem != NULL ? cr->cert_pem : cfg->client_cert_pem;
  const char *key = cr->cert_pem != NULL ? cr->key_pem : cfg->client_key_pem;
  size_t cert_len = cr->cert_pem != NULL ? cr->cert_len : cfg->client_cert_len;
  size_t key_len = cr->cert_pem != NULL ? cr->key_len : cfg->client_key_len;
  struct curl_slist *h;
  struct fr_buf line;
  int rc = 0;

  if (!header_safe(cr->token))
    return -EINVAL;
  if (cert != NULL && key != NULL && cert_len > 0 && key_len > 0) {
    struct curl_blob cb = {.data = (void *)cert, .len = cert_len, .flags = CURL_BLOB_COPY};
    struct curl_blob kb = {.data = (void *)key, .len = key_len, .flags = CURL_BLOB_COPY};

    curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
    if (curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &cb) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &kb) != CURLE_OK)
      return -ENOMEM;
  }
  if (cr->token == NULL)
    return 0;
  fr_buf_init(&line);
  if (fr_buf_printf(&line, "Authorization: Bearer %s", cr->token) != 0 ||
      (h = curl_slist_append(*headers, line.data)) == NULL)
    rc = -ENOMEM;
  else
    *headers = h;
  if (line.data != NULL)
    memset(line.data, 0, line.cap);   /* the token */
  fr_buf_free(&line);
  return rc;
}
