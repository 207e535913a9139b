// A minimal assertion for the emulator's own tests: report and count, keep going. Reports go
// to stdout, apart from the emulator's own diagnoses on stderr, which some tests provoke.
#pragma once

#include <cstdio>

inline int failures = 0;

#define CHECK(condition, ...)                                                   \
    do {                                                                        \
        if (!(condition)) {                                                     \
            std::printf("%s:%d: check failed: %s: ", __FILE__, __LINE__, #condition); \
            std::printf(__VA_ARGS__);                                           \
            std::printf("\n");                                                  \
            ++failures;                                                         \
        }                                                                       \
    } while (0)
