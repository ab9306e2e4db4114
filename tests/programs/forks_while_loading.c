/* A thread loads and unloads a library (argv[1]) in a loop, or with
 * "iterate" as argv[2] walks the loaded objects with dl_iterate_phdr (as
 * an unwinder does), while the main thread forks children that allocate
 * and exit: some are forked while the thread holds the lock on the
 * loader's list of objects, which glibc does not reset in the child. A
 * child still alive after 10 s is killed and counted, and no more are
 * forked. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN 60
static volatile int stopping;
static const char *library;
static int iterate;
void *volatile kept[64];

static int look_at(struct dl_phdr_info *info, size_t size, void *data) {
    (void)info;
    (void)size;
    (void)data;
    return 0;
}

static void *load_and_unload(void *arg) {
    (void)arg;
    while (!stopping) {
        if (iterate) {
            dl_iterate_phdr(look_at, NULL);
            continue;
        }
        void *handle = dlopen(library, RTLD_NOW);
        if (handle) dlclose(handle);
    }
    return NULL;
}

__attribute__((noinline)) void child_keeps(void) {
    for (int i = 0; i < 64; i++) kept[i] = malloc(4096);
}

int main(int argc, char **argv) {
    library = argc > 1 ? argv[1] : "libm.so.6";
    iterate = argc > 2 && strcmp(argv[2], "iterate") == 0;
    pthread_t thread;
    pthread_create(&thread, NULL, load_and_unload, NULL);
    int hung = 0;
    for (int i = 0; i < CHILDREN && hung == 0; i++) {
        usleep(1000 * (i % 7));
        pid_t child = fork();
        if (child == 0) {
            child_keeps();
            _exit(0);
        }
        int status = 0, waited = 0;
        while (waitpid(child, &status, WNOHANG) == 0) {
            if (++waited > 1000) {
                hung++;
                kill(child, SIGKILL);
                waitpid(child, &status, 0);
                break;
            }
            usleep(10000);
        }
    }
    stopping = 1;
    pthread_join(thread, NULL);
    printf("forks_while_loading: %d hung\n", hung);
    return 0;
}
