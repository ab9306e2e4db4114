/* A library with an allocator of its own, for a program to dlopen: a bump
 * allocator over a static arena, which says whether it made a block. */
#include <stddef.h>

static char arena[1 << 20];
static size_t used;

void *malloc(size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (used + n > sizeof arena) return NULL;
    void *block = arena + used;
    used += n;
    return block;
}

void free(void *block) { (void)block; }

int own_heap_holds(const void *block) {
    return (const char *)block >= arena && (const char *)block < arena + sizeof arena;
}
