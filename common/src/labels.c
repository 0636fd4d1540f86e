/* labels.c - Kubernetes label syntax, label selectors and field selectors.
 *
 * The label selector lexer and parser follow k8s.io/apimachinery
 * pkg/labels/selector.go token for token, so that what a real API server
 * accepts we accept, with the same error texts. Field selectors follow
 * pkg/fields/selector.go (terms split on unescaped ',', values may escape
 * '\\', ',' and '=').
 *
 * Parsing copies everything it keeps, so a selector never borrows <text>.
 * Matching walks a flat array of requirements and allocates nothing: it runs
 * for every watch event times every watcher.
 */
#include "fr/labels.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

/* Lengths from k8s.io/apimachinery/pkg/util/validation. */
#define NAME_MAX_LEN 63
#define SUBDOMAIN_MAX_LEN 253

/* ---- label syntax ---- */

static bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool is_lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], non-empty. */
static bool name_chars_ok(const char *s, size_t len) {
  if (len == 0 || !is_alnum(s[0]) || !is_alnum(s[len - 1]))
    return false;
  for (size_t i = 1; i + 1 < len; i++) {
    if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
      return false;
  }
  return true;
}

/* DNS-1123 subdomain: dot-separated labels of [a-z0-9-], each starting and
 * ending alphanumeric. */
static bool subdomain_chars_ok(const char *s, size_t len) {
  size_t start = 0;

  for (size_t i = 0; i <= len; i++) {
    if (i < len && s[i] != '.') {
      if (!is_lower_alnum(s[i]) && s[i] != '-')
        return false;
      continue;
    }
    if (i == start || !is_lower_alnum(s[start]) || !is_lower_alnum(s[i - 1]))
      return false;
    start = i + 1;
  }
  return true;
}

/* Returns why <key> is not a qualified name (Kubernetes' wording), or NULL. */
static const char *key_problem(const char *key) {
  const char *slash = strchr(key, '/'), *name = key;
  size_t len;

  if (slash != NULL) {
    size_t plen = (size_t)(slash - key);
    if (strchr(slash + 1, '/') != NULL)
      return "a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
             "and must start and end with an alphanumeric character, with an optional "
             "DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
    if (plen == 0)
      return "prefix part must be non-empty";
    if (plen > SUBDOMAIN_MAX_LEN)
      return "prefix part must be no more than 253 characters";
    if (!subdomain_chars_ok(key, plen))
      return "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
             "alphanumeric characters, '-' or '.', and must start and end with an "
             "alphanumeric character";
    name = slash + 1;
  }
  len = strlen(name);
  if (len == 0)
    return "name part must be non-empty";
  if (len > NAME_MAX_LEN)
    return "name part must be no more than 63 characters";
  if (!name_chars_ok(name, len))
    return "name part must consist of alphanumeric characters, '-', '_' or '.', and "
           "must start and end with an alphanumeric character";
  return NULL;
}

static const char *value_problem(const char *value) {
  size_t len = strlen(value);

  if (len > NAME_MAX_LEN)
    return "must be no more than 63 characters";
  if (len != 0 && !name_chars_ok(value, len))
    return "a valid label must be an empty string or consist of alphanumeric "
           "characters, '-', '_' or '.', and must start and end with an "
           "alphanumeric character";
  return NULL;
}

const char *fr_labels_get(const struct fr_label *v, size_t n, const char *key) {
  if (v == NULL || key == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    if (v[i].key != NULL && strcmp(v[i].key, key) == 0)
      return v[i].value;
  }
  return NULL;
}

int fr_label_key_valid(const char *key) {
  return key != NULL && key_problem(key) == NULL;
}

int fr_label_value_valid(const char *value) {
  return value != NULL && value_problem(value) == NULL;
}

/* ---- selector representation ---- */

enum op { OP_EQ, OP_NE, OP_IN, OP_NOTIN, OP_EXISTS, OP_NOT_EXISTS, OP_GT, OP_LT };

struct req {
  const char *key;
  const char *const *values; /* set when parsing completes */
  size_t first;              /* index into the value array while building */
  size_t nvalues;
  int64_t num; /* OP_GT / OP_LT operand */
  enum op op;
};

