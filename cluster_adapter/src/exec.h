/* exec.h - running a command in a sandbox (exec.c): through its agent, or
 * pods/exec, mapped to enum fr_exec_err.
 *
 * Above cluster.c, agent.c and proc.c; adapter.c forwards fr_adapter_exec
 * here.
 */
#ifndef FR_EXEC_H
#define FR_EXEC_H

#include "fr/adapter.h"

struct cluster;

/* fr_adapter_exec (fr/adapter.h). */
int exec__run(struct cluster *cl, const char *pod, const struct fr_exec_spec *spec, fr_exec_cb cb, void *arg);

#endif
