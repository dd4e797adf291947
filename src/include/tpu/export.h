/* The one macro that exports a symbol from the torch-tpu C library.
 * Everything else is compiled with -fvisibility=hidden. */
#ifndef TPU_EXPORT_H
#define TPU_EXPORT_H

#define TPU_API __attribute__((visibility("default")))

#endif
