/* Defines malloc and friends itself (a bump allocator over a static
 * arena, as a program linked with an allocator of its own does): the
 * executable's definitions come before any preloaded library's. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static char arena[1 << 24];
static size_t used;

void *malloc(size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (used + n > sizeof arena) return NULL;
    void *p = arena + used;
    used += n;
    return p;
}

void free(void *p) { (void)p; }

void *calloc(size_t count, size_t size) {
    void *p = malloc(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

void *realloc(void *p, size_t n) {
    void *q = malloc(n);
    if (p && q) memcpy(q, p, n);
    return q;
}

int main(void) {
    char *text = malloc(100);
    strcpy(text, "its own heap");
    puts(text);
    return 0;
}
