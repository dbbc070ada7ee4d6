/* TF_EXTERN marks the symbols libtenferro-client exports; everything else is hidden. */
#ifndef TENFERRO_EXPORT_H
#define TENFERRO_EXPORT_H

#if defined(__GNUC__)
#define TF_EXTERN __attribute__((visibility("default")))
#else
#define TF_EXTERN
#endif

#endif
