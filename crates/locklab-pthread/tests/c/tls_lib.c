/* A library with a thread-local variable, for handler_install.c (which loads copies of it). */
__thread long tls_lib_value[4];
long *tls_lib_touch(void) { return tls_lib_value; }
