/* Fused CPU kernels for Mamba-1 training, float32: the selective scan (with the step size's
 * softplus, the D skip and the silu gate folded in) and the causal depthwise conv + silu,
 * each forward and its adjoint.
 *
 * Built and loaded by training/mamba_train_scan.py (see load_kernel there). Everything is in
 * the (batch, position, channel) layout the MambaMixer's projections produce, so no operand is
 * ever transposed. The scan runs per batch row and block of JB channels; per position its
 * inner loops run over the block's channels, which vectorise with no reduction across lanes,
 * and the block's state (N x JB floats) stays in L1. The forward keeps every decay a_t in E
 * (b x L x N x d floats: exp is the costliest operation here, and it is not repeated); the
 * backward recomputes one block's states from them into an (L+1) x N x JB workspace
 * (cache-sized) and runs the adjoint backwards in time:
 *
 *   forward   dt_t = softplus(dtr_t + bias),  a_t = exp(dt_t A),  h_t = a_t h_{t-1} + dt_t x_t B_t
 *             out_t = (<C_t, h_t> + D x_t) silu(z_t)
 *   backward  gy_t = gout_t silu(z_t),  g_t = gy_t C_t + a_{t+1} g_{t+1}   (dLoss/dh_t)
 *             dLoss/d(dt_t A) = g_t h_{t-1} a_t,  dLoss/d(dt_t x_t B_t) = g_t
 *
 * Layouts (row-major): x, dtr, out, gout, gx, gdtr, gz (b, L, d) contiguous; z (b, L, *) with
 * row stride ldz; B, C (b, L, *) with row strides ldb, ldc; A, gA (N, d); D, bias, gD, gbias
 * (d); gB, gC (b, L, N) contiguous; last (b, N, d). gA, gB, gC, gD, gbias are accumulated
 * into (zero them first). z == NULL: no gate. softplus_on == 0: dt = dtr + bias. E: the
 * decays (see decay_at), written by the forward unless NULL, read by the backward.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JB 32 /* channels per block: a block's state and workspace stay in cache */

/* JB, for the caller that sizes E (mamba_train_scan.py reads it from here) */
int ssm_block(void) { return JB; }

/* Where a_t for (batch b, channels j0.., state n) sits in E, laid out (b, d/JB, L, N, JB):
 * each block's decays are contiguous in the order the backward reads them. */
static inline long decay_at(int b, int j0, int t, int n, int L, int d, int N)
{
    return ((((long)b * ((d + JB - 1) / JB) + j0 / JB) * L + t) * (long)N + n) * JB;
}

/* Branch-free, so that loops calling them vectorise (glibc's libmvec has expf and log1pf for
 * whole vectors, selects are blends). Both are finite for every finite v. softplus differs
 * from torch's (the identity above 20) by log1p(exp(-|v|)) < 2.1e-9 there: below float32's
 * resolution of v. */
static inline float sigmoid(float v)
{
    const float e = expf(-fabsf(v));
    return (v >= 0.0f ? 1.0f : e) / (1.0f + e);
}

static inline float softplus(float v) { return fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v))); }

/* dt = softplus(dtr + bias) (or without the softplus), u = dt x, over one position's d channels */
static void step_size(int d, const float *restrict dtr, const float *restrict bias,
                      const float *restrict x, int softplus_on, float *restrict dt,
                      float *restrict u)
{
    if (softplus_on) {
#pragma omp simd
        for (int j = 0; j < d; j++) dt[j] = softplus(dtr[j] + bias[j]);
    } else {
        for (int j = 0; j < d; j++) dt[j] = dtr[j] + bias[j];
    }
#pragma omp simd
    for (int j = 0; j < d; j++) u[j] = dt[j] * x[j];
}

