/* files.c — envd's /files (download and upload as byte streams) and the
 * filesystem.Filesystem Connect service (Stat, MakeDir, Move, ListDir,
 * Remove).
 *
 * Paths are absolute (relative ones are refused: the agent has no notion of
 * "the user's home" a caller could rely on). Downloads read 64 KiB at a time
 * only while the socket takes them; uploads write each piece of the body as
 * it arrives, so memory stays flat at any file size. A multipart upload is
 * parsed as a stream (multipart.c): only a delimiter's length of bytes is
 * ever carried from one read to the next.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

#define FILE_CHUNK 65536
#define LIST_MAX 100000

static int status_for(int err) {
  switch (err) {
  case ENOENT: return 404;
  case EACCES: case EPERM: case EROFS: return 403;
  case ENOSPC: case EDQUOT: return 507;
  case EFBIG: return 413;
  case ENOTDIR: case EISDIR: case ENAMETOOLONG: case EINVAL: return 400;
  default: return 500;
  }
}

/* ---- download ---- */

/* GET /files streaming a file: read FILE_CHUNK at a time while the socket
 * takes it (the connection's producer). */
struct download {
  struct producer prod;
  int fd; /* -1 once all was read */
  uint64_t left;
};

static int download_pump(struct producer *p);
static void download_detach(struct producer *p, bool peer_gone);
static void download_free(struct producer *p);
static const struct producer_ops download_ops = {download_pump, download_detach, download_free};

static const char *shown(const char *path, char buf[420]);

void files_get(struct conn *c, const char *path) {
  char b[420];

  if (path[0] != '/') {
    http_error(c, 400, "path must be absolute: %s", shown(path, b));
    return;
  }
  /* O_NONBLOCK: opening a FIFO must not wait for a writer */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      http_error(c, 404, "path not found: %s", shown(path, b));
    else
      http_error(c, status_for(e), "open %s: %s", shown(path, b), strerror(e));
    return;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    http_error(c, 400, "not a regular file: %s", shown(path, b));
    return;
  }
  http_body_begin(c, 200, "application/octet-stream", NULL, (uint64_t)st.st_size);
  if (st.st_size == 0) {
    close(fd);
    http_stream_end(c);
    conn_service(c);
    return;
  }
  struct download *d = malloc(sizeof(*d));
  if (d == NULL) {
    close(fd);
    conn_close(c); /* the head promised a length */
    return;
  }
  d->fd = fd;
  d->left = (uint64_t)st.st_size;
  conn_set_producer(c, &d->prod, &download_ops);
  conn_service(c);
}

static int download_pump(struct producer *p) {
  struct download *d = container_of(p, struct download, prod);
  struct conn *c = p->c;
  char tmp[FILE_CHUNK];
  size_t want = d->left < sizeof(tmp) ? (size_t)d->left : sizeof(tmp);
  ssize_t n;

  if (d->fd < 0)
    return 0;
  do {
    n = read(d->fd, tmp, want);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    /* The file shrank under us: the promised length cannot be kept, and
     * only a close tells the client the body is short. */
    log_msg("download cut short: %s", n == 0 ? "file shrank" : strerror(errno));
    conn_close(c);
    return -1;
  }
  http_stream_write(c, tmp, (size_t)n);
  d->left -= (uint64_t)n;
  if (d->left == 0) {
    close(d->fd);
    d->fd = -1;
    http_stream_end(c);
  }
  return 1;
}

static void download_detach(struct producer *p, bool peer_gone) {
  struct download *d = container_of(p, struct download, prod);

  (void)peer_gone;
  if (d->fd >= 0)
    close(d->fd);
  d->fd = -1;
}

static void download_free(struct producer *p) {
  free(container_of(p, struct download, prod));
}

/* ---- upload ----
 *
 * Each file of an upload is written under a temporary name in its
 * target's directory (".fr-upload-<nonce>-<n>", "-r" added when it will
 * replace a file; made with O_EXCL, so no name an existing file or link
 * has) and renamed over the target only once
 * the whole body has arrived: an upload that is refused (a write error, a
 * bad multipart body), cut (the client left; the body stalled: 408) or
 * over a limit leaves nothing behind, and a file it would have replaced is
 * untouched. A multipart upload renames its files together at the end. A
 * target that exists must be a regular file (or a link to one, which is
 * written through); a FIFO or device is refused, never opened.
 */

