/* cmd_data.c - inside a sandbox, through its agent (docs/api.md "Inside a
 * sandbox"): cp (files both ways, streamed; -r's tree walk is in
 * cp_tree.c), ps and kill. exec is in cmd_sandbox.c, shell in cmd_shell.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedctl.h"

/* A transfer that moves less than 1 byte/s for this long is stalled. */
#define FC_STALL_S 120L

static const struct fc_opt no_opts[] = {{NULL, 0, 0, 0}};

/* ---------------------------------------------------------------------- */
/* cp                                                                      */

static const char cp_usage[] =
    "usage: fedctl cp [-r] [-v] LOCAL ID:/abs/path\n"
    "       fedctl cp [-r] [-v] ID:/abs/path LOCAL\n"
    "\n"
    "Copies one file into or out of sandbox ID, streamed (any size up to the\n"
    "tenant's max_file_bytes; fedctl holds no more than a buffer of it).\n"
    "LOCAL `-` is stdin or stdout. A remote path ending in '/' and a LOCAL\n"
    "that is a directory take the other side's file name. Parent directories\n"
    "in the sandbox are created; an existing file is replaced.\n"
    "\n"
    "With -r a directory is copied with everything in it, one file at a time,\n"
    "the way cp -r does: a destination that is an existing directory, or that\n"
    "ends in '/', receives the source as a subdirectory of the same name (the\n"
    "source's contents when it is `.` or `/`); a destination that does not\n"
    "exist becomes the copy; an existing file there is an error. Merges into\n"
    "what exists, replacing files of the same name. Permission bits (rwx) are\n"
    "kept both ways; empty directories and modes other than 0644 (files) and\n"
    "0755 (directories) are set in the sandbox with an exec of mkdir and chmod.\n"
    "Symbolic links and special files inside the tree are skipped with a\n"
    "warning (never followed); a named source that is a link is followed.\n"
    "At most 64 directory levels. Stops at the first failure, naming the path\n"
    "(what was copied before stays), and exits 1.\n"
    "\n"
    "  -r, --recursive    copy a directory tree\n"
    "  -v, --verbose      with -r, print each file copied (on stderr)\n"
    "  --json             print the API response of an upload verbatim\n";

enum { CP_RECURSIVE = 1, CP_VERBOSE };

static const struct fc_opt cp_opts[] = {
    {"recursive", 'r', 0, CP_RECURSIVE}, {"verbose", 'v', 0, CP_VERBOSE}, {NULL, 0, 0, 0}};

/* "ID:/abs/path": sets *<id> (allocated) and *<path> (inside <arg>).
 * Sandbox ids (<cluster>.<pod>) have no ':' or '/', so "./a:/b" is local. */
static int split_remote(const char *arg, char **id, const char **path) {
  const char *colon = strchr(arg, ':');

  if (colon == NULL || colon == arg || colon[1] != '/' || memchr(arg, '/', (size_t)(colon - arg)) != NULL)
    return -EINVAL;
  if ((*id = strndup(arg, (size_t)(colon - arg))) == NULL)
    return -ENOMEM;
  *path = colon + 1;
  return 0;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s != NULL ? s + 1 : path;
}

int fc_files_path(struct fr_buf *b, const char *id, const char *path, const char *tail) {
  int rc = fc_sandbox_path(b, id, "/files");
  if (rc == 0)
    rc = fc_add_query(b, "path", path);
  if (rc == 0 && tail != NULL)
    rc = fr_buf_puts(b, tail);
  return rc;
}

struct upload {
  int fd;
  int64_t sent;
  int err;                /* read error (positive errno) */
};

static size_t on_read(char *buf, size_t size, size_t nitems, void *arg) {
  struct upload *u = arg;
  ssize_t n;

  do
    n = read(u->fd, buf, size * nitems);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    u->err = errno;
    return CURL_READFUNC_ABORT;
  }
  u->sent += n;
  return (size_t)n;
}

