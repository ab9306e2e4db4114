/* Allocations under varied native stacks, built without frame pointers:
 * recursion of changing depth, calls back from libc (qsort, bsearch),
 * threads, realloc/calloc, a library loaded with dlopen and closed again
 * while the threads allocate, and an allocation from a signal handler. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink;

__attribute__((noinline)) static void *leaf(size_t n, int kind) {
    switch (kind % 3) {
    case 0: return malloc(n);
    case 1: return calloc(1, n);
    default: return realloc(NULL, n);
    }
}

__attribute__((noinline)) static void recurse(int depth, int kind) {
    char pad[32];
    memset(pad, depth, sizeof pad);
    sink = pad;
    if (depth > 0) {
        recurse(depth - 1, kind + (pad[3] & 1));
        return;
    }
    free(leaf(24 + kind, kind));
}

static int compare(const void *a, const void *b) {
    free(malloc(8));
    return *(const int *)a - *(const int *)b;
}

static void *worker(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < 2000; i++) recurse((int)((i + id) % 37), i);
    return NULL;
}

static void on_signal(int sig) {
    (void)sig;
    free(malloc(40));
}

int main(void) {
    int values[64];
    for (int i = 0; i < 64; i++) values[i] = (i * 7919) % 64;
    qsort(values, 64, sizeof values[0], compare);
    int key = 5;
    sink = bsearch(&key, values, 64, sizeof values[0], compare);

    pthread_t threads[3];
    for (long i = 0; i < 3; i++) pthread_create(&threads[i], NULL, worker, (void *)i);
    for (int round = 0; round < 20; round++) {
        void *lib = dlopen("libz.so.1", RTLD_NOW);
        if (lib) {
            const char *(*version)(void) = (const char *(*)(void))dlsym(lib, "zlibVersion");
            if (version) sink = (void *)version();
            recurse(round, round);
            dlclose(lib);
        }
    }
    for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
    /* Once every library is closed: 2000 more stacks, none of them during a dlclose. */
    worker((void *)3);

    signal(SIGUSR1, on_signal);
    raise(SIGUSR1);
    puts("done");
    return 0;
}