#define UPLOAD_MAX_FILES 1000

struct staged {
  char *tmp;    /* unlinked when the upload ends without renaming it; NULL:
                 * written in place (open_target says when) */
  char *target; /* what it is renamed to (a link's target, resolved) */
  char *path;   /* the path the client named: the answer's */
};

struct upload {
  struct body_sink sink; /* the request's body sink; sink.c its connection */
  bool multipart;
  struct mp_parser mp;
  char qpath[4096];
  bool have_qpath;
  int fd; /* the file being written, -1 between parts */
  struct staged *files;
  size_t nfiles, capfiles;
  size_t renamed; /* files[0..renamed) are in place (or discarded) */
  bool failed;    /* answered with an error: the rest of the body is ignored */
};

/* What an upload that did not finish left: its open file, its temporary
 * files. Done at once when it fails; again (nothing left) when freed. */
static void upload_discard(struct upload *up) {
  if (up->fd >= 0)
    close(up->fd);
  up->fd = -1;
  for (size_t i = up->renamed; i < up->nfiles; i++)
    if (up->files[i].tmp != NULL) /* else written in place */
      unlink(up->files[i].tmp);
  up->renamed = up->nfiles;
}

static void upload_free(struct upload *up) {
  if (up == NULL)
    return;
  upload_discard(up);
  for (size_t i = 0; i < up->nfiles; i++) {
    free(up->files[i].tmp);
    free(up->files[i].target);
    free(up->files[i].path);
  }
  free(up->files);
  free(up);
}

/* <path> for a message: whole characters, at most ~400 bytes. */
static const char *shown(const char *path, char buf[420]) {
  path_show(path, strlen(path), buf, 420);
  return buf;
}

/* Where an upload to <path> goes: *<target> (malloc'd) is <path>, or the
 * regular file a link at <path> points to. -EINVAL with a message when
 * something other than a regular file is there. */
static int resolve_target(const char *path, char **target, struct stat *st, bool *exists, char *msg,
                          size_t cap) {
  char b[420];

  *exists = false;
  *target = NULL;
  if (lstat(path, st) != 0) {
    if (errno != ENOENT) {
      int e = errno;
      snprintf(msg, cap, "stat %s: %s", shown(path, b), strerror(e));
      return -e;
    }
    *target = strdup(path);
    return *target ? 0 : -ENOMEM;
  }
  if (S_ISLNK(st->st_mode)) {
    *target = realpath(path, NULL);
    if (*target == NULL || stat(*target, st) != 0) {
      free(*target);
      *target = NULL;
      snprintf(msg, cap, "not a regular file: %s (a link to nothing)", shown(path, b));
      return -EINVAL;
    }
  }
  if (!S_ISREG(st->st_mode)) {
    free(*target);
    *target = NULL;
    snprintf(msg, cap, "not a regular file: %s", shown(path, b));
    return -EINVAL;
  }
  if (*target == NULL && (*target = strdup(path)) == NULL)
    return -ENOMEM;
  *exists = true;
  return 0;
}

/* A mount point (a file bind-mounted over another, /etc/hosts in a pod):
 * on another mount than its directory. */
static bool mount_point(const char *path) {
  char dir[4096];
  struct statx a, b;
  struct stat x, y;

  snprintf(dir, sizeof(dir), "%s", path);
  const char *d = dirname(dir);
  if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &a) == 0 &&
      statx(AT_FDCWD, d, 0, STATX_MNT_ID, &b) == 0 && (a.stx_mask & b.stx_mask & STATX_MNT_ID))
    return a.stx_mnt_id != b.stx_mnt_id;
  return stat(path, &x) == 0 && stat(d, &y) == 0 && x.st_dev != y.st_dev;
}

/* Begins the file <path> of the upload: its temporary file is open in
 * up->fd and staged. 0, or a negative errno with a message. */