struct fr_selector {
  struct req *reqs;
  size_t n;
  const char **values;
  char *strings;
  /* Field selectors compare a missing field as "" (Kubernetes' fields.Set
   * semantics), so "spec.nodeName=" finds unscheduled pods. Labels do not. */
  bool missing_is_empty;
};

/* Growable arrays for one parse. String storage is sized once up front
 * (every kept string is a piece of the input plus a NUL) so pointers into
 * it stay valid; requirements refer to values by index until the end. */
struct builder {
  struct req *reqs;
  size_t nreqs, capreqs;
  const char **values;
  size_t nvalues, capvalues;
  char *strings;
  size_t used, cap;
};

static int builder_init(struct builder *b, size_t text_len) {
  memset(b, 0, sizeof(*b));
  if (text_len > (SIZE_MAX - 2) / 2)
    return -ENOMEM;
  b->cap = 2 * text_len + 2;
  b->strings = malloc(b->cap);
  return b->strings == NULL ? -ENOMEM : 0;
}

static void builder_free(struct builder *b) {
  free(b->reqs);
  free(b->values);
  free(b->strings);
}

/* Copies <len> bytes at <s> into string storage. Unescaping only shrinks,
 * so callers may copy first and unescape in place. */
static char *builder_str(struct builder *b, const char *s, size_t len) {
  char *p;

  if (len >= b->cap - b->used)
    return NULL; /* cannot happen given the sizing in builder_init */
  p = b->strings + b->used;
  memcpy(p, s, len);
  p[len] = '\0';
  b->used += len + 1;
  return p;
}

static struct req *builder_req(struct builder *b, const char *key, enum op op) {
  struct req *r;

  if (b->nreqs == b->capreqs) {
    size_t ncap = b->capreqs ? b->capreqs * 2 : 4;
    r = realloc(b->reqs, ncap * sizeof(*r));
    if (r == NULL)
      return NULL;
    b->reqs = r;
    b->capreqs = ncap;
  }
  r = &b->reqs[b->nreqs++];
  memset(r, 0, sizeof(*r));
  r->key = key;
  r->op = op;
  r->first = b->nvalues;
  return r;
}

static int builder_value(struct builder *b, struct req *r, const char *v) {
  if (b->nvalues == b->capvalues) {
    size_t ncap = b->capvalues ? b->capvalues * 2 : 8;
    const char **nv = realloc(b->values, ncap * sizeof(*nv));
    if (nv == NULL)
      return -ENOMEM;
    b->values = nv;
    b->capvalues = ncap;
  }
  b->values[b->nvalues++] = v;
  r->nvalues++;
  return 0;
}

/* The values of the requirement whose first value is at <first>. A
 * selector with no values at all ("a", "!a") has no array: NULL then, as
 * NULL + 0 is undefined behaviour in C (clang's UBSan reports it). */
static const char **values_at(const struct builder *b, size_t first) {
  return b->values != NULL ? b->values + first : NULL;
}

/* Hands the arrays over to a new selector; <b> is empty afterwards. */
static int builder_finish(struct builder *b, bool missing_is_empty, struct fr_selector **out) {
  struct fr_selector *sel = calloc(1, sizeof(*sel));

  if (sel == NULL)
    return -ENOMEM;
  for (size_t i = 0; i < b->nreqs; i++)
    b->reqs[i].values = values_at(b, b->reqs[i].first);
  sel->reqs = b->reqs;
  sel->n = b->nreqs;
  sel->values = b->values;
  sel->strings = b->strings;
  sel->missing_is_empty = missing_is_empty;
  memset(b, 0, sizeof(*b));
  *out = sel;
  return 0;
}

static void PRINTF_LIKE(3, 4) set_err(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;

  if (err == NULL || errlen == 0)
    return;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* Strict base-10 int64, as Go's strconv.ParseInt(s, 10, 64). */
static bool parse_int64(const char *s, int64_t *out) {
  bool neg = false;
  uint64_t v = 0, limit;

  if (*s == '+' || *s == '-')
    neg = *s++ == '-';
  if (*s == '\0')
    return false;
  limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; *s != '\0'; s++) {
    unsigned d = (unsigned)(*s - '0');
    if (d > 9 || v > (limit - d) / 10)
      return false;
    v = v * 10 + d;
  }
  *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  return true;
}

