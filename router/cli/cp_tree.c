/* cp_tree.c - fedctl cp -r: a directory tree into or out of a sandbox
 * through the v1 files API (docs/api.md "Inside a sandbox"): a directory
 * is listed with GET /files?path=D&list=1 (name, type, size, mode of each
 * entry), each file moves in one streamed PUT or GET (fc_cp_put() and
 * fc_cp_get() in cmd_data.c), so memory stays flat at any file size and
 * the paths in hand are one per directory level.
 *
 * What the files API cannot do is done with an exec at the end of an
 * upload: a PUT creates the parent directories of the file it writes
 * (0755) and writes the file 0644, but nothing creates an empty directory
 * or sets a mode. So empty leaf directories get `mkdir -p` and modes other
 * than those `chmod`, batched under the exec API's argv bound. A tree of
 * plain files and non-empty directories needs no exec. Downloads need none
 * of this: mkdir and the mode of open() and chmod() do it locally.
 *
 * Bounds: symbolic links inside the tree are never followed (lstat
 * locally, the listing's type remotely, which the agent takes with lstat
 * too), so the walk cannot loop; depth is capped at TREE_DEPTH all the
 * same (bind mounts, a runaway tree). Names from a listing are checked
 * before they touch the local disk (no '/', "." or ".."): what a sandbox
 * answers is not trusted.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedctl.h"

/* Directory levels below the source; `cp -r` users never need more, a
 * loop through a bind mount stops here. */
#define TREE_DEPTH 64
/* An exec's argv URL-encoded stays under 14,336 bytes (docs/api.md,
 * invalid_argv: what a pods/exec URL carries); leave room for the rest. */
#define ARGV_BUDGET 12000
/* What a PUT makes, so what needs no chmod. */
#define PUT_FILE_MODE 0644u
#define PUT_DIR_MODE 0755u

/* A path to fix up with an exec at the end of an upload. */
struct later {
  char *path;
  unsigned mode;
};

struct later_list {
  struct later *v;
  size_t n, cap;
};

struct tree {
  struct fc_ctx *ctx;
  const char *id;
  int verbose;
  struct fr_buf local;    /* the path being copied, on this machine */
  struct fr_buf remote;   /* ... and in the sandbox */
  char *fail_local;       /* where it stopped (owned), for the last word */
  char *fail_remote;
  int64_t files, dirs, bytes, skipped;
  mode_t umask;           /* downloads */
  struct later_list mkdirs, file_modes, dir_modes; /* uploads */
};

static int later_add(struct later_list *l, const char *path, unsigned mode) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    struct later *v = realloc(l->v, cap * sizeof(*v));
    if (v == NULL)
      return -ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  if ((l->v[l->n].path = strdup(path)) == NULL)
    return -ENOMEM;
  l->v[l->n++].mode = mode;
  return 0;
}

static void later_free(struct later_list *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->v[i].path);
  free(l->v);
}

static void tree_init(struct tree *t, struct fc_ctx *ctx, const char *id, int verbose) {
  memset(t, 0, sizeof(*t));
  t->ctx = ctx;
  t->id = id;
  t->verbose = verbose;
  fr_buf_init(&t->local);
  fr_buf_init(&t->remote);
}

static void tree_close(struct tree *t) {
  fr_buf_free(&t->local);
  fr_buf_free(&t->remote);
  free(t->fail_local);
  free(t->fail_remote);
  later_free(&t->mkdirs);
  later_free(&t->file_modes);
  later_free(&t->dir_modes);
}

/* Appends "/<name>" to <b> (no second '/' after one that ends it). */
static int path_push(struct fr_buf *b, const char *name) {
  if (b->len > 0 && b->data[b->len - 1] == '/')
    return fr_buf_puts(b, name);
  return fr_buf_printf(b, "/%s", name);
}

static void path_cut(struct fr_buf *b, size_t len) {
  b->len = len;
  if (b->data != NULL)
    b->data[len] = '\0';
}

