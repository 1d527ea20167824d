/* Plugins: a plugin found through the program's own RUNPATH ($ORIGIN/plugins) loads by bare name
 * (the library's dlopen must leave the caller glibc sees unchanged), then the same with
 * RTLD_DEEPBIND, which makes the library warn once on stderr (its pthread calls bind glibc's). */
#include "check.h"

int main(void) {
  check_preload();
  void *h = dlopen("libplug.so", RTLD_NOW);
  CHECK(h != NULL, "dlopen by the program's RUNPATH: %s", dlerror());
  if (h) {
    int (*call)(void) = (int (*)(void))dlsym(h, "plug_call");
    CHECK(call && call() == 1, "the plugin's function");
    dlclose(h);
  }
  fprintf(stderr, "-- deepbind --\n");
  void *d = dlopen("libplug.so", RTLD_NOW | RTLD_DEEPBIND);
  CHECK(d != NULL, "dlopen with RTLD_DEEPBIND: %s", dlerror());
  if (d) {
    int (*call)(void) = (int (*)(void))dlsym(d, "plug_call");
    CHECK(call && call() >= 1, "the plugin's function");
  }
  void *again = dlopen("libplug.so", RTLD_NOW | RTLD_DEEPBIND);
  CHECK(again != NULL, "a second RTLD_DEEPBIND load");
  return finish("plugin_host");
}