int fc_cp_put(struct fc_ctx *ctx, int fd, const char *local, const struct stat *st, const char *id,
              const char *rpath, int64_t *sent) {
  struct upload u = {.fd = fd};
  struct fr_buf path;
  struct fc_resp r;
  CURL *easy;
  CURLcode crc;
  int rc;

  fc_resp_init(&r);
  fr_buf_init(&path);
  if ((rc = fc_files_path(&path, id, rpath, NULL)) != 0 || (rc = fc_ctx_easy(ctx, &easy)) != 0 ||
      (rc = fc_easy_setup_raw(ctx, easy, "PUT", path.data, "application/octet-stream", NULL, 0, 0, &r)) != 0) {
    rc = rc == -EINVAL ? FC_EXIT_USAGE : fc_oom();
    goto done;
  }
  curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(easy, CURLOPT_READFUNCTION, on_read);
  curl_easy_setopt(easy, CURLOPT_READDATA, &u);
  /* A regular file says its size (Content-Length: the router refuses one
   * over the limit before any byte moves); a pipe goes chunked. */
  if (S_ISREG(st->st_mode))
    curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t)st->st_size);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, FC_STALL_S);
  crc = curl_easy_perform(easy);
  fc_resp_finish(easy, crc, &r);
  if (u.err != 0) {
    fprintf(stderr, "fedctl: reading %s: %s\n", local, strerror(u.err));
    rc = FC_EXIT_FAIL;
    goto done;
  }
  if (r.status == 0 || crc != CURLE_OK || r.status < 200 || r.status > 299) {
    /* The router may answer (413, 404) before it took the whole body:
     * then the answer, not the broken send, is the news. */
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (r.status == 0 && status >= 400 && r.body.len > 0) {
      json_error_t jerr;
      r.status = status;
      r.json = json_loadb(r.body.data, r.body.len, 0, &jerr);
    }
    rc = fc_report(ctx, &r);
    goto done;
  }
  if (ctx->json)
    fc_print_body(&r);
  if (fc_jint(r.json, "size", -1) != u.sent) {
    fprintf(stderr, "fedctl: the sandbox stored %" PRId64 " bytes of the %" PRId64 " sent to %s\n",
            fc_jint(r.json, "size", -1), u.sent, rpath);
    rc = FC_EXIT_FAIL;
    goto done;
  }
  rc = FC_EXIT_OK;
done:
  if (sent != NULL)
    *sent = u.sent;
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

static int cp_upload(struct fc_ctx *ctx, const char *local, const char *id, const char *rpath) {
  struct fr_buf dest;
  struct stat st;
  int fd = -1, rc;

  memset(&st, 0, sizeof(st));
  fr_buf_init(&dest);
  if (fr_buf_puts(&dest, rpath) != 0) {
    rc = fc_oom();
    goto done;
  }
  if (rpath[strlen(rpath) - 1] == '/') {
    if (strcmp(local, "-") == 0) {
      rc = fc_usage_error("cp", "stdin has no file name: give the whole remote path");
      goto done;
    }
    if (fr_buf_puts(&dest, base_name(local)) != 0) {
      rc = fc_oom();
      goto done;
    }
  }
  if (strcmp(local, "-") == 0) {
    fd = STDIN_FILENO;
  } else if ((fd = open(local, O_RDONLY | O_CLOEXEC)) < 0) {
    fprintf(stderr, "fedctl: %s: %s\n", local, strerror(errno));
    rc = FC_EXIT_FAIL;
    goto done;
  }
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr, "fedctl: %s is a directory (cp copies one file; cp -r copies a directory)\n", local);
    rc = FC_EXIT_FAIL;
    goto done;
  }
  rc = fc_cp_put(ctx, fd, local, &st, id, dest.data, NULL);
done:
  if (fd > STDIN_FILENO)
    close(fd);
  fr_buf_free(&dest);
  return rc;
}

struct download {
  const char *name;       /* LOCAL, or "stdout" */
  int fd;                 /* -1 until the first byte of a good answer */
  int created;            /* the file did not exist: remove it on failure */
  unsigned mode;          /* for a file this copy creates (the umask applies) */
  int64_t got;
};

/* Opens the local file once the answer is known to be good, so a failed
 * copy never truncates it. */
static int dl_open(struct download *d) {
  if (d->fd >= 0)
    return 0;
  d->fd = open(d->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)d->mode);
  if (d->fd >= 0) {
    d->created = 1;
    return 0;
  }
  if (errno == EEXIST)
    d->fd = open(d->name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)d->mode);
  return d->fd >= 0 ? 0 : -errno;
}

