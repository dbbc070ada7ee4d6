/*
 * The wire's enums against the C ones: every tf_status and tf_dtype has the
 * number the .proto gives it (proto/tenferro.proto, enums Status and
 * DType), checked when the library builds, so a client written from the
 * .proto alone reads the same numbers.
 */
#include "common/frame.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

#define TF_CHECK_STATUS_(name, num, msg)                                                        \
    _Static_assert((int)TENFERRO__STATUS__##name == (int)(name) && (int)(name) == (num),       \
                   #name " has the number of the .proto");
TF_STATUS_MAP(TF_CHECK_STATUS_)
#undef TF_CHECK_STATUS_

_Static_assert((int)TENFERRO__DTYPE__TF_F32 == (int)TF_F32, "TF_F32 as in the .proto");
_Static_assert((int)TENFERRO__DTYPE__TF_F64 == (int)TF_F64, "TF_F64 as in the .proto");
_Static_assert((int)TENFERRO__DTYPE__TF_C64 == (int)TF_C64, "TF_C64 as in the .proto");
_Static_assert((int)TENFERRO__DTYPE__TF_C128 == (int)TF_C128, "TF_C128 as in the .proto");
