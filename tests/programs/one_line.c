/* One leaking line that allocates along two paths, through strdup and
 * straight from malloc: two stacks that differ below the line, so two
 * suspects, which the report sums as one line. A second, smaller leak on a
 * line of its own ranks after it. */
#include <stdlib.h>
#include <string.h>
#include "mark.h"

#define EPOCHS_MAX 64
#define PER_EPOCH 100
struct pair {
    void *key, *value;
};
struct pair kept[EPOCHS_MAX * PER_EPOCH];
/* 599 characters, written at run time so that the compiler cannot turn
 * strdup into a malloc of its own. */
char key_text[600];
void *small[EPOCHS_MAX * PER_EPOCH];
int kept_count, small_count;

__attribute__((noinline)) void keep(void *key, void *value) {
    memset(key, 1, 16);
    memset(value, 2, 16);
    kept[kept_count].key = key;
    kept[kept_count++].value = value;
}

__attribute__((noinline)) void keep_pairs(void) {
    for (int i = 0; i < PER_EPOCH; i++) {
        keep(strdup(key_text), malloc(1000)); /* the leaking line */
    }
}

__attribute__((noinline)) void keep_small(void) {
    for (int i = 0; i < PER_EPOCH; i++) {
        small[small_count] = malloc(800);
        memset(small[small_count++], 3, 16);
    }
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 8;
    if (epochs > EPOCHS_MAX) epochs = EPOCHS_MAX;
    memset(key_text, 'k', sizeof key_text - 1);
    for (int epoch = 0; epoch < epochs; epoch++) {
        keep_pairs();
        keep_small();
        mark_epoch(epoch);
    }
    printf("one_line: %d epochs, %d pairs and %d blocks kept\n", epochs, kept_count, small_count);
    return 0;
}
