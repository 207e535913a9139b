// How both libraries explain a call they refuse (one the real driver or cuBLAS would fault on,
// or get wrong silently): a line on stderr, where a failing test's output shows it.
#pragma once

#include <cstdarg>
#include <cstdio>

namespace emu_report {

// Prints "cuda-emulator: <message>" and returns `result`, for `return complain(...)`.
template <typename Result>
__attribute__((format(printf, 2, 3))) Result complain(Result result, const char* format, ...) {
    char message[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(message, sizeof message, format, args);
    va_end(args);
    std::fprintf(stderr, "cuda-emulator: %s\n", message);
    return result;
}

}  // namespace emu_report
