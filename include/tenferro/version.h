/* Version of libtenferro-client and of the wire protocol it speaks. */
#ifndef TENFERRO_VERSION_H
#define TENFERRO_VERSION_H

#define TF_VERSION_MAJOR 0
#define TF_VERSION_MINOR 1
#define TF_VERSION_PATCH 0
/* 0xMMmmpp, comparable with < and >. */
#define TF_VERSION_HEX ((TF_VERSION_MAJOR << 16) | (TF_VERSION_MINOR << 8) | TF_VERSION_PATCH)

#include "tenferro/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library version as "major.minor.patch". */
TF_EXTERN const char *tf_version(void);

/* The wire-protocol version this library speaks (the value in proto/tenferro.proto). */
TF_EXTERN unsigned tf_protocol_version(void);

#ifdef __cplusplus
}
#endif
#endif
