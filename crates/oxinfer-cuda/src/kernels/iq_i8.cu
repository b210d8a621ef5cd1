// The second IQ program (see iq.cu): gemv.cu's int8 (dp4a) GEMVs for the IQ / TQ / MXFP4
// formats (bodies in iq_gemv.cuh), compiled in parallel with the others.

#define OXINFER_TEMPLATES_ONLY
#include "gemv.cu"
#include "iq_dequant.cuh"
#include "iq_gemv.cuh"

GEMV_I8(FMT_IQ2_XXS, iq2_xxs)
GEMV_I8(FMT_IQ2_XS, iq2_xs)
GEMV_I8(FMT_IQ3_XXS, iq3_xxs)
GEMV_I8(FMT_IQ1_S, iq1_s)
GEMV_I8(FMT_IQ4_NL, iq4_nl)
GEMV_I8(FMT_IQ3_S, iq3_s)
GEMV_I8(FMT_IQ2_S, iq2_s)
GEMV_I8(FMT_IQ4_XS, iq4_xs)
GEMV_I8(FMT_IQ1_M, iq1_m)
GEMV_I8(FMT_TQ1_0, tq1_0)
GEMV_I8(FMT_TQ2_0, tq2_0)
GEMV_I8(FMT_MXFP4, mxfp4)
// The session-10 IQ4 decoding, for A/B (OXINFER_CUDA_IQ4_GEMV=old).
GEMV_I8(FMT_IQ4_NL_V0, iq4_nl_v0)
GEMV_I8(FMT_IQ4_XS_V0, iq4_xs_v0)
// IQ4_XS with four lanes per super-block at one row (OXINFER_CUDA_IQ4_GEMV=wide).
GEMV_I8(FMT_IQ4_XS_W, iq4_xs_w)
