/* fr/assert.h - invariants the code relies on, checked where it is cheap
 * to find out (libuv's assert in uv__io_start, curl's DEBUGASSERT,
 * HAProxy's BUG_ON).
 *
 * FR_ASSERT(<cond>) states something that is true unless the code itself
 * is wrong: a state machine's transition is one of its diagram's, an
 * object handed over is not still held by its old owner, a counter kept
 * from events does not go below zero. It is not for input (input is
 * validated and answered with an error) and not for out-of-memory.
 *
 * When it is checked: in builds without NDEBUG (CMAKE_BUILD_TYPE=Debug,
 * which is also the sanitizer build) and in builds that define
 * FR_ASSERT_ON (the top-level CMakeLists.txt does for FR_SANITIZE and the
 * libFuzzer harnesses, so the fuzzers check them for free). A false <cond>
 * then prints "file:line: func: assertion failed: cond" to stderr and
 * aborts, so the sanitizer build stops with a stack at the broken
 * invariant instead of at whatever it corrupts later.
 *
 * Release builds (NDEBUG) compile it to nothing: <cond> is never
 * evaluated (it sits under sizeof, so a variable read only by an assertion
 * is still "used" for -Wunused), and so must not have side effects. Why
 * not keep them in release: some of the checks walk a list or look a name
 * up in a table on every transition, which a request path should not pay
 * for; and an abort in a router serving thousands of sandboxes turns a
 * local bug into an outage for all of them, whereas the debug, sanitizer
 * and fuzzing builds run every path the tests know.
 */
#ifndef FR_ASSERT_H
#define FR_ASSERT_H

/* Prints the failed assertion and aborts. Called by FR_ASSERT only. */
_Noreturn void fr_assert_fail(const char *cond, const char *file, int line, const char *func);

#if !defined(NDEBUG) || defined(FR_ASSERT_ON)
#define FR_ASSERT_ENABLED 1
#define FR_ASSERT(cond) ((cond) ? (void)0 : fr_assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define FR_ASSERT_ENABLED 0
#define FR_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

#endif