static int open_target(struct conn *c, struct upload *up, const char *path, char *msg, size_t cap) {
  char dir[4096], b[420];
  struct staged f = {0};
  struct stat st;
  bool exists;
  int rc, fd;

  if (up->nfiles >= UPLOAD_MAX_FILES) {
    snprintf(msg, cap, "more than %d files in one upload: send them in several", UPLOAD_MAX_FILES);
    return -EINVAL;
  }
  snprintf(dir, sizeof(dir), "%s", path);
  rc = mkdir_p(dirname(dir), 0755);
  if (rc != 0) {
    snprintf(msg, cap, "create directory %s: %s", shown(dir, b), strerror(-rc));
    return rc;
  }
  rc = resolve_target(path, &f.target, &st, &exists, msg, cap);
  if (rc != 0)
    return rc;
  snprintf(dir, sizeof(dir), "%s", f.target);
  if (asprintf(&f.tmp, "%s/" UPLOAD_TMP_PREFIX "%s-%llu%s", dirname(dir), c->a->nonce,
               (unsigned long long)++c->a->next_upload_id, exists ? "-r" : "") < 0) {
    f.tmp = NULL;
    rc = -ENOMEM;
  }
  f.path = rc == 0 ? strdup(path) : NULL;
  if (rc == 0 && f.path == NULL)
    rc = -ENOMEM;
  if (rc == 0 && up->nfiles == up->capfiles) {
    size_t ncap = up->capfiles ? up->capfiles * 2 : 4;
    struct staged *nf = realloc(up->files, ncap * sizeof(*nf));
    if (nf == NULL)
      rc = -ENOMEM;
    else
      up->files = nf, up->capfiles = ncap;
  }
  /* O_NONBLOCK and O_NOFOLLOW: whatever appears under that name meanwhile
   * (a FIFO, a link), the open neither waits nor follows it. */
  fd = rc != 0 || (exists && mount_point(f.target))
           ? -1
           : open(f.tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK,
                  exists ? st.st_mode & 0777 : 0644);
  if (rc == 0 && fd < 0 && exists && (errno == EACCES || errno == EPERM || mount_point(f.target))) {
    /* No file can be made beside it (a directory we may not write), or
     * it is a mount point (a bind-mounted file such as /etc/hosts: a
     * rename over it is EBUSY): written in place, as envd does, so such
     * an upload is not all-or-nothing. */
    free(f.tmp);
    f.tmp = NULL;
    fd = open(f.target, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
      close(fd);
      fd = -1;
      errno = EINVAL;
    }
    exists = false; /* nothing to carry over */
  }
  if (rc == 0 && fd < 0) {
    rc = -errno;
    snprintf(msg, cap, "open %s: %s", shown(path, b), strerror(errno));
  }
  if (rc != 0) {
    if (rc == -ENOMEM)
      snprintf(msg, cap, "out of memory");
    free(f.tmp);
    free(f.target);
    free(f.path);
    return rc;
  }
  if (exists) {
    /* It replaces that file: it keeps its mode and, where we may, owner. */
    if (fchmod(fd, st.st_mode & 0777) != 0 ||
        ((st.st_uid != geteuid() || st.st_gid != getegid()) && fchown(fd, st.st_uid, st.st_gid) != 0))
      log_msg("upload: the mode or owner of %s is not kept: %s", shown(path, b), strerror(errno));
  }
  up->files[up->nfiles++] = f;
  up->fd = fd;
  return 0;
}

bool upload_temp_name(const struct agent *a, const char *name, bool *replaces) {
  size_t pl = strlen(UPLOAD_TMP_PREFIX), nl = strlen(a->nonce);
  const char *p = name + pl + nl + 1;

  if (strncmp(name, UPLOAD_TMP_PREFIX, pl) != 0 || strncmp(name + pl, a->nonce, nl) != 0 || name[pl + nl] != '-' ||
      *p < '0' || *p > '9')
    return false;
  while (*p >= '0' && *p <= '9')
    p++;
  *replaces = strcmp(p, "-r") == 0;
  return *p == '\0' || *replaces;
}

/* Ends the upload with an answer: nothing of it stays on disk. */
static void fail(struct upload *up, int err, const char *msg) {
  struct conn *c = up->sink.c;

  upload_discard(up);
  up->failed = true;
  if (err == -ENOMEM)
    http_error(c, 503, "out of memory");
  else
    http_error(c, status_for(-err), "%s", msg);
}