/* ---- label selector lexer (pkg/labels/lexer) ---- */

enum tok {
  T_END,
  T_ID,
  T_IN,
  T_NOTIN,
  T_EQ,
  T_EQEQ,
  T_NE,
  T_NOT,
  T_GT,
  T_LT,
  T_OPEN,
  T_CLOSE,
  T_COMMA,
};

struct token {
  enum tok t;
  const char *s; /* literal in the input, for identifiers and messages */
  size_t len;
};

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_special(char c) {
  return c == '=' || c == '!' || c == '(' || c == ')' || c == ',' || c == '>' || c == '<';
}

static struct token lex(const char **pp) {
  const char *p = *pp;
  struct token tk;

  while (is_space(*p))
    p++;
  tk.s = p;
  tk.len = 1;
  switch (*p) {
  case '\0':
    tk.t = T_END;
    tk.len = 0;
    break;
  /* Kubernetes scans the longest run of symbols that forms a token; the
   * only two-character ones are "==" and "!=". */
  case '=':
    tk.t = p[1] == '=' ? T_EQEQ : T_EQ;
    tk.len = p[1] == '=' ? 2 : 1;
    break;
  case '!':
    tk.t = p[1] == '=' ? T_NE : T_NOT;
    tk.len = p[1] == '=' ? 2 : 1;
    break;
  case '(':
    tk.t = T_OPEN;
    break;
  case ')':
    tk.t = T_CLOSE;
    break;
  case ',':
    tk.t = T_COMMA;
    break;
  case '>':
    tk.t = T_GT;
    break;
  case '<':
    tk.t = T_LT;
    break;
  default:
    while (*p != '\0' && !is_special(*p) && !is_space(*p))
      p++;
    tk.len = (size_t)(p - tk.s);
    if (tk.len == 2 && memcmp(tk.s, "in", 2) == 0)
      tk.t = T_IN;
    else if (tk.len == 5 && memcmp(tk.s, "notin", 5) == 0)
      tk.t = T_NOTIN;
    else
      tk.t = T_ID;
    *pp = p;
    return tk;
  }
  *pp = p + tk.len;
  return tk;
}

/* ---- label selector parser (pkg/labels/selector.go Parser) ---- */

struct parser {
  const char *pos; /* input after <cur> */
  struct token cur;
  struct builder *b;
  char *err;
  size_t errlen;
  bool in_req; /* errors inside a requirement get Kubernetes' prefix */
};

/* In the "values" context Kubernetes reads the keywords in/notin as plain
 * identifiers, so "in in (in)" is a valid selector. */
static enum tok peek(const struct parser *p, bool values) {
  if (values && (p->cur.t == T_IN || p->cur.t == T_NOTIN))
    return T_ID;
  return p->cur.t;
}

static struct token consume(struct parser *p, bool values) {
  struct token tk = p->cur;

  tk.t = peek(p, values);
  p->cur = lex(&p->pos);
  return tk;
}

static int PRINTF_LIKE(2, 3) fail(struct parser *p, const char *fmt, ...) {
  char msg[512];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  set_err(p->err, p->errlen, "%s%s", p->in_req ? "unable to parse requirement: " : "", msg);
  return -EINVAL;
}

/* Literal widths for "%.*s"; an absurdly long token is cut in the message
 * only. */
static int lit_len(const struct token *tk) {
  return tk->len > 256 ? 256 : (int)tk->len;
}

static int fail_found(struct parser *p, const struct token *tk, const char *expected) {
  return fail(p, "found '%.*s'%s", lit_len(tk), tk->s, expected);
}

static int add_value(struct parser *p, struct req *r, const struct token *tk) {
  const char *v = tk ? builder_str(p->b, tk->s, tk->len) : "";

  if (v == NULL || builder_value(p->b, r, v) != 0)
    return -ENOMEM;
  return 0;
}

