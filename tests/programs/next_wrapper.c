/* An interposer to preload after the tracer: its malloc and friends call
 * what dlsym(RTLD_NEXT) finds for this library, glibc's. A lookup made as
 * if for another object (the tracer) would give these functions back, and
 * every call would call itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);

static void find_next(void) {
    next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
}

void *malloc(size_t size) {
    if (!next_malloc) find_next();
    return next_malloc(size);
}

void free(void *block) {
    if (!next_free) find_next();
    next_free(block);
}

void *calloc(size_t count, size_t size) {
    if (!next_calloc) find_next();
    return next_calloc(count, size);
}

void *realloc(void *block, size_t size) {
    if (!next_realloc) find_next();
    return next_realloc(block, size);
}