static int write_all(struct upload *up, const char *d, size_t n) {
  if (up->fd < 0)
    return 0; /* a part without a filename: skipped */
  while (n > 0) {
    ssize_t w = write(up->fd, d, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      char msg[512], b[420];
      int e = errno;
      snprintf(msg, sizeof(msg), "write %s: %s", shown(up->files[up->nfiles - 1].path, b), strerror(e));
      fail(up, -e, msg);
      return -1;
    }
    d += w;
    n -= (size_t)w;
  }
  return 0;
}

static int close_target(struct upload *up) {
  if (up->fd < 0)
    return 0;
  int rc = close(up->fd);
  up->fd = -1;
  if (rc != 0) {
    char msg[512], b[420];
    int e = errno;
    snprintf(msg, sizeof(msg), "close %s: %s", shown(up->files[up->nfiles - 1].path, b), strerror(e));
    fail(up, -e, msg);
    return -1;
  }
  return 0;
}

static int upload_feed(struct body_sink *s, const char *data, size_t n);
static void upload_finish(struct body_sink *s);
static void upload_sink_free(struct body_sink *s);
static const struct body_sink_ops upload_ops = {upload_feed, upload_finish, upload_sink_free};

int upload_begin(struct conn *c, const char *path) {
  struct upload *up = calloc(1, sizeof(*up));
  if (up == NULL) {
    http_error(c, 503, "out of memory");
    return -ENOMEM;
  }
  up->fd = -1;
  if (path) {
    if (path[0] != '/') {
      char b[420];
      upload_free(up);
      http_error(c, 400, "path must be absolute: %s", shown(path, b));
      return -EINVAL;
    }
    snprintf(up->qpath, sizeof(up->qpath), "%s", path);
    up->have_qpath = true;
  }
  const char *ct = c->req.content_type;
  if (strncasecmp(ct, "multipart/form-data", 19) == 0) {
    int rc = mp_init(&up->mp, ct);
    if (rc != 0) {
      upload_free(up);
      http_error(c, 400, rc == -ENOENT ? "multipart body without a boundary" : "bad multipart boundary");
      return -EINVAL;
    }
    up->multipart = true;
  } else {
    if (!up->have_qpath) {
      upload_free(up);
      http_error(c, 400, "path parameter required for a raw upload");
      return -EINVAL;
    }
    char msg[512];
    int rc = open_target(c, up, up->qpath, msg, sizeof(msg));
    if (rc != 0) {
      upload_free(up);
      http_error(c, rc == -ENOMEM ? 503 : status_for(-rc), "%s", msg);
      return rc;
    }
  }
  conn_set_sink(c, &up->sink, &upload_ops);
  return 0;
}

/* The multipart parser's sink: each part with a filename goes to the
 * query's path, or to its own absolute filename without one; a part
 * without a filename is skipped. */
static int part_begin(void *arg, const char *filename) {
  struct upload *up = arg;
  char msg[512], b[420];

  if (filename == NULL)
    return 0;
  const char *target = up->have_qpath ? up->qpath : filename;
  if (!path_valid(target, strlen(target))) {
    snprintf(msg, sizeof(msg), "invalid path %s: a path is UTF-8 text without NUL bytes", shown(target, b));
    fail(up, -EINVAL, msg);
    return -1;
  }
  if (target[0] != '/') {
    snprintf(msg, sizeof(msg), "path must be absolute: %s", shown(target, b));
    fail(up, -EINVAL, msg);
    return -1;
  }
  int rc = open_target(up->sink.c, up, target, msg, sizeof(msg));
  if (rc != 0) {
    fail(up, rc, msg);
    return -1;
  }
  return 0;
}

static int part_data(void *arg, const char *data, size_t n) {
  return write_all(arg, data, n);
}

static int part_end(void *arg) {
  return close_target(arg);
}

static const struct mp_sink part_sink = {part_begin, part_data, part_end};

