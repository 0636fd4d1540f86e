/* fr/assert.h - invariants checked where they hold: state transitions,
 * ownership hand-offs, counts that must not go below zero (libuv asserts in
 * uv__io_start, curl has DEBUGASSERT, HAProxy BUG_ON).
 *
 * FR_ASSERT(cond) is on in the Debug build, which is also the sanitizer
 * build (ASan+UBSan, scripts/test's build-asan) and, through fr_options,
 * the fuzz build: there a broken invariant stops the process at once with
 * the file, line and condition, so every black-box suite, unit suite and
 * fuzzer run checks them for free. In release builds (NDEBUG) it compiles
 * to nothing and <cond> is not evaluated - it must have no side effect. Why
 * not keep them in release: the router serves every tenant from one
 * process, and a check of our own bookkeeping that fails there is better
 * logged by the code path that follows than turned into an outage for
 * all; the sanitizer and fuzz builds are where they earn their keep.
 * Conditions stay type-checked in release (behind a constant 0 &&), so
 * they cannot rot, and a helper used only in a check still counts as used.
 */
#ifndef FR_ASSERT_H
#define FR_ASSERT_H

#ifdef NDEBUG
#define FR_ASSERT(cond) ((void)(0 && (cond)))
#else
/* Prints "<file>:<line>: assertion failed: <expr>" to stderr and aborts. */
void fr_assert_fail(const char *file, int line, const char *expr) __attribute__((noreturn));
#define FR_ASSERT(cond) ((cond) ? (void)0 : fr_assert_fail(__FILE__, __LINE__, #cond))
#endif

#endif
