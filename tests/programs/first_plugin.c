#define PLUGIN_LEAK first_plugin_leak
#include "replaced_plugin.h"