static int upload_feed(struct body_sink *s, const char *data, size_t n) {
  struct upload *up = container_of(s, struct upload, sink);
  const char *err = NULL;

  if (up->failed)
    return -1;
  if (!up->multipart)
    return write_all(up, data, n);
  int rc = mp_feed(&up->mp, data, n, &part_sink, up, &err);
  if (rc == -EINVAL)
    fail(up, -EINVAL, err);
  return rc == 0 ? 0 : -1;
}

static void upload_finish(struct body_sink *s) {
  struct upload *up = container_of(s, struct upload, sink);
  struct conn *c = s->c;
  json_t *res;
  char msg[512], b[420], name[4096];

  if (up->failed)
    return;
  if (!up->multipart) {
    if (close_target(up) != 0)
      return;
  } else if (!mp_done(&up->mp)) {
    fail(up, -EINVAL, "multipart body ended before its closing delimiter");
    return;
  }
  if (up->nfiles == 0) {
    fail(up, -EINVAL, "no file part in the upload");
    return;
  }
  res = json_array();
  for (; up->renamed < up->nfiles; up->renamed++) {
    struct staged *f = &up->files[up->renamed];
    if (f->tmp != NULL && rename(f->tmp, f->target) != 0) {
      int e = errno;
      snprintf(msg, sizeof(msg), "rename into %s: %s", shown(f->path, b), strerror(e));
      json_decref(res);
      fail(up, -e, msg);
      return;
    }
    snprintf(name, sizeof(name), "%s", f->path);
    json_array_append_new(res, json_pack("{s:s,s:s,s:s}", "name", basename(name), "type", "file", "path", f->path));
  }
  if (json_array_size(res) == 0) {
    json_decref(res);
    http_error(c, 503, "out of memory");
    return;
  }
  http_respond_json(c, 200, res); /* may end the request: <up> is freed later, never here */
}

static void upload_sink_free(struct body_sink *s) {
  upload_free(container_of(s, struct upload, sink));
}

/* ---- filesystem.Filesystem ---- */

struct names {
  uid_t uid;
  gid_t gid;
  char user[64], group[64];
  bool have_u, have_g;
};

/* Name of an id from /etc/passwd or /etc/group (no NSS: static binary).
 * The sandbox may have made the file a FIFO: it is opened without waiting
 * and read only when it is a regular file. */
static void id_name(const char *file, unsigned id, char *out, size_t cap) {
  snprintf(out, cap, "%u", id);
  FILE *f = fopen_regular(file);
  if (f == NULL)
    return;
  char line[1024];
  while (fgets(line, sizeof(line), f)) {
    char *name = line, *p1 = strchr(line, ':');
    if (p1 == NULL)
      continue;
    char *p2 = strchr(p1 + 1, ':');
    if (p2 == NULL)
      continue;
    char *end;
    unsigned long v = strtoul(p2 + 1, &end, 10);
    if (end != p2 + 1 && *end == ':' && v == id) {
      *p1 = '\0';
      snprintf(out, cap, "%.63s", name);
      break;
    }
  }
  fclose(f);
}

static void perm_string(mode_t m, char out[11]) {
  out[0] = S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'L' : S_ISFIFO(m) ? 'p' : S_ISSOCK(m) ? 'S'
         : S_ISCHR(m) ? 'c' : S_ISBLK(m) ? 'D' : '-';
  const char *rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; i++)
    out[i + 1] = (m & (1u << (8 - i))) ? rwx[i] : '-';
  out[10] = '\0';
}