/* "(" [values] ")": empty entries mean "", as in "(a,,b)" and "()". */
static int parse_values(struct parser *p, struct req *r) {
  struct token tk = consume(p, true);
  int rc;

  if (tk.t != T_OPEN)
    return fail_found(p, &tk, " expected: '('");
  switch (peek(p, true)) {
  case T_CLOSE:
    consume(p, true);
    return add_value(p, r, NULL);
  case T_ID:
  case T_COMMA:
    break;
  default:
    return fail_found(p, &p->cur, ", expected: ',', ')' or identifier");
  }
  for (;;) {
    tk = consume(p, true);
    if (tk.t == T_ID) {
      if ((rc = add_value(p, r, &tk)) != 0)
        return rc;
      if (peek(p, true) == T_CLOSE)
        break;
      if (peek(p, true) != T_COMMA)
        return fail_found(p, &p->cur, ", expected: ',' or ')'");
    } else if (tk.t == T_COMMA) {
      if (r->nvalues == 0 && (rc = add_value(p, r, NULL)) != 0)
        return rc; /* "(," */
      if (peek(p, true) == T_CLOSE) {
        if ((rc = add_value(p, r, NULL)) != 0)
          return rc; /* ",)" */
        break;
      }
      if (peek(p, true) == T_COMMA) {
        consume(p, true);
        if ((rc = add_value(p, r, NULL)) != 0)
          return rc; /* ",," */
      }
    } else {
      return fail_found(p, &tk, ", expected: ',', or identifier");
    }
  }
  consume(p, true); /* the ')' seen above */
  return 0;
}

/* One value after =, ==, !=, >, <; nothing before ',' or the end means "". */
static int parse_exact_value(struct parser *p, struct req *r) {
  struct token tk;

  if (peek(p, true) == T_END || peek(p, true) == T_COMMA)
    return add_value(p, r, NULL);
  tk = consume(p, true);
  if (tk.t != T_ID)
    return fail_found(p, &tk, ", expected: identifier");
  return add_value(p, r, &tk);
}

/* Checks what NewRequirement checks once the values are known. */
static int validate_requirement(struct parser *p, struct req *r) {
  const char *const *vals = values_at(p->b, r->first);

  if ((r->op == OP_GT || r->op == OP_LT) && !parse_int64(vals[0], &r->num))
    return fail(p, "for 'Gt', 'Lt' operators, the value must be an integer");
  for (size_t i = 0; i < r->nvalues; i++) {
    const char *why = value_problem(vals[i]);
    if (why != NULL)
      return fail(p, "invalid label value: \"%.256s\": at key: \"%s\": %s", vals[i], r->key, why);
  }
  return 0;
}

static int parse_requirement(struct parser *p) {
  struct token tk = consume(p, true);
  bool not_exists = false;
  const char *key, *why;
  struct req *r;
  enum op op;
  int rc;

  if (tk.t == T_NOT) {
    not_exists = true;
    tk = consume(p, true);
  }
  if (tk.t != T_ID)
    return fail_found(p, &tk, ", expected: identifier");
  key = builder_str(p->b, tk.s, tk.len);
  if (key == NULL)
    return -ENOMEM;
  if ((why = key_problem(key)) != NULL)
    return fail(p, "invalid label key \"%.256s\": %s", key, why);

  /* "!k" is complete whatever follows; the caller then insists on ',' or
   * the end, as Kubernetes does. */
  if (not_exists || peek(p, true) == T_END || peek(p, true) == T_COMMA)
    return builder_req(p->b, key, not_exists ? OP_NOT_EXISTS : OP_EXISTS) ? 0 : -ENOMEM;

  tk = consume(p, false);
  switch (tk.t) {
  case T_EQ:
  case T_EQEQ:
    op = OP_EQ;
    break;
  case T_NE:
    op = OP_NE;
    break;
  case T_IN:
    op = OP_IN;
    break;
  case T_NOTIN:
    op = OP_NOTIN;
    break;
  case T_GT:
    op = OP_GT;
    break;
  case T_LT:
    op = OP_LT;
    break;
  default:
    return fail_found(p, &tk, ", expected: in, notin, =, ==, !=, gt, lt");
  }
  if ((r = builder_req(p->b, key, op)) == NULL)
    return -ENOMEM;
  rc = op == OP_IN || op == OP_NOTIN ? parse_values(p, r) : parse_exact_value(p, r);
  if (rc == 0)
    rc = validate_requirement(p, r);
  return rc;
}

