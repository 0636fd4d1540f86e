/* tar.c — a directory as a tar stream, both ways (GET and POST /tar).
 *
 * The writer is the connection's producer (agent.h), the reader its body
 * sink.
 *
 * GET /tar?path=/dir[&gzip=1]: the tree under /dir as a POSIX tar (ustar,
 * with pax headers for long names and sizes past 8 GiB), names relative to
 * /dir, produced while the socket takes it: one directory handle per level
 * of the walk, one 64 KiB read of one file at a time, and (gzip) one zlib
 * stream. Nothing is followed: symlinks are archived as symlinks, hard links
 * as separate files; fifos, sockets and devices are left out. The walk opens
 * every level with O_NOFOLLOW from its parent's handle, so a path swapped for
 * a symlink during the walk is not followed either.
 *
 * POST /tar?path=/dir[&max_bytes=N]: a tar (gzip recognised by its magic
 * bytes) unpacked into /dir, replacing what it held. The body is parsed as
 * it arrives into a fresh directory inside /dir (".fr-restore-..."); entries
 * are created one path component at a time from that directory's handle
 * without following symlinks, so nothing can be written outside it. Refused
 * (400, naming the entry): absolute names, ".." components, symlinks whose
 * target is absolute or leaves the archive's root, hard links to anything
 * not unpacked before, devices and fifos, a truncated or corrupt archive.
 * 413 when the files' bytes pass max_bytes (or the entries
 * UNTAR_MAX_ENTRIES). On any failure the fresh directory is removed and
 * /dir is as it was. Once the whole archive is in, /dir's old entries are
 * renamed into a second fresh directory, the new ones renamed into /dir,
 * and the old removed: /dir itself stays (it may be a mount point, which
 * cannot be renamed). Modes are kept (setuid/setgid only for root), owners
 * are not (files belong to the agent's user), mtimes are kept for files.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "agent.h"

#define TAR_BLOCK 512
#define TAR_CHUNK 65536
#define TAR_MAX_DEPTH 256
#define UNTAR_MAX_ENTRIES 1000000
#define UNTAR_MAX_META 65536 /* a pax header's or GNU long name's data */

/* ---------------------------------------------------------------------- */
/* the ustar header                                                        */

struct ustar {
  char name[100], mode[8], uid[8], gid[8], size[12], mtime[12], chksum[8], typeflag, linkname[100],
      magic[6], version[2], uname[32], gname[32], devmajor[8], devminor[8], prefix[155], pad[12];
};

static void octal(char *field, size_t len, uint64_t v) {
  /* len - 1 digits and a NUL */
  char tmp[32];
  snprintf(tmp, sizeof(tmp), "%0*" PRIo64, (int)(len - 1), v);
  memcpy(field, tmp, len - 1);
  field[len - 1] = '\0';
}

static void checksum(struct ustar *h) {
  const unsigned char *p = (const unsigned char *)h;
  unsigned sum = 0;
  memset(h->chksum, ' ', sizeof(h->chksum));
  for (size_t i = 0; i < TAR_BLOCK; i++)
    sum += p[i];
  snprintf(h->chksum, sizeof(h->chksum), "%06o", sum);
  h->chksum[7] = ' ';
}

static void header_fill(struct ustar *h, const char *name, char type, mode_t mode, uint64_t size,
                        int64_t mtime, const char *link) {
  memset(h, 0, sizeof(*h));
  snprintf(h->name, sizeof(h->name), "%.99s", name);
  octal(h->mode, sizeof(h->mode), mode & 07777);
  octal(h->uid, sizeof(h->uid), 0);
  octal(h->gid, sizeof(h->gid), 0);
  octal(h->size, sizeof(h->size), size < 077777777777ULL ? size : 0);
  octal(h->mtime, sizeof(h->mtime), mtime > 0 ? (uint64_t)mtime : 0);
  h->typeflag = type;
  if (link != NULL)
    snprintf(h->linkname, sizeof(h->linkname), "%.99s", link);
  memcpy(h->magic, "ustar", 6);
  memcpy(h->version, "00", 2);
  checksum(h);
}

/* One pax record "LEN key=value\n", LEN counting itself. */
static int pax_record(struct buf *b, const char *key, const char *val) {
  size_t body = strlen(key) + strlen(val) + 3, len = body + 1;
  char digits[24];
  while ((size_t)snprintf(digits, sizeof(digits), "%zu", len) + body != len)
    len = (size_t)snprintf(digits, sizeof(digits), "%zu", len) + body;
  return buf_printf(b, "%zu %s=%s\n", len, key, val);
}

/* ---------------------------------------------------------------------- */
/* GET: the writer                                                         */

struct frame {
  DIR *d;
  size_t rel_len; /* length of the relative path of this directory ("" + "/") */
};