static json_t *entry_json(const char *path, const struct stat *st, struct names *nm) {
  char tmp[4096], perms[11], mtime[64], size[32];
  snprintf(tmp, sizeof(tmp), "%s", path);
  const char *type = S_ISDIR(st->st_mode) ? "FILE_TYPE_DIRECTORY"
                     : S_ISREG(st->st_mode) ? "FILE_TYPE_FILE"
                     : S_ISLNK(st->st_mode) ? "FILE_TYPE_SYMLINK" : "FILE_TYPE_UNSPECIFIED";
  perm_string(st->st_mode, perms);
  struct tm tm;
  gmtime_r(&st->st_mtim.tv_sec, &tm);
  size_t ml = strftime(mtime, sizeof(mtime), "%Y-%m-%dT%H:%M:%S", &tm);
  if (st->st_mtim.tv_nsec)
    snprintf(mtime + ml, sizeof(mtime) - ml, ".%09ldZ", (long)st->st_mtim.tv_nsec);
  else
    snprintf(mtime + ml, sizeof(mtime) - ml, "Z");
  if (!nm->have_u || nm->uid != st->st_uid) {
    nm->uid = st->st_uid;
    id_name("/etc/passwd", st->st_uid, nm->user, sizeof(nm->user));
    nm->have_u = true;
  }
  if (!nm->have_g || nm->gid != st->st_gid) {
    nm->gid = st->st_gid;
    id_name("/etc/group", st->st_gid, nm->group, sizeof(nm->group));
    nm->have_g = true;
  }
  /* int64 is a string in protobuf JSON */
  snprintf(size, sizeof(size), "%lld", (long long)st->st_size);
  json_t *e = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:s,s:s}", "name",
                        strcmp(path, "/") == 0 ? "/" : basename(tmp), "type", type, "path", path,
                        "size", size, "mode", (int)(st->st_mode & 07777), "permissions", perms,
                        "owner", nm->user, "group", nm->group, "modifiedTime", mtime);
  if (e && S_ISLNK(st->st_mode)) {
    char target[4096];
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n >= 0) {
      target[n] = '\0';
      json_object_set_new(e, "symlinkTarget", json_string(target));
    }
  }
  return e;
}

json_t *fs_entry_json(const char *path, int *err) {
  struct stat st;
  struct names nm = {0};
  if (lstat(path, &st) != 0) {
    *err = -errno;
    return NULL;
  }
  *err = 0;
  return entry_json(path, &st, &nm);
}

static const char *err_code(int err) {
  switch (err) {
  case -ENOENT: return "not_found";
  case -EACCES: case -EPERM: case -EROFS: return "permission_denied";
  case -EEXIST: case -ENOTEMPTY: return "already_exists";
  case -ENOSPC: return "resource_exhausted";
  case -ENOTDIR: case -EISDIR: case -EINVAL: case -ENAMETOOLONG: return "invalid_argument";
  case -EXDEV: return "failed_precondition";
  default: return "internal";
  }
}

static void fs_fail(struct conn *c, int err, const char *what, const char *path) {
  char b[420];

  if (err == -ENOENT)
    rpc_error(c, false, "not_found", "path not found: %s", shown(path, b));
  else
    rpc_error(c, false, err_code(err), "%s %s: %s", what, shown(path, b), strerror(-err));
}

const char *rpc_path(struct conn *c, json_t *req, const char *field, bool streaming) {
  json_t *j = json_object_get(req, field);
  const char *p = json_string_value(j);
  char b[420];

  if (p == NULL) {
    rpc_error(c, streaming, "invalid_argument", "%s must be an absolute path", field);
    return NULL;
  }
  if (!path_valid(p, json_string_length(j))) {
    path_show(p, json_string_length(j), b, sizeof(b));
    rpc_error(c, streaming, "invalid_argument", "invalid path %s: a path is UTF-8 text without NUL bytes", b);
    return NULL;
  }
  if (p[0] != '/' || strlen(p) >= 4096) {
    rpc_error(c, streaming, "invalid_argument", "%s must be an absolute path: %s", field, shown(p, b));
    return NULL;
  }
  return p;
}

static const char *abs_path(struct conn *c, json_t *req, const char *field) {
  return rpc_path(c, req, field, false);
}

static int list_dir(const char *dir, unsigned depth, unsigned level, json_t *arr,
                    struct names *nm) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return -errno;
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s%s%s", dir,
                         dir[strlen(dir) - 1] == '/' ? "" : "/", de->d_name) >= sizeof(path))
      continue;
    struct stat st;
    if (lstat(path, &st) != 0)
      continue; /* removed while we listed */
    if (json_array_size(arr) >= LIST_MAX) {
      rc = -E2BIG;
      break;
    }
    json_array_append_new(arr, entry_json(path, &st, nm));
    if (S_ISDIR(st.st_mode) && level + 1 < depth) {
      rc = list_dir(path, depth, level + 1, arr, nm);
      if (rc == -EACCES)
        rc = 0; /* an unreadable subdirectory is listed, not entered */
      if (rc != 0)
        break;
    }
  }
  closedir(d);
  return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  int rc = flag == FTW_DP ? rmdir(path) : unlink(path);
  return rc != 0 && errno != ENOENT ? -errno : 0;
}