void ssm_forward(int nb, int L, int d, int N, const float *x, const float *dtr,
                 const float *z, long ldz, const float *A, const float *B, long ldb,
                 const float *C, long ldc, const float *D, const float *bias, int softplus_on,
                 float *out, float *last, float *E)
{
    float *h = malloc(sizeof(float) * N * JB), dt[JB], u[JB], acc[JB];
    for (int b = 0; b < nb; b++)
        for (int j0 = 0; j0 < d; j0 += JB) {  /* one block of channels: its state stays in L1 */
            const int jn = d - j0 < JB ? d - j0 : JB;
            memset(h, 0, sizeof(float) * N * JB);
            for (int t = 0; t < L; t++) {
                const long row = (long)b * L + t;
                const float *xr = x + row * d + j0, *Bt = B + row * ldb, *Ct = C + row * ldc;
                step_size(jn, dtr + row * d + j0, bias + j0, xr, softplus_on, dt, u);
                for (int j = 0; j < jn; j++) acc[j] = D[j0 + j] * xr[j];
                for (int n = 0; n < N; n++) {
                    const float bn = Bt[n], cn = Ct[n], *An = A + (long)n * d + j0;
                    float *hn = h + n * JB;
                    if (E) {
                        float *at = E + decay_at(b, j0, t, n, L, d, N);
#pragma omp simd
                        for (int j = 0; j < jn; j++) {
                            at[j] = expf(dt[j] * An[j]);
                            hn[j] = at[j] * hn[j] + u[j] * bn;
                            acc[j] += cn * hn[j];
                        }
                    } else {
#pragma omp simd
                        for (int j = 0; j < jn; j++) {
                            hn[j] = expf(dt[j] * An[j]) * hn[j] + u[j] * bn;
                            acc[j] += cn * hn[j];
                        }
                    }
                }
                float *o = out + row * d + j0;
                if (z) {
                    const float *zr = z + row * ldz + j0;
#pragma omp simd
                    for (int j = 0; j < jn; j++) o[j] = acc[j] * zr[j] * sigmoid(zr[j]);
                } else {
                    memcpy(o, acc, sizeof(float) * jn);
                }
            }
            for (int n = 0; n < N; n++)
                memcpy(last + ((long)b * N + n) * d + j0, h + n * JB, sizeof(float) * jn);
        }
    free(h);
}

void ssm_backward(int nb, int L, int d, int N, const float *x, const float *dtr,
                  const float *z, long ldz, const float *A, const float *B, long ldb,
                  const float *C, long ldc, const float *D, const float *bias, int softplus_on,
                  const float *gout, float *gx, float *gdtr, float *gz, float *gA, float *gB,
                  float *gC, float *gD, float *gbias, const float *E)
{
    const long S = (long)N * JB;                         /* one block's state */
    float *H = malloc(sizeof(float) * (L + 1) * S);      /* H[t+1] = h_t, H[0] = h_{-1} = 0 */
    float *DT = malloc(sizeof(float) * L * JB);          /* dt_t */
    float *Y = malloc(sizeof(float) * L * JB);           /* <C_t, h_t> */
    float *g = malloc(sizeof(float) * S);                /* a_{t+1} g_{t+1}, carried back */
    float u[JB], gy[JB], sB[JB], sA[JB];
    for (int b = 0; b < nb; b++)
        for (int j0 = 0; j0 < d; j0 += JB) {
            const int jn = d - j0 < JB ? d - j0 : JB;
            memset(H, 0, sizeof(float) * S);
            for (int t = 0; t < L; t++) {  /* recompute the forward states from the decays */
                const long row = (long)b * L + t;
                const float *Bt = B + row * ldb, *Ct = C + row * ldc;
                float *dt = DT + (long)t * JB, *y = Y + (long)t * JB;
                step_size(jn, dtr + row * d + j0, bias + j0, x + row * d + j0, softplus_on, dt, u);
                memset(y, 0, sizeof(float) * jn);
                for (int n = 0; n < N; n++) {
                    const float bn = Bt[n], cn = Ct[n], *An = A + (long)n * d + j0;
                    const float *hp = H + t * S + n * JB;
                    float *ht = H + (t + 1) * S + n * JB;
                    const float *at = E + decay_at(b, j0, t, n, L, d, N);
#pragma omp simd
                    for (int j = 0; j < jn; j++) {
                        ht[j] = at[j] * hp[j] + u[j] * bn;
                        y[j] += cn * ht[j];
                    }
                }
            }
            memset(g, 0, sizeof(float) * S);
            for (int t = L - 1; t >= 0; t--) {  /* the adjoint, backwards in time */
                const long row = (long)b * L + t;
                const float *xr = x + row * d + j0, *go = gout + row * d + j0;
                const float *Bt = B + row * ldb, *Ct = C + row * ldc;
                const float *dt = DT + (long)t * JB, *y = Y + (long)t * JB;
                float *gzr = gz + row * d + j0;
                if (z) {
                    const float *zr = z + row * ldz + j0;
#pragma omp simd
                    for (int j = 0; j < jn; j++) {
                        const float zj = zr[j], s = sigmoid(zj);
                        gy[j] = go[j] * zj * s;
                        gzr[j] = go[j] * (y[j] + D[j0 + j] * xr[j]) * s * (1.0f + zj * (1.0f - s));
                    }
                } else {
                    memcpy(gy, go, sizeof(float) * jn);
                    memset(gzr, 0, sizeof(float) * jn);
                }
#pragma omp simd
                for (int j = 0; j < jn; j++) {
                    gD[j0 + j] += gy[j] * xr[j];
                    u[j] = dt[j] * xr[j];
                    sB[j] = 0.0f;
                    sA[j] = 0.0f;
                }
                for (int n = 0; n < N; n++) {
                    const float bn = Bt[n], cn = Ct[n], *An = A + (long)n * d + j0;
                    const float *hp = H + t * S + n * JB, *ht = hp + S, *at = E + decay_at(b, j0, t, n, L, d, N);
                    float *gn_ = g + n * JB, *gAn = gA + (long)n * d + j0;
                    float sc = 0.0f, sb = 0.0f;
#pragma omp simd reduction(+:sc, sb)
                    for (int j = 0; j < jn; j++) {
                        const float gn = gn_[j] + gy[j] * cn;  /* dLoss/dh_t */
                        const float gda = gn * hp[j] * at[j];  /* dLoss/d(dt_t A) */
                        sc += gy[j] * ht[j];
                        sb += gn * u[j];
                        sB[j] += gn * bn;
                        sA[j] += gda * An[j];
                        gAn[j] += gda * dt[j];
                        gn_[j] = gn * at[j];                   /* carried to t - 1 */
                    }
                    gC[row * N + n] += sc;
                    gB[row * N + n] += sb;
                }
                float *gxr = gx + row * d + j0, *gdr = gdtr + row * d + j0;
                const float *dr = dtr + row * d + j0;
#pragma omp simd
                for (int j = 0; j < jn; j++) {  /* softplus' = sigmoid */
                    const float gdt = sB[j] * xr[j] + sA[j];
                    gxr[j] = sB[j] * dt[j] + gy[j] * D[j0 + j];
                    gdr[j] = softplus_on ? gdt * sigmoid(dr[j] + bias[j0 + j]) : gdt;
                    gbias[j0 + j] += gdr[j];
                }
            }
        }
    free(H); free(DT); free(Y); free(g);
}

