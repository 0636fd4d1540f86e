/*
 * fedrouter — reading libconfig trees with errors users can act on.
 *
 * The router config and the policy files are both libconfig files and
 * report their first error the same way: the file, the line and
 * "<setting path>: <what is wrong>". The loaders embed a struct fr_cfgread
 * that points at their own error record and call these helpers.
 *
 * The loaders go on after an error where the rest can still be checked
 * (the next key, the next list element, the next section), so a check
 * reports every error in one run: the record keeps the first, and an
 * optional <on_error> hears each one.
 */
#ifndef FR_CFGREAD_H
#define FR_CFGREAD_H

#include <libconfig.h>
#include <stddef.h>

/* Hears one error: <file>, <line> (0: none) and "<path>: <what>". */
typedef void (*fr_cfg_error_cb)(void *arg, const char *file, int line, const char *msg);

struct fr_cfgread {
  const char *path;   /* the main file as given: used in messages */
  const char *dir;    /* resolves relative @include names; NULL: as libconfig gives them */
  char *file;         /* the error record: file, line and message */
  size_t file_size;
  int *line;
  char *msg;
  size_t msg_size;
  int count;          /* errors recorded so far */
  /* Called for every error (NULL: none), after the record holds the first. */
  fr_cfg_error_cb on_error;
  void *on_error_arg;
};

/* The first negative of <rc> and <next>, the error a loader that goes on
 * returns in the end. */
static inline int fr_cfg_first(int rc, int next) {
  return rc < 0 ? rc : next;
}

/* A reader for main file <p> that records into <e>, any struct with
 * char file[], int line and char msg[] (fr_config_error, fr_policy_error). */
#define FR_CFGREAD_FOR(e, p) \
  ((struct fr_cfgread){(p), NULL, (e)->file, sizeof((e)->file), &(e)->line, (e)->msg, sizeof((e)->msg), \
                       0, NULL, NULL})

/* "a string", "an integer", ... for messages. */
const char *fr_cfg_type_name(int type);

/* Source line of <s>, 0 for none. */
int fr_cfg_line(const config_setting_t *s);

/* The dotted path of <s> ("clusters.[1].cost"), then ".<key>" when <key>
 * is given: libconfig's own syntax, so it can be pasted into config_lookup(). */
void fr_cfg_setting_path(const config_setting_t *s, const char *key, char *buf, size_t size);

/* Sets the error's file to <file>, libconfig's name for a source file
 * (NULL: the main one). */
void fr_cfg_set_error_file(struct fr_cfgread *c, const char *file);

/* Records an error about <s> ("<path>: <fmt...>") and returns -EINVAL.
 * The record keeps the first error; <on_error> hears every one. */
__attribute__((format(printf, 3, 4)))
int fr_cfg_bad(struct fr_cfgread *c, const config_setting_t *s, const char *fmt, ...);

/* The same about member <key> missing from <group>. */
__attribute__((format(printf, 4, 5)))
int fr_cfg_missing(struct fr_cfgread *c, const config_setting_t *group, const char *key,
                   const char *fmt, ...);

/* Records "out of memory" and returns -ENOMEM. */
int fr_cfg_oom(struct fr_cfgread *c);

/* Typed getters. Each returns 0 (with NULL in <*out> when the key is
 * absent and allowed to be) or a negative errno after recording the error. */

/* The group <key> of <parent>. */
int fr_cfg_get_group(struct fr_cfgread *c, const config_setting_t *parent, const char *key,
                     const config_setting_t **out);

/* The list of groups <key> of <parent>; an empty array "[]" is an empty list. */
int fr_cfg_get_list(struct fr_cfgread *c, const config_setting_t *parent, const char *key,
                    const config_setting_t **out);

/* The number <key> of <group>, an integer or a float, into <*out>, which
 * keeps its value when the key is absent. A quoted number or any other
 * type is an error. <setting> (optional) gets the setting, NULL when
 * absent: the caller checks the range and reports on it (config and
 * policy word their ranges differently). */
int fr_cfg_get_number(struct fr_cfgread *c, const config_setting_t *group, const char *key,
                      double *out, const config_setting_t **setting);

/* The non-empty string <key> of <group>, borrowed from the tree; an error
 * when absent and <required> (<what> completes the "missing" message).
 * <setting> (optional) gets the setting, NULL when absent. */
int fr_cfg_get_string(struct fr_cfgread *c, const config_setting_t *group, const char *key,
                      int required, const char *what, const char **out,
                      const config_setting_t **setting);

#endif