void fs_rpc(struct conn *c, const char *method, json_t *req) {
  int err;
  if (strcmp(method, "Stat") == 0) {
    const char *path = abs_path(c, req, "path");
    if (path == NULL)
      return;
    json_t *e = fs_entry_json(path, &err);
    if (e == NULL)
      fs_fail(c, err, "stat", path);
    else
      http_respond_json(c, 200, json_pack("{s:o}", "entry", e));
  } else if (strcmp(method, "MakeDir") == 0) {
    const char *path = abs_path(c, req, "path");
    if (path == NULL)
      return;
    struct stat st;
    if (stat(path, &st) == 0) {
      if (S_ISDIR(st.st_mode))
        rpc_error(c, false, "already_exists", "directory already exists: %s", path);
      else
        rpc_error(c, false, "invalid_argument", "path already exists but is not a directory: %s", path);
      return;
    }
    err = mkdir_p(path, 0755);
    json_t *e = err == 0 ? fs_entry_json(path, &err) : NULL;
    if (e == NULL)
      fs_fail(c, err, "mkdir", path);
    else
      http_respond_json(c, 200, json_pack("{s:o}", "entry", e));
  } else if (strcmp(method, "Move") == 0) {
    const char *src = abs_path(c, req, "source");
    if (src == NULL)
      return;
    const char *dst = abs_path(c, req, "destination");
    if (dst == NULL)
      return;
    struct stat st;
    if (lstat(src, &st) != 0) {
      fs_fail(c, -errno, "move", src);
      return;
    }
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", dst);
    err = mkdir_p(dirname(dir), 0755);
    if (err == 0 && rename(src, dst) != 0)
      err = -errno;
    json_t *e = err == 0 ? fs_entry_json(dst, &err) : NULL;
    if (e == NULL)
      fs_fail(c, err, "move to", dst);
    else
      http_respond_json(c, 200, json_pack("{s:o}", "entry", e));
  } else if (strcmp(method, "ListDir") == 0) {
    const char *path = abs_path(c, req, "path");
    if (path == NULL)
      return;
    json_t *dj = json_object_get(req, "depth");
    json_int_t depth = json_is_integer(dj) ? json_integer_value(dj) : 1;
    if (dj && !json_is_integer(dj) && !json_is_null(dj)) {
      rpc_error(c, false, "invalid_argument", "depth must be an integer");
      return;
    }
    if (depth < 1)
      depth = 1;
    if (depth > 64)
      depth = 64;
    struct stat st;
    if (stat(path, &st) != 0) {
      fs_fail(c, -errno, "list", path);
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      rpc_error(c, false, "invalid_argument", "path is not a directory: %s", path);
      return;
    }
    json_t *arr = json_array();
    struct names nm = {0};
    err = list_dir(path, (unsigned)depth, 0, arr, &nm);
    if (err == -E2BIG) {
      json_decref(arr);
      /* Not worth retrying, unlike the other resource_exhausted answers. */
      rpc_error(c, false, "out_of_range", "more than %d entries under %s", LIST_MAX, path);
    } else if (err != 0) {
      json_decref(arr);
      fs_fail(c, err, "list", path);
    } else {
      http_respond_json(c, 200, json_pack("{s:o}", "entries", arr));
    }
  } else if (strcmp(method, "Remove") == 0) {
    const char *path = abs_path(c, req, "path");
    if (path == NULL)
      return;
    struct stat st;
    if (lstat(path, &st) != 0) {
      fs_fail(c, -errno, "remove", path);
      return;
    }
    if (strcmp(path, "/") == 0) {
      rpc_error(c, false, "invalid_argument", "refusing to remove /");
      return;
    }
    err = nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
    if (err != 0)
      fs_fail(c, err < 0 ? err : -EIO, "remove", path);
    else
      http_respond_json(c, 200, json_object());
  } else {
    rpc_error(c, false, "unimplemented", "filesystem.Filesystem/%s is not implemented by fedrouter-agent", method);
  }
}