/* <path> without the '/'s that end it ("/" stays "/") into <b>. */
static int path_trimmed(struct fr_buf *b, const char *path) {
  size_t n = strlen(path);

  while (n > 1 && path[n - 1] == '/')
    n--;
  return fr_buf_append(b, path, n) != 0 || fr_buf_puts(b, "") != 0 ? -ENOMEM : 0;
}

/* The last name of the trimmed <path>: "" for "/" and for "." and "..",
 * which cp -r copies the contents of rather than a directory named so. A
 * trailing "/." is dropped from <b> (only the messages would show it). */
static const char *source_name(struct fr_buf *b) {
  const char *s = strrchr(b->data, '/');
  const char *name = s != NULL ? s + 1 : b->data;

  if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
    return name;
  if (strcmp(name, ".") == 0 && s != NULL)
    path_cut(b, s == b->data ? 1 : (size_t)(s - b->data));
  return "";
}

/* Remembers where the copy stopped (the first failure only). */
static void fail_at(struct tree *t) {
  if (t->fail_local != NULL)
    return;
  t->fail_local = strdup(t->local.data != NULL ? t->local.data : "");
  t->fail_remote = strdup(t->remote.data != NULL ? t->remote.data : "");
}

static void stopped(const struct tree *t, int up) {
  if (t->fail_local == NULL)
    return;
  if (up)
    fprintf(stderr, "fedctl: cp -r stopped at %s (to %s:%s) after %" PRId64 " files\n", t->fail_local, t->id,
            t->fail_remote != NULL ? t->fail_remote : "?", t->files);
  else
    fprintf(stderr, "fedctl: cp -r stopped at %s:%s (to %s) after %" PRId64 " files\n", t->id,
            t->fail_remote != NULL ? t->fail_remote : "?", t->fail_local, t->files);
}

static void skip(struct tree *t, const char *what, const char *where_id, const char *path) {
  fprintf(stderr, "fedctl: warning: skipped %s%s%s: %s (cp -r copies files and directories only)\n",
          where_id != NULL ? where_id : "", where_id != NULL ? ":" : "", path, what);
  t->skipped++;
}

/* ---------------------------------------------------------------------- */
/* the listing                                                              */

enum { LISTED = 0, NOT_A_DIR = 1, NOT_FOUND = 2, LIST_FAILED = 3 };

/* GET <rpath>?list=1 into <r> (fc_resp_init()ed by the caller, who closes
 * it): LISTED with the entries array checked, NOT_A_DIR (the API's 400 for
 * a path that is there but no directory), NOT_FOUND, or LIST_FAILED (the
 * answer in <r> for fc_report(); r->status 0 and r->err on a transport
 * error or out of memory). */
static int list_remote(struct fc_ctx *ctx, const char *id, const char *rpath, struct fc_resp *r) {
  struct fr_buf path;
  int err;

  fr_buf_init(&path);
  err = fc_files_path(&path, id, rpath, "&list=1");
  if (err == 0)
    err = fc_request(ctx, "GET", path.data, NULL, FC_CALL_TIMEOUT_S, r);
  fr_buf_free(&path);
  if (err == -ENOMEM)
    snprintf(r->err, sizeof(r->err), "out of memory");
  if (err != 0)
    return LIST_FAILED;
  if (r->status == 200 && json_is_array(json_object_get(r->json, "entries")))
    return LISTED;
  /* The agent's words for a path that is there and no directory ("path
   * is not a directory: P"); a parent that is a file ("list P: Not a
   * directory") is an error to show as it is. */
  if (r->status == 400 && strcmp(fc_jstr(json_object_get(r->json, "error"), "code", ""), "invalid_path") == 0 &&
      strstr(fc_jstr(json_object_get(r->json, "error"), "message", ""), "is not a directory") != NULL)
    return NOT_A_DIR;
  if (r->status == 404 && strcmp(fc_jstr(json_object_get(r->json, "error"), "code", ""), "path_not_found") == 0)
    return NOT_FOUND;
  return LIST_FAILED;
}