struct tarw {
  struct producer prod;   /* the connection's producer: prod.c */
  bool gz;
  z_stream zs;
  bool zs_open;
  struct frame frames[TAR_MAX_DEPTH];
  int depth;
  char rel[4096]; /* relative path of the entry being written */
  int fd;         /* file being copied, -1 none */
  uint64_t left;  /* its bytes still to send */
  uint64_t pad;   /* zero bytes after it */
  bool end;       /* the trailer is out */
};

/* Lets go of what the walk holds (directory handles, the file, zlib). */
static void walk_close(struct tarw *tw) {
  for (int i = 0; i < tw->depth; i++)
    closedir(tw->frames[i].d);
  tw->depth = 0;
  if (tw->fd >= 0)
    close(tw->fd);
  tw->fd = -1;
  if (tw->zs_open)
    deflateEnd(&tw->zs);
  tw->zs_open = false;
}

static int tar_pump(struct producer *p);

static void tar_detach(struct producer *p, bool peer_gone) {
  (void)peer_gone;
  walk_close(container_of(p, struct tarw, prod));
}

static void tar_free(struct producer *p) {
  free(container_of(p, struct tarw, prod));
}

static const struct producer_ops tar_ops = {tar_pump, tar_detach, tar_free};

static int status_for(int err) {
  switch (err) {
  case ENOENT: return 404;
  case EACCES: case EPERM: case EROFS: return 403;
  case ENOSPC: case EDQUOT: return 507;
  case ENOTDIR: case EISDIR: case ENAMETOOLONG: case EINVAL: case ELOOP: return 400;
  default: return 500;
  }
}

/* Sends <n> bytes of the archive, through zlib when compressing. */
static int emit(struct tarw *tw, const void *data, size_t n, bool finish) {
  struct conn *c = tw->prod.c;
  if (!tw->gz)
    return n ? http_stream_write(c, data, n) : 0;
  unsigned char out[TAR_CHUNK];
  tw->zs.next_in = (unsigned char *)data;
  tw->zs.avail_in = (uInt)n;
  for (;;) {
    tw->zs.next_out = out;
    tw->zs.avail_out = sizeof(out);
    int rc = deflate(&tw->zs, finish ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_ERROR)
      return -EIO;
    size_t have = sizeof(out) - tw->zs.avail_out;
    if (have && http_stream_write(c, out, have) != 0)
      return -EPIPE;
    if (finish ? rc == Z_STREAM_END : tw->zs.avail_in == 0 && tw->zs.avail_out != 0)
      return 0;
  }
}

static int emit_header(struct tarw *tw, const char *name, char type, const struct stat *st, uint64_t size,
                       const char *link) {
  struct ustar h;
  bool long_name = strlen(name) > 99, long_link = link != NULL && strlen(link) > 99;
  bool big = size >= 077777777777ULL;
  if (long_name || long_link || big) {
    struct buf pax = {0};
    char num[32];
    if (long_name)
      pax_record(&pax, "path", name);
    if (long_link)
      pax_record(&pax, "linkpath", link);
    if (big) {
      snprintf(num, sizeof(num), "%" PRIu64, size);
      pax_record(&pax, "size", num);
    }
    header_fill(&h, "././@PaxHeader", 'x', 0644, buf_size(&pax), st->st_mtime, NULL);
    int rc = emit(tw, &h, sizeof(h), false);
    if (rc == 0)
      rc = emit(tw, pax.p + pax.off, buf_size(&pax), false);
    static const char zeros[TAR_BLOCK];
    if (rc == 0 && buf_size(&pax) % TAR_BLOCK)
      rc = emit(tw, zeros, TAR_BLOCK - buf_size(&pax) % TAR_BLOCK, false);
    buf_free(&pax);
    if (rc != 0)
      return rc;
  }
  header_fill(&h, name, type, st->st_mode, size, st->st_mtime, link);
  return emit(tw, &h, sizeof(h), false);
}

void tar_get(struct conn *c, const char *path, bool gz) {
  if (path[0] != '/') {
    http_error(c, 400, "path must be absolute: %s", path);
    return;
  }
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      http_error(c, 404, "path not found: %s", path);
    else if (e == ENOTDIR)
      http_error(c, 400, "not a directory: %s", path);
    else
      http_error(c, status_for(e), "open %s: %s", path, strerror(e));
    return;
  }
  struct tarw *tw = calloc(1, sizeof(*tw));
  DIR *d = tw ? fdopendir(fd) : NULL;
  if (d == NULL) {
    close(fd);
    free(tw);
    http_error(c, 503, "out of memory");
    return;
  }
  tw->fd = -1;
  tw->frames[0].d = d;
  tw->frames[0].rel_len = 0;
  tw->depth = 1;
  tw->gz = gz;
  if (gz) {
    if (deflateInit2(&tw->zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      walk_close(tw);
      free(tw);
      http_error(c, 503, "out of memory");
      return;
    }
    tw->zs_open = true;
  }
  http_stream_begin(c, 200, gz ? "application/gzip" : "application/x-tar", NULL);
  conn_set_producer(c, &tw->prod, &tar_ops);
  conn_service(c);
}

