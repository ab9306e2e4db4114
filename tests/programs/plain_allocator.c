/* An allocator the tracer knows nothing of, to preload after it: every
 * entry point passes its call on to glibc's. */
#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

void *malloc(size_t size) { return __libc_malloc(size); }
void free(void *block) { __libc_free(block); }
void *calloc(size_t count, size_t size) { return __libc_calloc(count, size); }
void *realloc(void *block, size_t size) { return __libc_realloc(block, size); }
void *memalign(size_t alignment, size_t size) { return __libc_memalign(alignment, size); }
void *aligned_alloc(size_t alignment, size_t size) { return __libc_memalign(alignment, size); }
void *valloc(size_t size) { return __libc_valloc(size); }
void *pvalloc(size_t size) { return __libc_pvalloc(size); }

int posix_memalign(void **out, size_t alignment, size_t size) {
    if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    void *block = __libc_memalign(alignment, size);
    if (!block) return ENOMEM;
    *out = block;
    return 0;
}