static int parse_label_selector(struct parser *p) {
  struct token tk;
  int rc;

  for (;;) {
    switch (peek(p, true)) {
    case T_END:
      return 0;
    case T_ID:
    case T_NOT:
      break;
    default:
      return fail_found(p, &p->cur, ", expected: !, identifier, or 'end of string'");
    }
    p->in_req = true;
    rc = parse_requirement(p);
    p->in_req = false;
    if (rc != 0)
      return rc;
    tk = consume(p, true);
    if (tk.t == T_END)
      return 0;
    if (tk.t != T_COMMA)
      return fail_found(p, &tk, ", expected: ',' or 'end of string'");
    if (peek(p, true) != T_ID && peek(p, true) != T_NOT)
      return fail_found(p, &p->cur, ", expected: identifier after ','");
  }
}

static int oom(char *err, size_t errlen) {
  set_err(err, errlen, "out of memory");
  return -ENOMEM;
}

int fr_selector_parse_labels(const char *text, struct fr_selector **out, char *err,
                             size_t errlen) {
  struct builder b;
  struct parser p;
  int rc;

  if (out == NULL)
    return -EINVAL;
  *out = NULL;
  if (text == NULL)
    text = "";
  if (builder_init(&b, strlen(text)) != 0)
    return oom(err, errlen);
  memset(&p, 0, sizeof(p));
  p.pos = text;
  p.cur = lex(&p.pos);
  p.b = &b;
  p.err = err;
  p.errlen = errlen;
  rc = parse_label_selector(&p);
  if (rc == 0)
    rc = builder_finish(&b, false, out);
  if (rc == -ENOMEM)
    oom(err, errlen);
  builder_free(&b);
  return rc;
}

/* ---- field selectors (pkg/fields/selector.go) ---- */

/* Unescapes a field selector value in place: "\\", "\," and "\=" stand for
 * themselves; a bare ',' or '=' or any other escape is an error. */
static int unescape_value(char *v, char *err, size_t errlen) {
  char *w = v;

  for (const char *r = v; *r != '\0'; r++) {
    if (*r == '\\') {
      r++;
      if (*r != '\\' && *r != ',' && *r != '=') {
        if (*r == '\0')
          set_err(err, errlen, "invalid field selector: invalid escape sequence: \\");
        else
          set_err(err, errlen, "invalid field selector: invalid escape sequence: \\%c", *r);
        return -EINVAL;
      }
    } else if (*r == ',' || *r == '=') {
      set_err(err, errlen, "invalid field selector: unescaped character in value: %c", *r);
      return -EINVAL;
    }
    *w++ = *r;
  }
  *w = '\0';
  return 0;
}

static bool field_known(const char *const *known, const char *f) {
  if (known == NULL)
    return true;
  for (; *known != NULL; known++) {
    if (strcmp(*known, f) == 0)
      return true;
  }
  return false;
}

static void unknown_field_err(const char *const *known, const char *f, char *err, size_t errlen) {
  size_t used;

  if (err == NULL || errlen == 0)
    return;
  set_err(err, errlen, "\"%.256s\" is not a known field selector: only ", f);
  for (size_t i = 0; known[i] != NULL; i++) {
    used = strlen(err);
    if (used + 1 >= errlen)
      return;
    snprintf(err + used, errlen - used, "%s\"%s\"", i ? ", " : "", known[i]);
  }
}

