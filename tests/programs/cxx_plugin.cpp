// A C++ library that a C program loads with dlopen(RTLD_LOCAL), as Python
// loads extension modules: the libstdc++ it brings lies in its own scope,
// not in the global one where the tracer's operator new looks first.
#include <cstdint>
#include <cstring>
#include <new>

struct Record {
    char bytes[1000];
    Record *next;
};

static Record *kept;

// 50 Records of 1008 bytes an epoch.
extern "C" __attribute__((noinline)) void plugin_leak(void) {
    for (int i = 0; i < 50; i++) {
        Record *record = new Record;
        std::memset(record->bytes, 2, sizeof record->bytes);
        record->next = kept;
        kept = record;
    }
}

// 1 when a new too large to satisfy throws std::bad_alloc, as libstdc++'s does.
extern "C" int plugin_new_throws(void) {
    try {
        volatile std::size_t huge = SIZE_MAX / 4;
        char *block = new char[huge];
        asm volatile("" : : "r"(block) : "memory");
        return 0;
    } catch (const std::bad_alloc &) {
        return 1;
    }
}
