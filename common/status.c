/* tf_strerror and tf_status_name, generated from the one status list. */
#include "tenferro/status.h"

const char *tf_strerror(tf_status status) {
    switch (status) {
#define TF_STATUS_MSG_(name, num, msg) \
    case name:                         \
        return msg;
        TF_STATUS_MAP(TF_STATUS_MSG_)
#undef TF_STATUS_MSG_
    }
    return "unknown status";
}

const char *tf_status_name(tf_status status) {
    switch (status) {
#define TF_STATUS_NAME_(name, num, msg) \
    case name:                          \
        return #name;
        TF_STATUS_MAP(TF_STATUS_NAME_)
#undef TF_STATUS_NAME_
    }
    return "TF_ERR_UNKNOWN";
}