/* Causal depthwise conv over positions, then silu: the MambaMixer's conv1d (padding K - 1,
 * the first L outputs kept, groups = d).
 *   pre_t = bias + sum_k w[k] x_{t-K+1+k}  (x before position 0 is zero),  out_t = silu(pre_t)
 * x (b, L, *) with row stride ldx; w, gw (K, d); bias, gbias (d); out, gout, gx (b, L, d)
 * contiguous. gw and gbias are accumulated into.
 */
/* pre_t of batch row b at position t, into pre (d) */
static void conv_pre(int b, int t, int L, int d, int K, const float *x, long ldx,
                     const float *w, const float *bias, float *pre)
{
    memcpy(pre, bias, sizeof(float) * d);
    for (int k = 0; k < K; k++) {
        const int s = t - K + 1 + k;
        if (s < 0) continue;
        const float *xs = x + ((long)b * L + s) * ldx, *wk = w + (long)k * d;
        for (int j = 0; j < d; j++) pre[j] += wk[j] * xs[j];
    }
}

void conv_silu_forward(int nb, int L, int d, int K, const float *x, long ldx, const float *w,
                       const float *bias, float *out)
{
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < L; t++) {
            float *o = out + ((long)b * L + t) * d;
            conv_pre(b, t, L, d, K, x, ldx, w, bias, o);
#pragma omp simd
            for (int j = 0; j < d; j++) o[j] *= sigmoid(o[j]);
        }
}

void conv_silu_backward(int nb, int L, int d, int K, const float *x, long ldx, const float *w,
                        const float *bias, const float *gout, float *gx, float *gw, float *gbias)
{
    float *gpre = malloc(sizeof(float) * L * d);
    float *pre = malloc(sizeof(float) * d);
    for (int b = 0; b < nb; b++) {
        for (int t = 0; t < L; t++) {  /* dLoss/dpre_t, recomputing pre_t */
            conv_pre(b, t, L, d, K, x, ldx, w, bias, pre);
            const float *go = gout + ((long)b * L + t) * d;
            float *gp = gpre + (long)t * d;
#pragma omp simd
            for (int j = 0; j < d; j++) {
                const float s = sigmoid(pre[j]);
                gp[j] = go[j] * s * (1.0f + pre[j] * (1.0f - s));
                gbias[j] += gp[j];
            }
        }
        for (int s = 0; s < L; s++) {  /* x_s feeds pre_{s+K-1-k} through w[k] */
            const float *xs = x + ((long)b * L + s) * ldx;
            float *gxs = gx + ((long)b * L + s) * d;
            for (int j = 0; j < d; j++) gxs[j] = 0.0f;
            for (int k = 0; k < K; k++) {
                const int t = s + K - 1 - k;
                if (t >= L) continue;
                const float *gp = gpre + (long)t * d, *wk = w + (long)k * d;
                float *gwk = gw + (long)k * d;
                for (int j = 0; j < d; j++) {
                    gxs[j] += wk[j] * gp[j];
                    gwk[j] += gp[j] * xs[j];
                }
            }
        }
    }
    free(gpre);
    free(pre);
}
