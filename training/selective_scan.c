/* Fused CPU selective scan for Mamba-1 training: forward and its adjoint, float32.
 *
 * Built and loaded by training/mamba_train_scan.py (see compile_kernel there). One pass per
 * (batch, channel) sequence; the N state entries sit in registers/L1, so nothing of size
 * (b, L, d, N) ever goes through memory: on a shared, memory-bound 2-core machine that is
 * what makes it fast. The backward recomputes each sequence's states and decays into a small
 * per-sequence workspace ((L+1) x N and L x N floats) and runs the adjoint backwards in time:
 *
 *   forward   h_t = a_t h_{t-1} + dt_t x_t B_t,  a_t = exp(dt_t A),  y_t = <C_t, h_t>
 *   backward  g_t = gy_t C_t + a_{t+1} g_{t+1}            (dLoss/dh_t)
 *             dLoss/d(dt_t A) = g_t h_{t-1} a_t,  dLoss/d(dt_t x_t B_t) = g_t
 *
 * Layouts (row-major, contiguous): x, dt, y, gy, gx, gdt (b, d, L); A, gA (d, N);
 * B, C, gB, gC (b, L, N); last (b, d, N). gA, gB, gC are accumulated into (zero them first).
 */
#include <math.h>
#include <stdlib.h>

void ssm_forward(int nb, int nd, int L, int N, const float *x, const float *dt,
                 const float *A, const float *B, const float *C, float *y, float *last)
{
    float *h = malloc(sizeof(float) * N);
    for (int b = 0; b < nb; b++) {
        for (int d = 0; d < nd; d++) {
            const long s = ((long)b * nd + d) * L;  /* this sequence in x, dt, y */
            const float *Ad = A + (long)d * N;
            for (int n = 0; n < N; n++) h[n] = 0.0f;
            for (int t = 0; t < L; t++) {
                const float dtv = dt[s + t], u = dtv * x[s + t];
                const float *Bt = B + ((long)b * L + t) * N, *Ct = C + ((long)b * L + t) * N;
                float acc = 0.0f;
#pragma omp simd reduction(+:acc)
                for (int n = 0; n < N; n++) {
                    h[n] = expf(dtv * Ad[n]) * h[n] + u * Bt[n];
                    acc += Ct[n] * h[n];
                }
                y[s + t] = acc;
            }
            float *out = last + ((long)b * nd + d) * N;
            for (int n = 0; n < N; n++) out[n] = h[n];
        }
    }
    free(h);
}

void ssm_backward(int nb, int nd, int L, int N, const float *x, const float *dt,
                  const float *A, const float *B, const float *C, const float *gy,
                  float *gx, float *gdt, float *gA, float *gB, float *gC)
{
    float *H = malloc(sizeof(float) * (L + 1) * N);  /* H[t+1] = h_t, H[0] = h_{-1} = 0 */
    float *a = malloc(sizeof(float) * L * N);        /* a[t] = exp(dt_t A) */
    float *g = malloc(sizeof(float) * N);
    for (int n = 0; n < N; n++) H[n] = 0.0f;
    for (int b = 0; b < nb; b++) {
        for (int d = 0; d < nd; d++) {
            const long s = ((long)b * nd + d) * L;
            const float *Ad = A + (long)d * N;
            float *gAd = gA + (long)d * N;
            for (int t = 0; t < L; t++) {  /* recompute the forward states */
                const float dtv = dt[s + t], u = dtv * x[s + t];
                const float *Bt = B + ((long)b * L + t) * N;
                float *at = a + (long)t * N, *hp = H + (long)t * N, *ht = hp + N;
#pragma omp simd
                for (int n = 0; n < N; n++) {
                    at[n] = expf(dtv * Ad[n]);
                    ht[n] = at[n] * hp[n] + u * Bt[n];
                }
            }
            for (int n = 0; n < N; n++) g[n] = 0.0f;
            for (int t = L - 1; t >= 0; t--) {  /* the adjoint, backwards in time */
                const float dtv = dt[s + t], xv = x[s + t], gyt = gy[s + t], u = dtv * xv;
                const float *Bt = B + ((long)b * L + t) * N, *Ct = C + ((long)b * L + t) * N;
                float *gBt = gB + ((long)b * L + t) * N, *gCt = gC + ((long)b * L + t) * N;
                const float *at = a + (long)t * N, *hp = H + (long)t * N, *ht = hp + N;
                float sB = 0.0f, sA = 0.0f;
#pragma omp simd reduction(+:sB, sA)
                for (int n = 0; n < N; n++) {
                    const float gn = g[n] + gyt * Ct[n];  /* dLoss/dh_t */
                    const float gda = gn * hp[n] * at[n];  /* dLoss/d(dt_t A) */
                    gCt[n] += gyt * ht[n];
                    gBt[n] += gn * u;
                    sB += gn * Bt[n];
                    sA += gda * Ad[n];
                    gAd[n] += gda * dtv;
                    g[n] = gn * at[n];  /* carried to t - 1 */
                }
                gx[s + t] = sB * dtv;
                gdt[s + t] = sB * xv + sA;
            }
        }
    }
    free(H);
    free(a);
    free(g);
}
