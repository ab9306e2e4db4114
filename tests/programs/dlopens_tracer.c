/* Loads the library named by argv[1] with dlopen, as a program might that
 * was not started with it preloaded, then goes on allocating. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: dlopens_tracer LIBRARY\n");
        return 2;
    }
    void *handle = dlopen(argv[1], RTLD_NOW);
    if (handle) {
        printf("loaded\n");
    } else {
        printf("refused: %s\n", dlerror());
    }
    char *kept = malloc(64);
    strcpy(kept, "went on");
    printf("%s\n", kept);
    free(kept);
    return 0;
}
