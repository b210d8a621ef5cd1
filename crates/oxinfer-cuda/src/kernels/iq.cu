// The IQ programs (this one and iq_i8.cu): the kernels of gemm.cu (in-tile GEMM, whole-matrix
// f16/f32 decoders) and gemv.cu (register-decoding GEMV for 1 and up to 8 rows) instantiated for
// the IQ / TQ / MXFP4 formats. Each is compiled apart from the main program, in parallel
// (kernels.rs), so start-up does not wait for them in a row, and a failure here leaves the other
// formats running.

#define OXINFER_TEMPLATES_ONLY
#include "gemm.cu"
#include "gemv.cu"
#include "iq_dequant.cuh"

#define IQ_ALL(F, NAME) INSTANTIATE(F, NAME) GEMV_INSTANTIATE(F, NAME)

IQ_ALL(FMT_IQ2_XXS, iq2_xxs)
IQ_ALL(FMT_IQ2_XS, iq2_xs)
IQ_ALL(FMT_IQ3_XXS, iq3_xxs)
IQ_ALL(FMT_IQ1_S, iq1_s)
IQ_ALL(FMT_IQ4_NL, iq4_nl)
IQ_ALL(FMT_IQ3_S, iq3_s)
IQ_ALL(FMT_IQ2_S, iq2_s)
IQ_ALL(FMT_IQ4_XS, iq4_xs)
IQ_ALL(FMT_IQ1_M, iq1_m)
IQ_ALL(FMT_TQ1_0, tq1_0)
IQ_ALL(FMT_TQ2_0, tq2_0)
IQ_ALL(FMT_MXFP4, mxfp4)