int fc_cp_remote_is_dir(struct fc_ctx *ctx, const char *id, const char *rpath) {
  struct fc_resp r;
  int rc;

  fc_resp_init(&r);
  rc = list_remote(ctx, id, rpath, &r);
  fc_resp_close(&r);
  return rc == LISTED;
}

/* Prints why a listing of <rpath> failed; FC_EXIT_FAIL. */
static int list_failed(struct fc_ctx *ctx, const char *id, const char *rpath, const struct fc_resp *r) {
  if (r->status == 200)
    fprintf(stderr, "fedctl: listing %s:%s: the answer has no entries\n", id, rpath);
  else
    fc_report(ctx, r);
  return FC_EXIT_FAIL;
}

/* ---------------------------------------------------------------------- */
/* upload                                                                   */

/* The URL-encoded size of <s> as one argv word. */
static size_t argv_cost(const char *s) {
  size_t n = 9; /* "&command=" */

  for (; *s != '\0'; s++)
    n += (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("-._~", *s)
             ? 1
             : 3;
  return n;
}

/* Runs <argv> (borrowed) in the sandbox through the buffered exec; prints
 * why it failed (<what> names it). Returns an exit status. */
static int run_in_sandbox(struct tree *t, json_t *argv, const char *what) {
  struct fc_resp r;
  struct fr_buf path;
  json_t *body;
  int rc;

  fc_resp_init(&r);
  fr_buf_init(&path);
  body = json_pack("{s:O}", "argv", argv);
  if (body == NULL || fc_sandbox_path(&path, t->id, "/exec") != 0) {
    rc = fc_oom();
    goto done;
  }
  rc = fc_call(t->ctx, "POST", path.data, body, FC_CALL_TIMEOUT_S + 60, &r);
  if (rc != FC_EXIT_OK) {
    fprintf(stderr, "fedctl: %s in sandbox %s failed (the files API cannot do it; fedctl runs %s there)\n", what,
            t->id, json_string_value(json_array_get(argv, 0)));
  } else if (fc_jint(r.json, "exit_code", -1) != 0 || json_is_true(json_object_get(r.json, "timed_out"))) {
    const char *err = fc_jstr(r.json, "stderr", "");
    fprintf(stderr, "fedctl: %s in sandbox %s failed (%s exited %" PRId64 ")%s%.*s\n", what, t->id,
            json_string_value(json_array_get(argv, 0)), fc_jint(r.json, "exit_code", -1), *err ? ": " : "",
            (int)strcspn(err, "\n"), err);
    rc = FC_EXIT_FAIL;
  }
done:
  json_decref(body);
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

/* Runs "<cmd> [MODE] -- PATH..." over <l> in order, as few execs as the
 * argv bound allows: one run per stretch of equal modes (<with_mode>) or
 * the whole list (mkdir -p). */
static int run_batched(struct tree *t, const struct later_list *l, const char *cmd, int with_mode,
                       const char *what) {
  size_t i = 0;
  int rc = FC_EXIT_OK;

  while (i < l->n && rc == FC_EXIT_OK) {
    unsigned mode = l->v[i].mode;
    char m[8];
    size_t cost = 64;
    json_t *argv;

    snprintf(m, sizeof(m), "%04o", mode);
    argv = with_mode ? json_pack("[s,s,s]", cmd, m, "--") : json_pack("[s,s,s]", cmd, "-p", "--");
    if (argv == NULL)
      return fc_oom();
    for (; i < l->n && (!with_mode || l->v[i].mode == mode); i++) {
      size_t c = argv_cost(l->v[i].path);
      json_t *w;
      if (json_array_size(argv) > 3 && cost + c > ARGV_BUDGET)
        break;
      if ((w = json_string(l->v[i].path)) == NULL) {
        fprintf(stderr, "fedctl: %s:%s: the name is not UTF-8, which the exec API cannot carry (%s)\n", t->id,
                l->v[i].path, what);
        json_decref(argv);
        return FC_EXIT_FAIL;
      }
      json_array_append_new(argv, w);
      cost += c;
    }
    rc = run_in_sandbox(t, argv, what);
    if (rc == FC_EXIT_OK && t->verbose)
      fprintf(stderr, "%s:%s %s -- (%zu paths)\n", t->id, cmd, with_mode ? m : "-p", json_array_size(argv) - 3);
    json_decref(argv);
  }
  return rc;
}

static int by_mode(const void *a, const void *b) {
  const struct later *x = a, *y = b;
  return x->mode < y->mode ? -1 : x->mode > y->mode;
}

/* Uploads the regular file at t->local (<st> from lstat) to t->remote. */
static int put_file(struct tree *t, const struct stat *lst) {
  struct stat st;
  int64_t sent = 0;
  int fd, rc;

  /* O_NOFOLLOW | O_NONBLOCK: it was a regular file a moment ago; whatever
   * replaced it is neither followed nor waited on. */
  fd = open(t->local.data, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != lst->st_ino) {
    fprintf(stderr, "fedctl: %s: %s\n", t->local.data, fd < 0 ? strerror(errno) : "changed while copied");
    if (fd >= 0)
      close(fd);
    return FC_EXIT_FAIL;
  }
  rc = fc_cp_put(t->ctx, fd, t->local.data, &st, t->id, t->remote.data, &sent);
  close(fd);
  if (rc != FC_EXIT_OK)
    return rc;
  t->files++;
  t->bytes += sent;
  if (t->verbose)
    fprintf(stderr, "%s -> %s:%s (%" PRId64 " bytes)\n", t->local.data, t->id, t->remote.data, sent);
  if ((st.st_mode & 0777) != PUT_FILE_MODE && later_add(&t->file_modes, t->remote.data, st.st_mode & 0777) != 0)
    return fc_oom();
  return FC_EXIT_OK;
}

/* Uploads the directory at t->local (<mode> its permission bits) into
 * t->remote, <depth> levels below the source. <set_mode>: chmod it when
 * <mode> is not what a PUT makes (not for the destination cp -r copies
 * the contents of `.` into). */
static int put_dir(struct tree *t, unsigned depth, unsigned mode, int set_mode) {
  size_t llen = t->local.len, rlen = t->remote.len;
  struct dirent *de;
  struct stat st;
  int rc = FC_EXIT_OK, made = 0;
  DIR *d;

  if (depth > TREE_DEPTH) {
    fprintf(stderr, "fedctl: %s: more than %d directory levels below the source; not copied\n", t->local.data,
            TREE_DEPTH);
    fail_at(t);
    return FC_EXIT_FAIL;
  }
  if ((d = opendir(t->local.data)) == NULL) {
    fprintf(stderr, "fedctl: %s: %s\n", t->local.data, strerror(errno));
    fail_at(t);
    return FC_EXIT_FAIL;
  }
  t->dirs++;
  for (;;) {
    errno = 0;
    if ((de = readdir(d)) == NULL) {
      if (errno != 0) {
        fprintf(stderr, "fedctl: reading %s: %s\n", t->local.data, strerror(errno));
        fail_at(t);
        rc = FC_EXIT_FAIL;
      }
      break;
    }
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (path_push(&t->local, de->d_name) != 0 || path_push(&t->remote, de->d_name) != 0) {
      rc = fc_oom();
      break;
    }
    if (lstat(t->local.data, &st) != 0) {
      fprintf(stderr, "fedctl: %s: %s\n", t->local.data, strerror(errno));
      rc = FC_EXIT_FAIL;
    } else if (S_ISREG(st.st_mode)) {
      rc = put_file(t, &st);
      made = 1;
    } else if (S_ISDIR(st.st_mode)) {
      rc = put_dir(t, depth + 1, st.st_mode & 0777, 1);
      made = 1;
    } else {
      skip(t, S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file or directory", NULL, t->local.data);
    }
    if (rc != FC_EXIT_OK) {
      fail_at(t);
      break;
    }
    path_cut(&t->local, llen);
    path_cut(&t->remote, rlen);
  }
  closedir(d);
  if (rc != FC_EXIT_OK)
    return rc;
  /* Nothing in it made it in the sandbox: a leaf, `mkdir -p` makes it and
   * its parents. Modes after the contents (post-order), so a directory
   * without write permission is filled first. */
  if ((!made && later_add(&t->mkdirs, t->remote.data, mode) != 0) ||
      (set_mode && mode != PUT_DIR_MODE && later_add(&t->dir_modes, t->remote.data, mode) != 0))
    return fc_oom();
  return FC_EXIT_OK;
}

int fc_cp_tree_up(struct fc_ctx *ctx, const char *local, const char *id, const char *rpath, int verbose) {
  struct tree t;
  struct fc_resp r;
  struct stat st;
  const char *base;
  int rc, slash = rpath[strlen(rpath) - 1] == '/';

  /* The named source is followed when it is a link (cp -r's -H). */
  if (stat(local, &st) != 0) {
    fprintf(stderr, "fedctl: %s: %s\n", local, strerror(errno));
    return FC_EXIT_FAIL;
  }
  if (!S_ISDIR(st.st_mode))
    return -ENOTDIR;
  tree_init(&t, ctx, id, verbose);
  fc_resp_init(&r);
  if (path_trimmed(&t.local, local) != 0 || path_trimmed(&t.remote, rpath) != 0) {
    rc = fc_oom();
    goto done;
  }
  base = source_name(&t.local);
  switch (list_remote(ctx, id, t.remote.data, &r)) {
  case LISTED:
    /* An existing directory receives the source under its name. */
    if (*base != '\0' && path_push(&t.remote, base) != 0) {
      rc = fc_oom();
      goto done;
    }
    break;
  case NOT_FOUND:
    /* "D/" is a directory to copy into, made if need be; "D" the copy. */
    if (slash && *base != '\0' && path_push(&t.remote, base) != 0) {
      rc = fc_oom();
      goto done;
    }
    break;
  case NOT_A_DIR:
    fprintf(stderr, "fedctl: %s:%s exists and is not a directory\n", id, t.remote.data);
    rc = FC_EXIT_FAIL;
    goto done;
  default:
    rc = list_failed(ctx, id, t.remote.data, &r);
    goto done;
  }
  rc = put_dir(&t, 0, st.st_mode & 0777, *base != '\0');
  /* Empty directories, then file modes (any order), then directory modes
   * deepest first (put_dir() lists them after their contents). */
  if (rc == FC_EXIT_OK)
    rc = run_batched(&t, &t.mkdirs, "mkdir", 0, "creating empty directories");
  if (rc == FC_EXIT_OK) {
    qsort(t.file_modes.v, t.file_modes.n, sizeof(*t.file_modes.v), by_mode);
    rc = run_batched(&t, &t.file_modes, "chmod", 1, "setting file modes");
  }
  if (rc == FC_EXIT_OK)
    rc = run_batched(&t, &t.dir_modes, "chmod", 1, "setting directory modes");
  if (rc == FC_EXIT_OK && verbose)
    fprintf(stderr, "copied %" PRId64 " files (%" PRId64 " bytes) and %" PRId64 " directories to %s:%s%s\n",
            t.files, t.bytes, t.dirs, id, rpath, t.skipped > 0 ? "; some entries were skipped" : "");
  stopped(&t, 1);
done:
  fc_resp_close(&r);
  tree_close(&t);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* download                                                                 */

/* The permission bits of a listing entry ("0644"), or <dflt>. */
static unsigned entry_mode(const json_t *e, unsigned dflt) {
  const char *s = fc_jstr(e, "mode", NULL);
  char *end;
  unsigned long v;

  if (s == NULL || *s == '\0')
    return dflt;
  v = strtoul(s, &end, 8);
  return *end == '\0' ? (unsigned)(v & 0777) : dflt;
}

/* Makes the local directory t->local, *<made> 1 (its mode is then due
 * once it is filled) or 0 when it was there. Returns an exit status. */
static int make_local_dir(struct tree *t, int *made) {
  struct stat st;

  *made = 0;
  /* Owner-only while it fills; its own mode comes after its contents. */
  if (mkdir(t->local.data, 0700) == 0) {
    *made = 1;
    return FC_EXIT_OK;
  }
  if (errno == EEXIST && stat(t->local.data, &st) == 0 && S_ISDIR(st.st_mode))
    return FC_EXIT_OK;
  if (errno == EEXIST)
    fprintf(stderr, "fedctl: %s exists and is not a directory\n", t->local.data);
  else
    fprintf(stderr, "fedctl: %s: %s\n", t->local.data, strerror(errno));
  return FC_EXIT_FAIL;
}

/* A name from a listing is one path component: nothing that would leave
 * the directory it is copied into. */
static int name_ok(const json_t *name) {
  const char *s = json_string_value(name);

  return s != NULL && *s != '\0' && strlen(s) == json_string_length(name) && strchr(s, '/') == NULL &&
         strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int get_dir(struct tree *t, const json_t *entries, unsigned depth);

/* Copies the remote directory t->remote into t->local (<mode> for it when
 * made here): lists it, makes it, fills it. */
static int get_subdir(struct tree *t, unsigned depth, unsigned mode) {
  struct fc_resp r;
  int rc, made;

  if (depth > TREE_DEPTH) {
    fprintf(stderr, "fedctl: %s:%s: more than %d directory levels below the source; not copied\n", t->id,
            t->remote.data, TREE_DEPTH);
    return FC_EXIT_FAIL;
  }
  fc_resp_init(&r);
  switch (list_remote(t->ctx, t->id, t->remote.data, &r)) {
  case LISTED:
    rc = make_local_dir(t, &made);
    if (rc == FC_EXIT_OK)
      rc = get_dir(t, json_object_get(r.json, "entries"), depth);
    if (rc == FC_EXIT_OK && made && chmod(t->local.data, mode & ~t->umask) != 0) {
      fprintf(stderr, "fedctl: chmod %s: %s\n", t->local.data, strerror(errno));
      rc = FC_EXIT_FAIL;
    }
    break;
  default:
    rc = list_failed(t->ctx, t->id, t->remote.data, &r);
    break;
  }
  fc_resp_close(&r);
  return rc;
}

/* Copies the <entries> of the listing of t->remote into t->local, which
 * exists; <depth> levels below the source. */
static int get_dir(struct tree *t, const json_t *entries, unsigned depth) {
  size_t llen = t->local.len, rlen = t->remote.len, i;
  const json_t *e;
  int rc = FC_EXIT_OK;

  t->dirs++;
  json_array_foreach(entries, i, e) {
    const json_t *name = json_object_get(e, "name");
    const char *type = fc_jstr(e, "type", "");

    if (!name_ok(name)) {
      fprintf(stderr, "fedctl: listing %s:%s: an entry with a bad name (%s); not copied\n", t->id, t->remote.data,
              json_is_string(name) ? json_string_value(name) : "none");
      rc = FC_EXIT_FAIL;
      fail_at(t);
      break;
    }
    if (path_push(&t->local, json_string_value(name)) != 0 || path_push(&t->remote, json_string_value(name)) != 0) {
      rc = fc_oom();
      break;
    }
    if (strcmp(type, "file") == 0) {
      int64_t got = 0;
      rc = fc_cp_get(t->ctx, t->id, t->remote.data, t->local.data, entry_mode(e, 0644), &got, NULL);
      if (rc == FC_EXIT_OK) {
        t->files++;
        t->bytes += got;
        if (t->verbose)
          fprintf(stderr, "%s:%s -> %s (%" PRId64 " bytes)\n", t->id, t->remote.data, t->local.data, got);
      }
    } else if (strcmp(type, "dir") == 0) {
      rc = get_subdir(t, depth + 1, entry_mode(e, 0777));
    } else {
      skip(t, strcmp(type, "symlink") == 0 ? "a symbolic link" : "not a regular file or directory", t->id,
           t->remote.data);
    }
    if (rc != FC_EXIT_OK) {
      fail_at(t);
      break;
    }
    path_cut(&t->local, llen);
    path_cut(&t->remote, rlen);
  }
  return rc;
}

/* The mode of directory <rpath> from its parent's listing, or <dflt> when
 * that cannot be had (the listing of a directory gives its entries' modes,
 * not its own). */
static unsigned remote_dir_mode(struct fc_ctx *ctx, const char *id, const char *rpath, unsigned dflt) {
  struct fr_buf parent;
  struct fc_resp r;
  const char *base = strrchr(rpath, '/') + 1;
  const json_t *e;
  unsigned mode = dflt;
  size_t i;

  fr_buf_init(&parent);
  fc_resp_init(&r);
  if (fr_buf_append(&parent, rpath, base == rpath + 1 ? 1 : (size_t)(base - rpath - 1)) == 0 &&
      fr_buf_puts(&parent, "") == 0 && list_remote(ctx, id, parent.data, &r) == LISTED)
    json_array_foreach(json_object_get(r.json, "entries"), i, e) {
      if (strcmp(fc_jstr(e, "name", ""), base) == 0 && strcmp(fc_jstr(e, "type", ""), "dir") == 0) {
        mode = entry_mode(e, dflt);
        break;
      }
    }
  fc_resp_close(&r);
  fr_buf_free(&parent);
  return mode;
}

int fc_cp_tree_down(struct fc_ctx *ctx, const char *id, const char *rpath, const char *local, int verbose) {
  struct tree t;
  struct fc_resp r;
  struct stat st;
  const char *base;
  unsigned mode = 0777;
  int rc, made = 0, into, slash = local[strlen(local) - 1] == '/';

  tree_init(&t, ctx, id, verbose);
  fc_resp_init(&r);
  t.umask = umask(0);
  umask(t.umask);
  if (path_trimmed(&t.local, local) != 0 || path_trimmed(&t.remote, rpath) != 0) {
    rc = fc_oom();
    goto done;
  }
  switch (list_remote(ctx, id, t.remote.data, &r)) {
  case LISTED:
    break;
  case NOT_A_DIR:
    rc = -ENOTDIR;
    goto done;
  default:
    rc = list_failed(ctx, id, t.remote.data, &r);
    goto done;
  }
  base = source_name(&t.remote);
  if (stat(t.local.data, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      fprintf(stderr, "fedctl: %s exists and is not a directory\n", t.local.data);
      rc = FC_EXIT_FAIL;
      goto done;
    }
    into = 1;
  } else if (errno != ENOENT || (slash && mkdir(t.local.data, 0777) != 0)) {
    fprintf(stderr, "fedctl: %s: %s\n", t.local.data, strerror(errno));
    rc = FC_EXIT_FAIL;
    goto done;
  } else {
    into = slash;
  }
  /* An existing directory, or "D/" (made now): the source goes in under
   * its name; `.` and `/` pour their contents in. */
  if (into && *base != '\0' && path_push(&t.local, base) != 0) {
    rc = fc_oom();
    goto done;
  }
  if (*base != '\0')
    mode = remote_dir_mode(ctx, id, t.remote.data, 0777);
  if ((rc = make_local_dir(&t, &made)) == FC_EXIT_OK)
    rc = get_dir(&t, json_object_get(r.json, "entries"), 0);
  if (rc == FC_EXIT_OK && made && chmod(t.local.data, mode & ~t.umask) != 0) {
    fprintf(stderr, "fedctl: chmod %s: %s\n", t.local.data, strerror(errno));
    rc = FC_EXIT_FAIL;
  }
  if (rc == FC_EXIT_OK && verbose)
    fprintf(stderr, "copied %" PRId64 " files (%" PRId64 " bytes) and %" PRId64 " directories to %s%s\n", t.files,
            t.bytes, t.dirs, t.local.data, t.skipped > 0 ? "; some entries were skipped" : "");
  stopped(&t, 0);
done:
  fc_resp_close(&r);
  tree_close(&t);
  return rc;
}
