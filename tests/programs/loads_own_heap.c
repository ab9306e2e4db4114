/* dlopens the library named by its argument, which defines malloc (an
 * allocator of its own), and allocates through the malloc a lookup on its
 * handle gives: that library's, traced or not. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    void *(*own_malloc)(size_t) = (void *(*)(size_t))dlsym(library, "malloc");
    int (*holds)(const void *) = (int (*)(const void *))dlsym(library, "own_heap_holds");
    if (!own_malloc || !holds) return 2;
    void *block = own_malloc(100);
    printf("loads_own_heap: the block is %s\n", holds(block) ? "the library's" : "another allocator's");
    return 0;
}
