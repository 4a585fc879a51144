/* What libkolo exports. libkolo (like every kolo library) is compiled with
 * -fvisibility=hidden, so no function leaves the shared object unless it is
 * declared in one of the public headers (include/kolo/, *.h). Each public header
 * wraps its declarations in
 *     #pragma GCC visibility push(default)  ...  #pragma GCC visibility pop
 * (two lines per header, so the declarations themselves stay unmarked and
 * headers that several people edit do not change line by line); a declaration
 * outside such a block is exported with KOLO_API. scripts/check-exports.py
 * (CTest test_exports, label unit) fails when the dynamic symbols of libkolo.so
 * differ from the functions these headers declare. */
#ifndef KOLO_API_H
#define KOLO_API_H

#if defined(__GNUC__) || defined(__clang__)
#define KOLO_API __attribute__((visibility("default")))
#else
#define KOLO_API
#endif

#endif