/* One term "<field><op><value>", <len> bytes at <s>. */
static int parse_field_term(struct builder *b, const char *whole, const char *s, size_t len,
                            const char *const *known, char *err, size_t errlen) {
  size_t i, oplen = 0;
  enum op op = OP_EQ;
  char *field, *value;
  struct req *r;
  int rc;

  /* First operator from the left, trying "!=" then "==" then "=" at each
   * position, like Kubernetes' splitTerm. */
  for (i = 0; i < len; i++) {
    if (s[i] == '!' && i + 1 < len && s[i + 1] == '=') {
      op = OP_NE;
      oplen = 2;
    } else if (s[i] == '=') {
      oplen = i + 1 < len && s[i + 1] == '=' ? 2 : 1;
    }
    if (oplen != 0)
      break;
  }
  if (oplen == 0) {
    set_err(err, errlen, "invalid selector: '%.256s'; can't understand '%.*s'", whole,
            len > 256 ? 256 : (int)len, s);
    return -EINVAL;
  }
  field = builder_str(b, s, i);
  value = builder_str(b, s + i + oplen, len - i - oplen);
  if (field == NULL || value == NULL)
    return -ENOMEM;
  if ((rc = unescape_value(value, err, errlen)) != 0)
    return rc;
  if (!field_known(known, field)) {
    unknown_field_err(known, field, err, errlen);
    return -EINVAL;
  }
  if ((r = builder_req(b, field, op)) == NULL)
    return -ENOMEM;
  return builder_value(b, r, value);
}

int fr_selector_parse_fields(const char *text, const char *const *known,
                             struct fr_selector **out, char *err, size_t errlen) {
  struct builder b;
  const char *term;
  int rc = 0;

  if (out == NULL)
    return -EINVAL;
  *out = NULL;
  if (text == NULL)
    text = "";
  if (builder_init(&b, strlen(text)) != 0)
    return oom(err, errlen);
  term = text;
  for (const char *p = text;; p++) {
    if (*p == '\\' && p[1] != '\0') {
      p++; /* an escaped ',' does not end the term */
      continue;
    }
    if (*p != ',' && *p != '\0')
      continue;
    /* Kubernetes skips empty terms, so "a=b,,c=d" and "" are fine. */
    if (p > term) {
      rc = parse_field_term(&b, text, term, (size_t)(p - term), known, err, errlen);
      if (rc != 0)
        break;
    }
    if (*p == '\0')
      break;
    term = p + 1;
  }
  if (rc == 0)
    rc = builder_finish(&b, true, out);
  if (rc == -ENOMEM)
    oom(err, errlen);
  builder_free(&b);
  return rc;
}

/* ---- matching ---- */

static bool has_value(const struct req *r, const char *v) {
  for (size_t i = 0; i < r->nvalues; i++) {
    if (strcmp(r->values[i], v) == 0)
      return true;
  }
  return false;
}

/* Kubernetes' Requirement.Matches: "!=" and "notin" hold for a missing key,
 * "=", "in", ">" and "<" need it present. */
static bool req_matches(const struct req *r, const char *v) {
  int64_t n;

  switch (r->op) {
  case OP_EQ:
  case OP_IN:
    return v != NULL && has_value(r, v);
  case OP_NE:
  case OP_NOTIN:
    return v == NULL || !has_value(r, v);
  case OP_EXISTS:
    return v != NULL;
  case OP_NOT_EXISTS:
    return v == NULL;
  case OP_GT:
    return v != NULL && parse_int64(v, &n) && n > r->num;
  case OP_LT:
    return v != NULL && parse_int64(v, &n) && n < r->num;
  }
  return false;
}

int fr_selector_matches(const struct fr_selector *sel, fr_selector_lookup_cb lookup,
                        const void *obj) {
  if (sel == NULL)
    return 1;
  for (size_t i = 0; i < sel->n; i++) {
    const struct req *r = &sel->reqs[i];
    const char *v = lookup != NULL ? lookup(obj, r->key) : NULL;

    if (v == NULL && sel->missing_is_empty)
      v = "";
    if (!req_matches(r, v))
      return 0;
  }
  return 1;
}

int fr_selector_empty(const struct fr_selector *sel) {
  return sel == NULL || sel->n == 0;
}

const char *fr_selector_exact(const struct fr_selector *sel, const char *key) {
  if (sel == NULL || key == NULL)
    return NULL;
  for (size_t i = 0; i < sel->n; i++) {
    const struct req *r = &sel->reqs[i];
    if (r->op == OP_EQ && strcmp(r->key, key) == 0)
      return r->values[0];
  }
  return NULL;
}

void fr_selector_free(struct fr_selector *sel) {
  if (sel == NULL)
    return;
  free(sel->reqs);
  free(sel->values);
  free(sel->strings);
  free(sel);
}