/* Ends the stream early: only a close tells the client the archive is cut
 * (the status line went out long ago). */
static int abort_stream(struct tarw *tw, const char *what, const char *name, int err) {
  log_msg("tar stream cut short: %s %s: %s", what, name, strerror(err));
  conn_close(tw->prod.c); /* detaches this producer: tar_detach lets go of the walk */
  return -1;
}

/* The next entry of the walk; 1 produced something, 0 the walk is over. */
static int next_entry(struct tarw *tw) {
  for (;;) {
    struct frame *f = &tw->frames[tw->depth - 1];
    errno = 0;
    struct dirent *de = readdir(f->d);
    if (de == NULL) {
      if (errno != 0)
        return abort_stream(tw, "readdir", tw->rel, errno);
      closedir(f->d);
      tw->depth--;
      if (tw->depth == 0)
        return 0;
      continue;
    }
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    int n = snprintf(tw->rel + f->rel_len, sizeof(tw->rel) - f->rel_len, "%s", de->d_name);
    if (n < 0 || (size_t)n + f->rel_len + 2 >= sizeof(tw->rel))
      return abort_stream(tw, "name too long", tw->rel, ENAMETOOLONG);
    size_t len = f->rel_len + (size_t)n;
    int dfd = dirfd(f->d);
    struct stat st;
    if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT)
        continue; /* gone since readdir */
      return abort_stream(tw, "stat", tw->rel, errno);
    }
    if (S_ISDIR(st.st_mode)) {
      if (tw->depth == TAR_MAX_DEPTH)
        return abort_stream(tw, "too deep", tw->rel, ELOOP);
      int fd = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      DIR *sub = fd >= 0 ? fdopendir(fd) : NULL;
      if (sub == NULL) {
        int e = errno;
        if (fd >= 0)
          close(fd);
        return abort_stream(tw, "open", tw->rel, e);
      }
      tw->rel[len] = '/';
      tw->rel[len + 1] = '\0';
      if (emit_header(tw, tw->rel, '5', &st, 0, NULL) != 0) {
        closedir(sub);
        return abort_stream(tw, "write", tw->rel, EPIPE);
      }
      tw->frames[tw->depth].d = sub;
      tw->frames[tw->depth].rel_len = len + 1;
      tw->depth++;
      return 1;
    }
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t tl = readlinkat(dfd, de->d_name, target, sizeof(target) - 1);
      if (tl < 0)
        return abort_stream(tw, "readlink", tw->rel, errno);
      target[tl] = '\0';
      if (emit_header(tw, tw->rel, '2', &st, 0, target) != 0)
        return abort_stream(tw, "write", tw->rel, EPIPE);
      return 1;
    }
    if (!S_ISREG(st.st_mode))
      continue; /* fifos, sockets, devices: not archived */
    int fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT)
        continue;
      return abort_stream(tw, "open", tw->rel, errno);
    }
    if (emit_header(tw, tw->rel, '0', &st, (uint64_t)st.st_size, NULL) != 0) {
      close(fd);
      return abort_stream(tw, "write", tw->rel, EPIPE);
    }
    tw->fd = fd;
    tw->left = (uint64_t)st.st_size;
    tw->pad = (TAR_BLOCK - tw->left % TAR_BLOCK) % TAR_BLOCK;
    return 1;
  }
}

static int tar_pump(struct producer *p) {
  struct tarw *tw = container_of(p, struct tarw, prod);
  struct conn *c = p->c;
  static const char zeros[TAR_CHUNK];
  if (tw->end)
    return 0;
  if (tw->fd >= 0) {
    char tmp[TAR_CHUNK];
    size_t want = tw->left < sizeof(tmp) ? (size_t)tw->left : sizeof(tmp);
    ssize_t n = 0;
    if (want > 0) {
      do {
        n = read(tw->fd, tmp, want);
      } while (n < 0 && errno == EINTR);
      if (n < 0)
        return abort_stream(tw, "read", tw->rel, errno);
      if (n == 0) {
        /* The file shrank since its header: the header's size is kept
         * (zeros), so the archive stays readable. */
        n = (ssize_t)want;
        memset(tmp, 0, want);
      }
      if (emit(tw, tmp, (size_t)n, false) != 0)
        return abort_stream(tw, "write", tw->rel, EPIPE);
      tw->left -= (uint64_t)n;
    }
    if (tw->left == 0) {
      if (tw->pad && emit(tw, zeros, (size_t)tw->pad, false) != 0)
        return abort_stream(tw, "write", tw->rel, EPIPE);
      close(tw->fd);
      tw->fd = -1;
    }
    return 1;
  }
  int rc = next_entry(tw);
  if (rc != 0)
    return rc;
  /* Two zero blocks end the archive. */
  tw->end = true;
  if (emit(tw, zeros, 2 * TAR_BLOCK, true) != 0)
    return abort_stream(tw, "write", "trailer", EPIPE);
  walk_close(tw);
  http_stream_end(c);
  return 1;
}

