/* Loads the plugin given as argument, calls its leaking function and
 * unloads it again before the epoch ends, every epoch: its blocks outlive
 * its code. */
#include <dlfcn.h>
#include <stdio.h>
#include "mark.h"

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    for (int epoch = 0; epoch < 8; epoch++) {
        void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!plugin) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        void (*leak)(void) = (void (*)(void))dlsym(plugin, "unloaded_plugin_leak");
        if (!leak) return 1;
        leak();
        if (dlclose(plugin) != 0) return 1;
        mark_epoch(epoch);
    }
    printf("loads_and_unloads: done\n");
    return 0;
}