static int on_file_data(const char *data, size_t len, void *arg) {
  struct download *d = arg;
  int rc = dl_open(d);

  if (rc == 0)
    rc = fc_write_all(d->fd, data, len);
  d->got += (int64_t)len;
  return rc;
}

int fc_cp_get(struct fc_ctx *ctx, const char *id, const char *rpath, const char *local, unsigned mode,
              int64_t *got, long *status) {
  struct download d = {.fd = -1, .mode = mode};
  struct fr_buf path;
  struct fc_resp r;
  struct fc_sink k;
  CURL *easy;
  CURLcode crc;
  int rc;

  fc_resp_init(&r);
  fr_buf_init(&path);
  if (local == NULL) {
    d.fd = STDOUT_FILENO;
    d.name = "stdout";
  } else {
    d.name = local;
  }
  if ((rc = fc_files_path(&path, id, rpath, NULL)) != 0 || (rc = fc_ctx_easy(ctx, &easy)) != 0 ||
      (rc = fc_easy_setup_raw(ctx, easy, "GET", path.data, NULL, NULL, 0, 0, &r)) != 0) {
    rc = rc == -EINVAL ? FC_EXIT_USAGE : fc_oom();
    goto done;
  }
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, FC_STALL_S);
  fc_sink_attach(&k, easy, &r, on_file_data, &d);
  crc = curl_easy_perform(easy);
  fc_sink_finish(&k, crc);
  if (!k.ok || k.err != 0 || crc != CURLE_OK) {
    char what[600];
    snprintf(what, sizeof(what), "writing %s", d.name);
    rc = fc_sink_report(ctx, &k, what);
    if (status != NULL)
      *status = r.status;
    goto done;
  }
  /* An empty file never reached on_file_data. */
  if ((rc = dl_open(&d)) != 0) {
    fprintf(stderr, "fedctl: writing %s: %s\n", d.name, strerror(-rc));
    rc = FC_EXIT_FAIL;
    goto done;
  }
  if (d.fd != STDOUT_FILENO && close(d.fd) != 0) {
    d.fd = -1;
    fprintf(stderr, "fedctl: writing %s: %s\n", d.name, strerror(errno));
    rc = FC_EXIT_FAIL;
    goto done;
  }
  d.fd = -1;
  d.created = 0;
  rc = FC_EXIT_OK;
done:
  if (got != NULL)
    *got = d.got;
  if (d.fd > STDOUT_FILENO)
    close(d.fd);
  if (d.created)
    unlink(d.name);   /* a partial copy is worse than none */
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

static int cp_download(struct fc_ctx *ctx, const char *id, const char *rpath, const char *local) {
  struct fr_buf name;
  struct stat st;
  long status = 0;
  int rc;

  if (rpath[strlen(rpath) - 1] == '/')
    return fc_usage_error("cp", "%s names a directory; cp copies one file (cp -r copies a directory)", rpath);
  fr_buf_init(&name);
  rc = fr_buf_puts(&name, local);
  if (rc == 0 && strcmp(local, "-") != 0 && stat(local, &st) == 0 && S_ISDIR(st.st_mode))
    rc = fr_buf_printf(&name, "%s%s", local[strlen(local) - 1] == '/' ? "" : "/", base_name(rpath));
  if (rc != 0)
    rc = fc_oom();
  else
    rc = fc_cp_get(ctx, id, rpath, strcmp(local, "-") == 0 ? NULL : name.data, 0666, NULL, &status);
  /* GET on a directory is a 400 (not a regular file): say what would do. */
  if (rc != FC_EXIT_OK && status == 400 && fc_cp_remote_is_dir(ctx, id, rpath))
    fprintf(stderr, "fedctl: %s:%s is a directory (cp copies one file; cp -r copies a directory)\n", id, rpath);
  fr_buf_free(&name);
  return rc;
}