/* ---------------------------------------------------------------------- */
/* POST: the reader                                                        */

enum ustate { U_HEADER, U_DATA, U_META, U_PAD, U_END };

struct untar {
  struct body_sink sink;  /* the connection's body sink: sink.c */
  char target[4096];
  char tmpname[64];  /* the fresh directory inside target */
  int target_fd;     /* O_PATH of target */
  int tmp_fd;        /* the fresh directory */
  bool made_target;  /* target did not exist before */
  uint64_t max_bytes;
  uint64_t bytes;    /* file bytes written */
  uint64_t entries;
  /* decompression */
  bool sniffed, gz;
  z_stream zs;
  bool zs_open;
  /* parsing */
  enum ustate st;
  char block[TAR_BLOCK];
  size_t have;       /* bytes in block */
  int zero_blocks;
  uint64_t left;     /* data bytes of the current entry still to come */
  uint64_t pad;
  int out_fd;        /* file being written, -1 none */
  int64_t mtime;
  char type;
  struct buf meta;   /* pax or GNU long name data being read */
  char meta_type;
  char pax_path[4096], pax_link[4096];
  bool have_pax_path, have_pax_link, have_pax_size;
  uint64_t pax_size;
  char name[4096];   /* the current entry's name, for messages */
  bool failed;
};

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(p);
  return 0;
}

