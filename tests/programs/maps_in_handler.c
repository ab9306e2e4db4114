/* A signal handler that maps and unmaps memory (mmap is async-signal-safe)
 * interrupts the main thread 2000 times a second while it mallocs and
 * frees, for two seconds; with "threads", an idle thread exists too. The
 * handler often runs inside malloc, with its heap half updated or its
 * lock held. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t mapped;

static void map_and_unmap(int signal_number) {
    (void)signal_number;
    void *memory = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory != MAP_FAILED && munmap(memory, 65536) == 0) mapped++;
}

static void *idle(void *arg) {
    (void)arg;
    pause();
    return NULL;
}

static void *kept[100000];

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "threads") == 0) {
        pthread_t thread;
        pthread_create(&thread, NULL, idle, NULL);
    }
    signal(SIGALRM, map_and_unmap);
    struct itimerval every = {{0, 500}, {0, 500}};
    setitimer(ITIMER_REAL, &every, NULL);
    long n = 0;
    time_t end = time(NULL) + 2;
    while (time(NULL) < end) {
        void *block = malloc(16 + (n * 37) % 4000);
        if (n % 3 == 0) {
            free(block);
        } else {
            free(kept[n % 100000]);
            kept[n % 100000] = block;
        }
        n++;
    }
    struct itimerval stop = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &stop, NULL);
    printf("maps_in_handler: %s\n", mapped > 100 ? "mapped in the handler" : "the handler hardly ran");
    return 0;
}
