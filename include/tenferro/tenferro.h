/* libtenferro-client: the umbrella header. */
#ifndef TENFERRO_TENFERRO_H
#define TENFERRO_TENFERRO_H

#include "tenferro/client.h"
#include "tenferro/daemon-status.h"
#include "tenferro/einsum.h"
#include "tenferro/fft.h"
#include "tenferro/graph.h"
#include "tenferro/linalg.h"
#include "tenferro/peer.h"
#include "tenferro/session.h"
#include "tenferro/status.h"
#include "tenferro/transfer.h"
#include "tenferro/types.h"
#include "tenferro/version.h"
#include "tenferro/view.h"

#endif