/* Removes <name> (a directory) of <target> and all it holds. */
static void remove_tree(const char *target, const char *name) {
  char p[4200];
  snprintf(p, sizeof(p), "%s/%s", target, name);
  nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Lets go of everything: what was unpacked too, unless it was swapped in
 * (nothing of a failed or abandoned unpack stays). */
static void untar_discard(struct untar *u) {
  if (u->out_fd >= 0)
    close(u->out_fd);
  u->out_fd = -1;
  if (u->tmp_fd >= 0) {
    close(u->tmp_fd);
    u->tmp_fd = -1;
    remove_tree(u->target, u->tmpname);
    if (u->made_target)
      rmdir(u->target);
  }
  if (u->target_fd >= 0)
    close(u->target_fd);
  u->target_fd = -1;
  if (u->zs_open)
    inflateEnd(&u->zs);
  u->zs_open = false;
  buf_free(&u->meta);
}

static int untar_feed(struct body_sink *s, const char *data, size_t n);
static void untar_finish(struct body_sink *s);

static void untar_free(struct body_sink *s) {
  struct untar *u = container_of(s, struct untar, sink);

  untar_discard(u);
  free(u);
}

static const struct body_sink_ops untar_ops = {untar_feed, untar_finish, untar_free};

/* Answers the upload with <status> and a message; the state goes (and
 * with it everything unpacked so far). */
static int untar_fail(struct untar *u, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int untar_fail(struct untar *u, int status, const char *fmt, ...) {
  struct conn *c = u->sink.c;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  untar_discard(u);
  u->failed = true;
  c->close_after = true; /* the rest of the body is not read */
  http_error(c, status, "%s", msg);
  return -1;
}

int untar_begin(struct conn *c, const char *path, uint64_t max_bytes) {
  struct stat st;
  if (path[0] != '/' || strcmp(path, "/") == 0) {
    http_error(c, 400, "path must be an absolute directory other than /: %s", path);
    return -EINVAL;
  }
  struct untar *u = calloc(1, sizeof(*u));
  if (u == NULL) {
    http_error(c, 503, "out of memory");
    return -ENOMEM;
  }
  u->target_fd = u->tmp_fd = u->out_fd = -1;
  snprintf(u->target, sizeof(u->target), "%s", path);
  u->max_bytes = max_bytes;
  if (stat(path, &st) != 0) {
    int rc = mkdir_p(path, 0755);
    if (rc != 0) {
      free(u);
      http_error(c, status_for(-rc), "mkdir %s: %s", path, strerror(-rc));
      return rc;
    }
    u->made_target = true;
  } else if (!S_ISDIR(st.st_mode)) {
    free(u);
    http_error(c, 400, "not a directory: %s", path);
    return -ENOTDIR;
  }
  static unsigned seq;
  snprintf(u->tmpname, sizeof(u->tmpname), ".fr-restore-%s-%u", c->a->nonce, ++seq);
  u->target_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (u->target_fd < 0 || mkdirat(u->target_fd, u->tmpname, 0700) != 0 ||
      (u->tmp_fd = openat(u->target_fd, u->tmpname, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
    int e = errno;
    if (u->target_fd >= 0 && u->tmp_fd < 0)
      unlinkat(u->target_fd, u->tmpname, AT_REMOVEDIR);
    if (u->made_target)
      rmdir(u->target);
    u->made_target = false;
    untar_discard(u);
    free(u);
    http_error(c, status_for(e), "cannot unpack into %s: %s", path, strerror(e));
    return -e;
  }
  conn_set_sink(c, &u->sink, &untar_ops);
  return 0;
}

/* Checks an archive name: relative, no ".." component, not empty. Strips
 * a leading "./" and trailing slashes in place. */
static bool name_ok(char *n) {
  while (n[0] == '.' && n[1] == '/')
    memmove(n, n + 2, strlen(n + 2) + 1);
  size_t l = strlen(n);
  while (l > 1 && n[l - 1] == '/')
    n[--l] = '\0';
  if (n[0] == '/' || l == 0)
    return false;
  for (const char *p = n; *p;) {
    size_t k = strcspn(p, "/");
    if (k == 2 && p[0] == '.' && p[1] == '.')
      return false;
    p += k;
    if (*p == '/')
      p++;
  }
  return true;
}

/* Whether symlink <target> at archive path <name> stays inside the root,
 * read as the kernel would with no other links: not absolute, never
 * climbing above the root. */
static bool link_inside(const char *name, const char *target) {
  int depth = 0;
  if (target[0] == '/' || target[0] == '\0')
    return false;
  for (const char *p = name; *p;) { /* the link's directory depth */
    size_t k = strcspn(p, "/");
    if (p[k] == '/')
      depth++;
    p += k;
    if (*p == '/')
      p++;
  }
  for (const char *p = target; *p;) {
    size_t k = strcspn(p, "/");
    if (k == 2 && p[0] == '.' && p[1] == '.') {
      if (--depth < 0)
        return false;
    } else if (!(k == 1 && p[0] == '.') && k > 0) {
      depth++;
    }
    p += k;
    if (*p == '/')
      p++;
  }
  return true;
}

/* Opens the directory holding <name> inside the fresh directory, making
 * missing ones, never following a symlink; sets *<base> to the last
 * component. An fd, or -errno. */
static int open_parent(struct untar *u, char *name, const char **base) {
  char *slash = strrchr(name, '/');
  int fd = openat(u->tmp_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  if (slash == NULL) {
    *base = name;
    return fd;
  }
  *slash = '\0';
  *base = slash + 1;
  char *save = NULL;
  for (char *comp = strtok_r(name, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
    int nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0 && errno == ENOENT) {
      if (mkdirat(fd, comp, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        close(fd);
        return -e;
      }
      nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    int e = errno;
    close(fd);
    if (nfd < 0)
      return -(e == ELOOP ? ENOTDIR : e);
    fd = nfd;
  }
  return fd;
}

static uint64_t parse_octal(const char *f, size_t n, bool *ok) {
  uint64_t v = 0;
  size_t i = 0;
  *ok = true;
  if ((unsigned char)f[0] & 0x80) { /* GNU base-256 */
    for (i = 1; i < n; i++)
      v = (v << 8) | (unsigned char)f[i];
    return v;
  }
  while (i < n && (f[i] == ' ' || f[i] == '\0'))
    i++;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; i++)
    v = v * 8 + (uint64_t)(f[i] - '0');
  for (; i < n; i++)
    if (f[i] != ' ' && f[i] != '\0')
      *ok = false;
  return v;
}

static bool header_valid(const struct ustar *h) {
  const unsigned char *p = (const unsigned char *)h;
  unsigned sum = 0;
  bool ok;
  for (size_t i = 0; i < TAR_BLOCK; i++)
    sum += (i >= 148 && i < 156) ? ' ' : p[i];
  return parse_octal(h->chksum, sizeof(h->chksum), &ok) == sum && ok;
}

static void parse_pax(struct untar *u) {
  const char *p = u->meta.p + u->meta.off, *end = p + buf_size(&u->meta);
  while (p < end) {
    char *sp;
    unsigned long len = strtoul(p, &sp, 10);
    if (sp == p || *sp != ' ' || len == 0 || len > (size_t)(end - p))
      return;
    const char *kv = sp + 1, *rec_end = p + len - 1; /* at the '\n' */
    const char *eq = memchr(kv, '=', (size_t)(rec_end - kv));
    if (eq != NULL) {
      size_t kl = (size_t)(eq - kv), vl = (size_t)(rec_end - eq - 1);
      if (kl == 4 && memcmp(kv, "path", 4) == 0 && vl < sizeof(u->pax_path)) {
        memcpy(u->pax_path, eq + 1, vl);
        u->pax_path[vl] = '\0';
        u->have_pax_path = true;
      } else if (kl == 8 && memcmp(kv, "linkpath", 8) == 0 && vl < sizeof(u->pax_link)) {
        memcpy(u->pax_link, eq + 1, vl);
        u->pax_link[vl] = '\0';
        u->have_pax_link = true;
      } else if (kl == 4 && memcmp(kv, "size", 4) == 0) {
        char num[32];
        if (vl < sizeof(num)) {
          memcpy(num, eq + 1, vl);
          num[vl] = '\0';
          u->pax_size = strtoull(num, NULL, 10);
          u->have_pax_size = true;
        }
      }
    }
    p += len;
  }
}

/* A header block is in u->block: starts the entry. 0, or -1 answered. */
static int start_entry(struct untar *u) {
  struct ustar *h = (struct ustar *)u->block;
  bool ok;
  char name[4096], link[4096];
  const char *base;
  if (!header_valid(h))
    return untar_fail(u, 400, "not a tar archive, or a corrupt header after %s",
                      u->name[0] ? u->name : "the start");
  uint64_t size = parse_octal(h->size, sizeof(h->size), &ok);
  if (!ok)
    return untar_fail(u, 400, "bad size field in the header after %s", u->name[0] ? u->name : "the start");
  char type = h->typeflag;
  if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
    if (size > UNTAR_MAX_META)
      return untar_fail(u, 400, "extended header of %" PRIu64 " bytes (at most %d)", size, UNTAR_MAX_META);
    u->meta_type = type;
    u->meta.off = u->meta.len = 0;
    u->left = size;
    u->pad = (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK;
    u->st = size ? U_META : (u->pad ? U_PAD : U_HEADER);
    return 0;
  }
  if (u->have_pax_size)
    size = u->pax_size;
  if (u->have_pax_path) {
    snprintf(name, sizeof(name), "%s", u->pax_path);
  } else if (h->prefix[0] && memcmp(h->magic, "ustar", 5) == 0) {
    snprintf(name, sizeof(name), "%.155s/%.100s", h->prefix, h->name);
  } else {
    snprintf(name, sizeof(name), "%.100s", h->name);
  }
  if (u->have_pax_link)
    snprintf(link, sizeof(link), "%s", u->pax_link);
  else
    snprintf(link, sizeof(link), "%.100s", h->linkname);
  u->have_pax_path = u->have_pax_link = u->have_pax_size = false;
  snprintf(u->name, sizeof(u->name), "%s", name);
  u->mtime = (int64_t)parse_octal(h->mtime, sizeof(h->mtime), &ok);
  mode_t mode = (mode_t)parse_octal(h->mode, sizeof(h->mode), &ok) & (geteuid() == 0 ? 07777 : 01777);
  u->type = type;
  u->left = (type == '0' || type == '\0' || type == '7') ? size : 0;
  u->pad = (TAR_BLOCK - u->left % TAR_BLOCK) % TAR_BLOCK;
  if (++u->entries > UNTAR_MAX_ENTRIES)
    return untar_fail(u, 413, "more than %d entries in the archive", UNTAR_MAX_ENTRIES);
  /* The root itself ("./") says nothing to unpack. */
  if (strcmp(name, ".") == 0 || strcmp(name, "./") == 0) {
    u->st = U_HEADER;
    return 0;
  }
  if (!name_ok(name))
    return untar_fail(u, 400, "unsafe entry %s: names must be relative, without '..'", u->name);
  if (u->left > 0 && u->max_bytes > 0 && u->bytes + u->left > u->max_bytes)
    return untar_fail(u, 413, "archive holds more than %" PRIu64 " bytes of files (at %s)", u->max_bytes,
                      u->name);
  int pfd = open_parent(u, name, &base);
  if (pfd < 0)
    return untar_fail(u, pfd == -ENOTDIR ? 400 : status_for(-pfd), "cannot unpack %s: %s%s", u->name,
                      strerror(-pfd), pfd == -ENOTDIR ? " (a parent is not a directory, or a symlink)" : "");
  int rc = 0;
  switch (type) {
  case '5':
    if (mkdirat(pfd, base, (mode & 07777) | 0700) != 0 && errno != EEXIST)
      rc = -errno;
    else {
      struct stat st;
      if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
        rc = -ENOTDIR;
    }
    break;
  case '0':
  case '\0':
  case '7':
    unlinkat(pfd, base, 0); /* a later entry of the same name wins */
    u->out_fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 07777);
    if (u->out_fd < 0)
      rc = -errno;
    else if (mode & 06000)
      fchmod(u->out_fd, mode & 07777); /* past the umask */
    break;
  case '2':
    if (!link_inside(u->name, link)) {
      close(pfd);
      return untar_fail(u, 400, "unsafe entry %s: symlink to %s leaves the directory", u->name, link);
    }
    unlinkat(pfd, base, 0);
    if (symlinkat(link, pfd, base) != 0)
      rc = -errno;
    break;
  case '1': {
    char src[4096];
    const char *sbase;
    snprintf(src, sizeof(src), "%s", link);
    if (!name_ok(src)) {
      close(pfd);
      return untar_fail(u, 400, "unsafe entry %s: hard link to %s", u->name, link);
    }
    int sfd = open_parent(u, src, &sbase);
    struct stat st;
    if (sfd < 0 || fstatat(sfd, sbase, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) {
      if (sfd >= 0)
        close(sfd);
      close(pfd);
      return untar_fail(u, 400, "unsafe entry %s: hard link to %s, which is not in the archive before it",
                        u->name, link);
    }
    unlinkat(pfd, base, 0);
    if (linkat(sfd, sbase, pfd, base, 0) != 0)
      rc = -errno;
    close(sfd);
    break;
  }
  default:
    close(pfd);
    return untar_fail(u, 400, "entry %s: type '%c' (device, fifo or unknown) is not unpacked", u->name,
                      type ? type : '0');
  }
  close(pfd);
  if (rc != 0)
    return untar_fail(u, status_for(-rc), "cannot unpack %s: %s", u->name, strerror(-rc));
  u->st = u->left ? U_DATA : (u->pad ? U_PAD : U_HEADER);
  if (u->st != U_DATA && u->out_fd >= 0) {
    close(u->out_fd);
    u->out_fd = -1;
  }
  return 0;
}

static int file_done(struct untar *u) {
  struct timespec ts[2] = {{u->mtime, 0}, {u->mtime, 0}};
  futimens(u->out_fd, ts);
  if (close(u->out_fd) != 0) {
    u->out_fd = -1;
    return untar_fail(u, status_for(errno), "cannot unpack %s: %s", u->name, strerror(errno));
  }
  u->out_fd = -1;
  return 0;
}

/* Parses <n> bytes of the (decompressed) archive. 0, or -1 answered. */
static int untar_bytes(struct untar *u, const char *d, size_t n) {
  while (n > 0) {
    size_t k;
    switch (u->st) {
    case U_END:
      return 0; /* anything after the end is ignored, as tar does */
    case U_HEADER:
      k = TAR_BLOCK - u->have < n ? TAR_BLOCK - u->have : n;
      memcpy(u->block + u->have, d, k);
      u->have += k;
      d += k;
      n -= k;
      if (u->have < TAR_BLOCK)
        break;
      u->have = 0;
      {
        static const char zero[TAR_BLOCK];
        if (memcmp(u->block, zero, TAR_BLOCK) == 0) {
          if (++u->zero_blocks == 2)
            u->st = U_END;
          break;
        }
      }
      u->zero_blocks = 0;
      if (start_entry(u) != 0)
        return -1;
      break;
    case U_META:
      k = u->left < n ? (size_t)u->left : n;
      if (buf_append(&u->meta, d, k) != 0)
        return untar_fail(u, 503, "out of memory");
      d += k;
      n -= k;
      u->left -= k;
      if (u->left == 0) {
        if (u->meta_type == 'x')
          parse_pax(u);
        else if (u->meta_type == 'L' || u->meta_type == 'K') {
          char *dst = u->meta_type == 'L' ? u->pax_path : u->pax_link;
          size_t l = buf_size(&u->meta);
          if (l >= sizeof(u->pax_path))
            return untar_fail(u, 400, "GNU long name over %zu bytes", sizeof(u->pax_path) - 1);
          memcpy(dst, u->meta.p + u->meta.off, l);
          dst[l] = '\0';
          dst[strnlen(dst, l)] = '\0';
          if (u->meta_type == 'L')
            u->have_pax_path = true;
          else
            u->have_pax_link = true;
        }
        u->st = u->pad ? U_PAD : U_HEADER;
      }
      break;
    case U_DATA:
      k = u->left < n ? (size_t)u->left : n;
      if (u->out_fd >= 0) {
        size_t w = 0;
        while (w < k) {
          ssize_t r = write(u->out_fd, d + w, k - w);
          if (r < 0 && errno == EINTR)
            continue;
          if (r < 0)
            return untar_fail(u, status_for(errno), "cannot unpack %s: %s", u->name, strerror(errno));
          w += (size_t)r;
        }
      }
      u->bytes += k;
      d += k;
      n -= k;
      u->left -= k;
      if (u->left == 0) {
        if (u->out_fd >= 0 && file_done(u) != 0)
          return -1;
        u->st = u->pad ? U_PAD : U_HEADER;
      }
      break;
    case U_PAD:
      k = u->pad < n ? (size_t)u->pad : n;
      d += k;
      n -= k;
      u->pad -= k;
      if (u->pad == 0)
        u->st = U_HEADER;
      break;
    }
  }
  return 0;
}

static int untar_feed(struct body_sink *s, const char *data, size_t n) {
  struct untar *u = container_of(s, struct untar, sink);
  if (u->failed)
    return -1;
  if (!u->sniffed) {
    /* gzip's magic bytes; a tar starts with a name. (A first read of one
     * byte could miss it: the body's first read holds more.) */
    u->sniffed = true;
    u->gz = n >= 2 && (unsigned char)data[0] == 0x1f && (unsigned char)data[1] == 0x8b;
    if (u->gz) {
      if (inflateInit2(&u->zs, 15 + 32) != Z_OK)
        return untar_fail(u, 503, "out of memory");
      u->zs_open = true;
    }
  }
  if (!u->gz)
    return untar_bytes(u, data, n);
  unsigned char out[TAR_CHUNK];
  u->zs.next_in = (unsigned char *)data;
  u->zs.avail_in = (uInt)n;
  while (u->zs.avail_in > 0 || u->zs.avail_out == 0) {
    u->zs.next_out = out;
    u->zs.avail_out = sizeof(out);
    int rc = inflate(&u->zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
      return untar_fail(u, 400, "bad gzip data: %s", u->zs.msg ? u->zs.msg : "inflate failed");
    size_t have = sizeof(out) - u->zs.avail_out;
    if (have && untar_bytes(u, (const char *)out, have) != 0)
      return -1;
    if (rc == Z_STREAM_END || (rc == Z_BUF_ERROR && have == 0))
      break;
  }
  return 0;
}

/* Moves every entry of directory <from> (fd) but <skip1>, <skip2> into
 * <to>. 0 or -errno. */
static int move_all(int from, int to, const char *skip1, const char *skip2) {
  int dfd = openat(from, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  struct dirent *de;
  int rc = 0;
  if (d == NULL) {
    rc = -errno;
    if (dfd >= 0)
      close(dfd);
    return rc;
  }
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 || strcmp(de->d_name, skip1) == 0 ||
        (skip2 && strcmp(de->d_name, skip2) == 0))
      continue;
    if (renameat(from, de->d_name, to, de->d_name) != 0) {
      rc = -errno;
      break;
    }
  }
  closedir(d);
  return rc;
}

static void untar_finish(struct body_sink *s) {
  struct untar *u = container_of(s, struct untar, sink);
  struct conn *c = s->c;
  if (u->failed)
    return;
  if (u->st != U_END) {
    /* A stream that ends without its two zero blocks was cut short. */
    untar_fail(u, 400, "archive truncated%s%s (no end-of-archive blocks)", u->name[0] ? " after " : "", u->name);
    return;
  }
  /* Swap: the old entries into a second fresh directory, the new ones in. */
  char oldname[80];
  snprintf(oldname, sizeof(oldname), "%s.old", u->tmpname);
  int oldfd = -1, rc;
  if (mkdirat(u->target_fd, oldname, 0700) != 0 ||
      (oldfd = openat(u->target_fd, oldname, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
    untar_fail(u, status_for(errno), "cannot replace %s: %s", u->target, strerror(errno));
    return;
  }
  rc = move_all(u->target_fd, oldfd, u->tmpname, oldname);
  if (rc == 0)
    rc = move_all(u->tmp_fd, u->target_fd, ".", NULL);
  if (rc != 0) {
    /* Put back what was moved out (renames on one filesystem; this
     * failing as well is not expected). */
    move_all(oldfd, u->target_fd, ".", NULL);
    close(oldfd);
    unlinkat(u->target_fd, oldname, AT_REMOVEDIR);
    untar_fail(u, status_for(-rc), "cannot replace %s: %s", u->target, strerror(-rc));
    return;
  }
  close(oldfd);
  remove_tree(u->target, oldname);
  close(u->tmp_fd);
  u->tmp_fd = -1; /* swapped in: it stays */
  unlinkat(u->target_fd, u->tmpname, AT_REMOVEDIR);
  json_t *res = json_pack("{s:s,s:I,s:I}", "path", u->target, "entries", (json_int_t)u->entries, "bytes",
                          (json_int_t)u->bytes);
  untar_discard(u);
  u->failed = true; /* answered: nothing more */
  http_respond_json(c, 200, res);
}