int fc_cmd_cp(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  const char *val, *pos[2] = {NULL, NULL}, *src_path = NULL, *dst_path = NULL;
  char *src_id = NULL, *dst_id = NULL;
  int opt, npos = 0, rc = FC_EXIT_USAGE, e1, e2, recursive = 0, verbose = 0;

  fc_args_init(&a, ctx, "cp", cp_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(cp_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    if (opt == CP_RECURSIVE) {
      recursive = 1;
      continue;
    }
    if (opt == CP_VERBOSE) {
      verbose = 1;
      continue;
    }
    if (npos == 2)
      return fc_usage_error("cp", "unexpected argument '%s'", val);
    pos[npos++] = val;
  }
  if (npos < 2)
    return fc_usage_error("cp", "give a source and a destination (fedctl cp LOCAL ID:/abs/path)");
  e1 = split_remote(pos[0], &src_id, &src_path);
  e2 = split_remote(pos[1], &dst_id, &dst_path);
  if (e1 == -ENOMEM || e2 == -ENOMEM) {
    rc = fc_oom();
  } else if (src_id != NULL && dst_id != NULL) {
    fc_usage_error("cp", "both sides are in a sandbox; copy through a local file");
  } else if (src_id == NULL && dst_id == NULL) {
    fc_usage_error("cp", "one side must be ID:/abs/path (a sandbox id, a colon, an absolute path)");
  } else if (fc_check_id("cp", src_id != NULL ? src_id : dst_id) != 0) {
    rc = FC_EXIT_USAGE;
  } else if (*(src_id != NULL ? pos[1] : pos[0]) == '\0') {
    fc_usage_error("cp", "the local path is empty");
  } else if (recursive && strcmp(src_id != NULL ? pos[1] : pos[0], "-") == 0) {
    fc_usage_error("cp", "-r copies a directory tree: `-` (stdin or stdout) cannot be one");
  } else if (src_id != NULL) {
    /* -r on a file copies the file, as cp -r does. */
    rc = recursive ? fc_cp_tree_down(ctx, src_id, src_path, pos[1], verbose) : -ENOTDIR;
    if (rc == -ENOTDIR)
      rc = cp_download(ctx, src_id, src_path, pos[1]);
  } else {
    rc = recursive ? fc_cp_tree_up(ctx, pos[0], dst_id, dst_path, verbose) : -ENOTDIR;
    if (rc == -ENOTDIR)
      rc = cp_upload(ctx, pos[0], dst_id, dst_path);
  }
  free(src_id);
  free(dst_id);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* ps                                                                      */

static const char ps_usage[] =
    "usage: fedctl ps ID\n"
    "\n"
    "Lists the processes started in sandbox ID through its agent (background\n"
    "processes, shells, running execs) that still run.\n"
    "\n"
    "  --json             print the API response verbatim\n";

/* argv joined by spaces; words with blanks or quotes single-quoted. */
static int join_argv(struct fr_buf *b, const json_t *argv) {
  const json_t *w;
  size_t i;
  int rc = 0;

  json_array_foreach(argv, i, w) {
    const char *s = json_is_string(w) ? json_string_value(w) : "?";
    if (i > 0)
      rc = fr_buf_putc(b, ' ');
    if (rc == 0 && (*s == '\0' || strpbrk(s, " \t\n'\"\\$`") != NULL)) {
      rc = fr_buf_putc(b, '\'');
      for (; rc == 0 && *s != '\0'; s++)
        rc = *s == '\'' ? fr_buf_puts(b, "'\\''") : fr_buf_putc(b, *s);
      if (rc == 0)
        rc = fr_buf_putc(b, '\'');
    } else if (rc == 0) {
      rc = fr_buf_puts(b, s);
    }
  }
  return rc;
}

int fc_cmd_ps(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fc_table t;
  struct fr_buf path, cmd;
  const json_t *arr, *p;
  const char *val, *id = NULL;
  int opt, rc = FC_EXIT_USAGE;
  size_t i;

  fc_args_init(&a, ctx, "ps", no_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(ps_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    if (id != NULL)
      return fc_usage_error("ps", "unexpected argument '%s'", val);
    id = val;
  }
  if (id == NULL)
    return fc_usage_error("ps", "missing sandbox ID");
  if (fc_check_id("ps", id) != 0)
    return FC_EXIT_USAGE;
  fc_resp_init(&r);
  fc_table_init(&t, 4);
  fr_buf_init(&path);
  fr_buf_init(&cmd);
  if (fc_sandbox_path(&path, id, "/processes") != 0) {
    rc = fc_oom();
    goto done;
  }
  if ((rc = fc_call(ctx, "GET", path.data, NULL, FC_CALL_TIMEOUT_S, &r)) != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  arr = json_object_get(r.json, "processes");
  if (!json_is_array(arr)) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  fc_table_add(&t, "PID");
  fc_table_add(&t, "TAG");
  fc_table_add(&t, "WORKDIR");
  fc_table_add(&t, "COMMAND");
  json_array_foreach(arr, i, p) {
    fr_buf_reset(&cmd);
    if (fc_table_addf(&t, "%" PRId64, fc_jint(p, "pid", -1)) != 0 ||
        fc_table_add(&t, fc_jstr(p, "tag", "-")) != 0 || fc_table_add(&t, fc_jstr(p, "workdir", "-")) != 0 ||
        join_argv(&cmd, json_object_get(p, "argv")) != 0 || fc_table_add(&t, cmd.data ? cmd.data : "") != 0) {
      rc = fc_oom();
      goto done;
    }
  }
  fc_table_print(&t, stdout);
done:
  fr_buf_free(&cmd);
  fr_buf_free(&path);
  fc_table_close(&t);
  fc_resp_close(&r);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* kill                                                                    */

static const char kill_usage[] =
    "usage: fedctl kill ID PID [-s SIGNAL]\n"
    "\n"
    "Sends SIGNAL (default SIGTERM) to process PID of sandbox ID and its\n"
    "whole process group (PIDs as `fedctl ps` shows them). SIGNAL is a name\n"
    "(TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT, with or without\n"
    "SIG) or a number from 1 to 64.\n"
    "\n"
    "  -s, --signal SIG   the signal to send\n";

enum { K_SIGNAL = 1 };

static const struct fc_opt kill_opts[] = {{"signal", 's', 1, K_SIGNAL}, {NULL, 0, 0, 0}};

int fc_cmd_kill(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fr_buf path;
  const char *val, *id = NULL, *pid_s = NULL, *sig = "SIGTERM";
  json_t *body = NULL;
  int64_t pid, num;
  int opt, rc = FC_EXIT_USAGE;

  fc_args_init(&a, ctx, "kill", kill_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(kill_usage, stdout);
      return FC_EXIT_OK;
    case FC_ARG_ERR:
      return FC_EXIT_USAGE;
    case K_SIGNAL:
      sig = val;
      break;
    case FC_ARG_POS:
      if (id == NULL)
        id = val;
      else if (pid_s == NULL)
        pid_s = val;
      else
        return fc_usage_error("kill", "unexpected argument '%s'", val);
      break;
    }
  }
  if (id == NULL || pid_s == NULL)
    return fc_usage_error("kill", "give the sandbox ID and the PID (fedctl kill ID PID)");
  if (fc_check_id("kill", id) != 0)
    return FC_EXIT_USAGE;
  if (fc_parse_int("kill", "PID", pid_s, 1, INT32_MAX, &pid) != 0)
    return FC_EXIT_USAGE;
  if (*sig >= '0' && *sig <= '9') {
    if (fc_parse_int("kill", "--signal", sig, 1, 64, &num) != 0)
      return FC_EXIT_USAGE;
    body = json_pack("{s:I}", "signal", (json_int_t)num);
  } else if (*sig == '\0') {
    return fc_usage_error("kill", "--signal needs a name or a number");
  } else {
    /* The router knows which names it accepts and says so. */
    json_t *name = json_string(sig);
    if (name == NULL)
      return fc_usage_error("kill", "--signal is not valid UTF-8");
    body = json_pack("{s:o}", "signal", name);
  }
  fc_resp_init(&r);
  fr_buf_init(&path);
  if (body == NULL || fc_sandbox_path(&path, id, "/processes/") != 0 ||
      fr_buf_printf(&path, "%" PRId64 "/signal", pid) != 0) {
    rc = fc_oom();
    goto done;
  }
  rc = fc_call(ctx, "POST", path.data, body, FC_CALL_TIMEOUT_S, &r);
  if (rc == FC_EXIT_OK && ctx->json)
    fc_print_body(&r);
done:
  fr_buf_free(&path);
  fc_resp_close(&r);
  json_decref(body);
  return rc;
}
