/* Reaches the allocator through a handle to libc itself, as a program
 * that dlopens "libc.so.6" (or Python's ctypes.CDLL of it) does: one line
 * leaks a fixed amount every epoch through the handle's malloc, and blocks
 * of plain malloc, and of the handle's, go back through the handle's free,
 * so none of them stays. Prints whether each function the handle gives is
 * the one the program's own calls reach (it is, traced or not). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mark.h"

#define EPOCHS 8
static void *(*handle_malloc)(size_t);
static void (*handle_free)(void *);
void *leaked[EPOCHS * 100];
int leaked_count;
void *volatile sink;

__attribute__((noinline)) void leak_through_handle(void) {
    for (int i = 0; i < 100; i++) {
        leaked[leaked_count] = handle_malloc(2000 + i); /* the leaking line */
        memset(leaked[leaked_count++], 1, 16);
    }
}

/* Blocks of the program's malloc, freed through the handle. */
__attribute__((noinline)) void free_through_handle(void) {
    for (int i = 0; i < 400; i++) {
        char *block = malloc(3000 + i);
        block[0] = (char)i;
        sink = block;
        handle_free(block);
    }
}

/* Blocks of the handle's malloc, freed through it. */
__attribute__((noinline)) void temporaries_through_handle(void) {
    for (int i = 0; i < 400; i++) {
        char *block = handle_malloc(5000 + i);
        block[0] = (char)i;
        sink = block;
        handle_free(block);
    }
}

int main(void) {
    void *libc = dlopen("libc.so.6", RTLD_NOW);
    if (!libc) return 2;
    handle_malloc = (void *(*)(size_t))dlsym(libc, "malloc");
    handle_free = (void (*)(void *))dlsym(libc, "free");
    if (!handle_malloc || !handle_free) return 2;
    static const char *names[] = {"malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign",
        "aligned_alloc", "memalign", "valloc", "pvalloc", "mmap", "mmap64", "munmap", "mremap"};
    int same = 0, count = sizeof names / sizeof *names;
    for (int i = 0; i < count; i++)
        same += dlsym(libc, names[i]) == dlsym(RTLD_DEFAULT, names[i]);
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        free_through_handle();
        temporaries_through_handle();
        leak_through_handle();
        mark_epoch(epoch);
    }
    printf("libc_handle: %d of %d lookups on the handle give the program's functions, %d blocks leaked\n", same,
        count, leaked_count);
    return 0;
}
