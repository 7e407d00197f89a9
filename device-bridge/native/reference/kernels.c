/*
 * The reference implementation's math: every op checks its handles and local shapes, then runs on
 * each device's pieces in turn (SPMD), in fp32 (BF16 pieces staged). The formulas are the cpu
 * backend's (dev.ttpipe.device.cpu), step for step, so both backends agree to float rounding.
 */
#include "internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* The op context of an entry with n tensors on one submesh (optional ones may be 0). */
#define OP_BEGIN(fn, optional, ...)                                                                \
    enter_fn(fn);                                                                                  \
    opctx c;                                                                                       \
    uint64_t h_[] = {__VA_ARGS__};                                                                 \
    int s = op_begin(&c, (int) (sizeof h_ / sizeof h_[0]), h_, names_, optional, SAME_SUBMESH);   \
    if (s) return s

static int dims_str_err(const char *what, const tv *a, const tv *b) {
    char da[128], db[128];
    format_dims(da, sizeof da, a->rank, a->dims);
    format_dims(db, sizeof db, b->rank, b->dims);
    return err(TTPIPE_E_INVALID_ARGUMENT, "%s %s and %s %s %s", a->name, da, b->name, db, what);
}

/* t has dims[0 .. rank) */
static int need_dims(const tv *t, int32_t rank, const int32_t *dims) {
    int ok = t->rank == rank;
    for (int32_t i = 0; ok && i < rank; i++) ok = t->dims[i] == dims[i];
    if (!ok) {
        char dt[128], de[128];
        format_dims(dt, sizeof dt, t->rank, t->dims);
        format_dims(de, sizeof de, rank, dims);
        return err(TTPIPE_E_INVALID_ARGUMENT, "%s has local shape %s, expected %s", t->name, dt, de);
    }
    return TTPIPE_OK;
}

/* s is x's shape without its last dim (row statistics). */
static int need_stats(const tv *s, const tv *x) {
    return need_dims(s, x->rank - 1, x->dims);
}

/* g is [D], D = x's last dim. */
static int need_vector(const tv *g, const tv *x) {
    int32_t d = last_of(x);
    return need_dims(g, 1, &d);
}

static int distinct_storage(const tv *a, const tv *b) {
    if (a->st && b->st && a->st == b->st) return err(TTPIPE_E_INVALID_ARGUMENT, "%s and %s share memory", a->name, b->name);
    return TTPIPE_OK;
}

/* A row-wise op's input: floating, rank >= 1. */
static int row_input(const tv *x) {
    int s = need_float(x);
    if (!s) s = need_rank(x, 1);
    return s;
}

/* ---- matmul -------------------------------------------------------------------------------------- */

/* C[m, n] = alpha * op(A) @ op(B) + beta * C; beta = 0 ignores C. row: k floats, acc: n floats of scratch. */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, const float *B,
                 float beta, float *C, float *row, float *acc) {
    for (int64_t i = 0; i < m; i++) {
        const float *ar = A + i * k;
        if (ta) {
            for (int64_t kk = 0; kk < k; kk++) row[kk] = A[kk * m + i];
            ar = row;
        }
        if (tb) {
            for (int64_t j = 0; j < n; j++) {
                const float *br = B + j * k;
                float dot = 0.0f;
                for (int64_t kk = 0; kk < k; kk++) dot += ar[kk] * br[kk];
                acc[j] = dot;
            }
        } else {
            for (int64_t j = 0; j < n; j++) acc[j] = 0.0f;
            for (int64_t kk = 0; kk < k; kk++) {
                float aik = ar[kk];
                const float *br = B + kk * n;
                for (int64_t j = 0; j < n; j++) acc[j] += aik * br[j];
            }
        }
        float *cr = C + i * n;
        if (beta == 0.0f) {
            for (int64_t j = 0; j < n; j++) cr[j] = alpha * acc[j];
        } else {
            for (int64_t j = 0; j < n; j++) cr[j] = alpha * acc[j] + beta * cr[j];
        }
    }
}

TTPIPE_API int32_t ttpipe_matmul(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b, int32_t transpose_a,
                                 int32_t transpose_b, float alpha, float beta) {
    static const char *const names_[] = {"out", "a", "b"};
    OP_BEGIN("ttpipe_matmul", 0, out, a, b);
    tv *o = &c.t[0], *ta = &c.t[1], *tb = &c.t[2];
    s = need_float(o);
    if (!s) s = need_float(ta);
    if (!s) s = need_float(tb);
    int32_t ra = ta->rank, rb = tb->rank;
    int ok = ra >= 2 && rb >= 2 && (rb == 2 || rb == ra);
    for (int32_t i = 0; ok && rb > 2 && i < ra - 2; i++) ok = ta->dims[i] == tb->dims[i];
    int64_t m = 0, n = 0, k = 0, batch = 1;
    if (ok) {
        m = transpose_a ? ta->dims[ra - 1] : ta->dims[ra - 2];
        k = transpose_a ? ta->dims[ra - 2] : ta->dims[ra - 1];
        int64_t kb = transpose_b ? tb->dims[rb - 1] : tb->dims[rb - 2];
        n = transpose_b ? tb->dims[rb - 2] : tb->dims[rb - 1];
        ok = k == kb;
        for (int32_t i = 0; i < ra - 2; i++) batch *= ta->dims[i];
    }
    if (!s && !ok) s = dims_str_err(transpose_a || transpose_b ? "do not multiply (with the transposes asked)"
                                                               : "do not multiply", ta, tb);
    if (!s) {
        int32_t expect[TTPIPE_MAX_RANK];
        memcpy(expect, ta->dims, sizeof expect);
        expect[ra - 2] = (int32_t) m;
        expect[ra - 1] = (int32_t) n;
        s = need_dims(o, ra, expect);
    }
    if (!s) s = distinct_storage(o, ta);
    if (!s) s = distinct_storage(o, tb);
    float *row = NULL, *acc = NULL;
    if (!s) {
        row = malloc(sizeof(float) * (size_t) (k > 0 ? k : 1));
        acc = malloc(sizeof(float) * (size_t) (n > 0 ? n : 1));
        if (!row || !acc) s = err_host(4 * (k + n));
    }
    int batched_b = rb > 2;
    /* a BF16 operand makes the matmul a bf16 one: an FP32 operand is rounded, products summed in fp32 */
    int bf16 = ta->dtype == TTPIPE_BF16 || tb->dtype == TTPIPE_BF16;
    for (int32_t d = 0; !s && d < o->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *A = bf16 ? stage_read_bf16(&g, ta, d) : stage_read(&g, ta, d);
        const float *B = bf16 ? stage_read_bf16(&g, tb, d) : stage_read(&g, tb, d);
        float *C = beta == 0.0f ? stage_write(&g, o, d) : stage_update(&g, o, d);
        if (!A || !B || !C) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t i = 0; i < batch; i++) {
                gemm(transpose_a, transpose_b, m, n, k, alpha, A + i * m * k, B + (batched_b ? i * k * n : 0), beta,
                     C + i * m * n, row, acc);
            }
        }
        staging_end(&g, !s);
    }
    free(row);
    free(acc);
    return op_end(&c, s);
}

/* ---- embedding ------------------------------------------------------------------------------------- */

/* Every id (other than ignore, when allow_ignore) lies in [0, v), on every device: checked before any write. */
static int check_ids(const tv *ids, int64_t v, int allow_ignore, int32_t ignore, const char *what) {
    for (int32_t d = 0; d < ids->sub->n; d++) {
        const int32_t *p = int_piece(ids, d);
        for (int64_t i = 0; i < ids->numel; i++) {
            int32_t id = p[i];
            if ((id < 0 || id >= v) && !(allow_ignore && id == ignore)) {
                if (allow_ignore) {
                    return err(TTPIPE_E_OUT_OF_RANGE,
                               "%s %d at element %" PRId64 " of device %d's %s is outside [0, %" PRId64
                               ") and is not the ignore index %d",
                               what, id, i, d, ids->name, v, ignore);
                }
                return err(TTPIPE_E_OUT_OF_RANGE, "%s %d at element %" PRId64 " of device %d's %s is outside [0, %" PRId64 ")",
                           what, id, i, d, ids->name, v);
            }
        }
    }
    return TTPIPE_OK;
}

/* The table's rows on device d: [*offset, *offset + local rows) of v in all. */
static void vocab_rows(const tv *table, int32_t p0, int32_t p1, int32_t d, int64_t *offset, int64_t *v) {
    int32_t axis = axis_of_dim(p0, p1, 0);
    int64_t local = table->dims[0];
    *v = axis < 0 ? local : local * axis_size(table->sub, axis);
    *offset = axis < 0 ? 0 : (int64_t) coord_along(table->sub, d, axis) * local;
}

static int need_ids_plus_row(const tv *rows, const tv *ids, int32_t width) {
    int32_t expect[TTPIPE_MAX_RANK];
    if (ids->rank + 1 > TTPIPE_MAX_RANK) return err(TTPIPE_E_INVALID_ARGUMENT, "ids have rank %d", ids->rank);
    memcpy(expect, ids->dims, sizeof(int32_t) * (size_t) ids->rank);
    expect[ids->rank] = width;
    return need_dims(rows, ids->rank + 1, expect);
}

TTPIPE_API int32_t ttpipe_embedding(ttpipe_tensor out, ttpipe_tensor ids, ttpipe_tensor table, int32_t p0, int32_t p1) {
    static const char *const names_[] = {"out", "ids", "table"};
    OP_BEGIN("ttpipe_embedding", 0, out, ids, table);
    tv *o = &c.t[0], *ti = &c.t[1], *tt = &c.t[2];
    s = need_float(o);
    if (!s) s = need_int(ti);
    if (!s) s = need_float(tt);
    if (!s && tt->rank != 2) s = err(TTPIPE_E_INVALID_ARGUMENT, "table has rank %d, expected [V, D]", tt->rank);
    if (!s) s = check_placements(tt->sub, 2, p0, p1, 1);
    if (!s) s = need_ids_plus_row(o, ti, tt->dims[1]);
    int64_t offset, v;
    vocab_rows(tt, p0, p1, 0, &offset, &v);
    if (!s) s = check_ids(ti, v, 0, 0, "id");
    int64_t dim = tt->rank == 2 ? tt->dims[1] : 0, local_rows = tt->rank == 2 ? tt->dims[0] : 0;
    for (int32_t d = 0; !s && d < o->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *O = stage_write(&g, o, d);
        const float *T = stage_read(&g, tt, d);
        const int32_t *I = int_piece(ti, d);
        if (!O || !T) {
            s = TTPIPE_E_HOST;
        } else {
            vocab_rows(tt, p0, p1, d, &offset, &v);
            for (int64_t r = 0; r < ti->numel; r++) {
                int64_t row = I[r] - offset;
                if (row >= 0 && row < local_rows) memcpy(O + r * dim, T + row * dim, sizeof(float) * (size_t) dim);
                else memset(O + r * dim, 0, sizeof(float) * (size_t) dim);
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_embedding_backward(ttpipe_tensor ids, ttpipe_tensor d_out, ttpipe_tensor d_table, int32_t p0,
                                             int32_t p1, int32_t accumulate) {
    static const char *const names_[] = {"ids", "d_out", "d_table"};
    OP_BEGIN("ttpipe_embedding_backward", 0, ids, d_out, d_table);
    tv *ti = &c.t[0], *tdo = &c.t[1], *tdt = &c.t[2];
    s = need_int(ti);
    if (!s) s = need_float(tdo);
    if (!s) s = need_float(tdt);
    if (!s && tdt->rank != 2) s = err(TTPIPE_E_INVALID_ARGUMENT, "d_table has rank %d, expected [V, D]", tdt->rank);
    if (!s) s = check_placements(tdt->sub, 2, p0, p1, 1);
    if (!s) s = need_ids_plus_row(tdo, ti, tdt->dims[1]);
    int64_t offset, v;
    vocab_rows(tdt, p0, p1, 0, &offset, &v);
    if (!s) s = check_ids(ti, v, 0, 0, "id");
    int64_t dim = tdt->rank == 2 ? tdt->dims[1] : 0, local_rows = tdt->rank == 2 ? tdt->dims[0] : 0;
    for (int32_t d = 0; !s && d < ti->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *DO = stage_read(&g, tdo, d);
        float *DT = accumulate ? stage_update(&g, tdt, d) : stage_write(&g, tdt, d);
        const int32_t *I = int_piece(ti, d);
        if (!DO || !DT) {
            s = TTPIPE_E_HOST;
        } else {
            vocab_rows(tdt, p0, p1, d, &offset, &v);
            if (!accumulate) memset(DT, 0, sizeof(float) * (size_t) tdt->numel);
            for (int64_t r = 0; r < ti->numel; r++) {
                int64_t row = I[r] - offset;
                if (row < 0 || row >= local_rows) continue;
                float *t = DT + row * dim;
                const float *src = DO + r * dim;
                for (int64_t j = 0; j < dim; j++) t[j] += src[j];
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

/* ---- normalisation ------------------------------------------------------------------------------------ */

TTPIPE_API int32_t ttpipe_layernorm(ttpipe_tensor y, ttpipe_tensor mean, ttpipe_tensor rstd, ttpipe_tensor x,
                                    ttpipe_tensor gamma, ttpipe_tensor beta, float eps) {
    static const char *const names_[] = {"y", "mean", "rstd", "x", "gamma", "beta"};
    OP_BEGIN("ttpipe_layernorm", 1u << 5, y, mean, rstd, x, gamma, beta);
    tv *ty = &c.t[0], *tm = &c.t[1], *tr = &c.t[2], *tx = &c.t[3], *tg = &c.t[4], *tb = &c.t[5];
    s = row_input(tx);
    if (!s) s = need_float(ty);
    if (!s) s = need_float(tm);
    if (!s) s = need_float(tr);
    if (!s) s = need_float(tg);
    if (!s && tb->st) s = need_float(tb);
    if (!s) s = same_dims(ty, tx);
    if (!s) s = need_stats(tm, tx);
    if (!s) s = need_stats(tr, tx);
    if (!s) s = need_vector(tg, tx);
    if (!s && tb->st) s = need_vector(tb, tx);
    int64_t rows = rows_of(tx), dim = last_of(tx);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *Y = stage_write(&g, ty, d), *M = stage_write(&g, tm, d), *R = stage_write(&g, tr, d);
        const float *X = stage_read(&g, tx, d), *G = stage_read(&g, tg, d);
        const float *B = tb->st ? stage_read(&g, tb, d) : NULL;
        if (!Y || !M || !R || !X || !G || (tb->st && !B)) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = X + r * dim;
                double sum = 0, ss = 0;
                for (int64_t j = 0; j < dim; j++) {
                    double v = xr[j];
                    sum += v;
                    ss += v * v;
                }
                double mu = sum / (double) dim;
                double var = ss / (double) dim - mu * mu;
                if (var < 0.0) var = 0.0;
                float rs = (float) (1.0 / sqrt(var + (double) eps));
                float mf = (float) mu;
                float *yr = Y + r * dim;
                for (int64_t j = 0; j < dim; j++) {
                    float xhat = (xr[j] - mf) * rs;
                    yr[j] = xhat * G[j] + (B ? B[j] : 0.0f);
                }
                M[r] = mf;
                R[r] = rs;
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_layernorm_backward_input(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x,
                                                   ttpipe_tensor gamma, ttpipe_tensor mean, ttpipe_tensor rstd) {
    static const char *const names_[] = {"dx", "dy", "x", "gamma", "mean", "rstd"};
    OP_BEGIN("ttpipe_layernorm_backward_input", 0, dx, dy, x, gamma, mean, rstd);
    tv *tdx = &c.t[0], *tdy = &c.t[1], *tx = &c.t[2], *tg = &c.t[3], *tm = &c.t[4], *tr = &c.t[5];
    s = row_input(tx);
    if (!s) s = need_float(tdx);
    if (!s) s = need_float(tdy);
    if (!s) s = need_float(tg);
    if (!s) s = need_float(tm);
    if (!s) s = need_float(tr);
    if (!s) s = same_dims(tdx, tx);
    if (!s) s = same_dims(tdy, tx);
    if (!s) s = need_vector(tg, tx);
    if (!s) s = need_stats(tm, tx);
    if (!s) s = need_stats(tr, tx);
    int64_t rows = rows_of(tx), dim = last_of(tx);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *DX = stage_write(&g, tdx, d);
        const float *DY = stage_read(&g, tdy, d), *X = stage_read(&g, tx, d), *G = stage_read(&g, tg, d);
        const float *M = stage_read(&g, tm, d), *R = stage_read(&g, tr, d);
        if (!DX || !DY || !X || !G || !M || !R) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = X + r * dim, *dyr = DY + r * dim;
                float m = M[r], rs = R[r];
                double sg = 0, sgx = 0;
                for (int64_t j = 0; j < dim; j++) {
                    double gj = G[j] * dyr[j];
                    sg += gj;
                    sgx += gj * (xr[j] - m) * rs; /* (x - m) in float, the products in double: as the cpu backend */
                }
                float mg = (float) (sg / (double) dim), mgx = (float) (sgx / (double) dim);
                float *dxr = DX + r * dim;
                for (int64_t j = 0; j < dim; j++) {
                    float xhat = (xr[j] - m) * rs;
                    float gj = G[j] * dyr[j];
                    dxr[j] = rs * (gj - mg - xhat * mgx);
                }
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_layernorm_backward_weight(ttpipe_tensor dy, ttpipe_tensor x, ttpipe_tensor mean,
                                                    ttpipe_tensor rstd, ttpipe_tensor d_gamma, ttpipe_tensor d_beta,
                                                    int32_t accumulate) {
    static const char *const names_[] = {"dy", "x", "mean", "rstd", "d_gamma", "d_beta"};
    OP_BEGIN("ttpipe_layernorm_backward_weight", (1u << 4) | (1u << 5), dy, x, mean, rstd, d_gamma, d_beta);
    tv *tdy = &c.t[0], *tx = &c.t[1], *tm = &c.t[2], *tr = &c.t[3], *tdg = &c.t[4], *tdb = &c.t[5];
    s = row_input(tx);
    if (!s && !tdg->st && !tdb->st) s = err(TTPIPE_E_INVALID_ARGUMENT, "d_gamma and d_beta are both null");
    if (!s) s = need_float(tdy);
    if (!s) s = need_float(tm);
    if (!s) s = need_float(tr);
    if (!s && tdg->st) s = need_float(tdg);
    if (!s && tdb->st) s = need_float(tdb);
    if (!s) s = same_dims(tdy, tx);
    if (!s) s = need_stats(tm, tx);
    if (!s) s = need_stats(tr, tx);
    if (!s && tdg->st) s = need_vector(tdg, tx);
    if (!s && tdb->st) s = need_vector(tdb, tx);
    if (!s) s = distinct_storage(tdg, tdb);
    int64_t rows = rows_of(tx), dim = last_of(tx);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *DY = stage_read(&g, tdy, d), *X = stage_read(&g, tx, d), *M = stage_read(&g, tm, d),
                    *R = stage_read(&g, tr, d);
        float *DG = !tdg->st ? NULL : accumulate ? stage_update(&g, tdg, d) : stage_write(&g, tdg, d);
        float *DB = !tdb->st ? NULL : accumulate ? stage_update(&g, tdb, d) : stage_write(&g, tdb, d);
        if (!DY || !X || !M || !R || (tdg->st && !DG) || (tdb->st && !DB)) {
            s = TTPIPE_E_HOST;
        } else {
            if (!accumulate) {
                if (DG) memset(DG, 0, sizeof(float) * (size_t) dim);
                if (DB) memset(DB, 0, sizeof(float) * (size_t) dim);
            }
            for (int64_t r = 0; r < rows; r++) {
                const float *dyr = DY + r * dim, *xr = X + r * dim;
                float m = M[r], rs = R[r];
                for (int64_t j = 0; j < dim; j++) {
                    if (DG) DG[j] += dyr[j] * (xr[j] - m) * rs;
                    if (DB) DB[j] += dyr[j];
                }
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_rmsnorm(ttpipe_tensor y, ttpipe_tensor rstd, ttpipe_tensor x, ttpipe_tensor gamma, float eps) {
    static const char *const names_[] = {"y", "rstd", "x", "gamma"};
    OP_BEGIN("ttpipe_rmsnorm", 0, y, rstd, x, gamma);
    tv *ty = &c.t[0], *tr = &c.t[1], *tx = &c.t[2], *tg = &c.t[3];
    s = row_input(tx);
    if (!s) s = need_float(ty);
    if (!s) s = need_float(tr);
    if (!s) s = need_float(tg);
    if (!s) s = same_dims(ty, tx);
    if (!s) s = need_stats(tr, tx);
    if (!s) s = need_vector(tg, tx);
    int64_t rows = rows_of(tx), dim = last_of(tx);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *Y = stage_write(&g, ty, d), *R = stage_write(&g, tr, d);
        const float *X = stage_read(&g, tx, d), *G = stage_read(&g, tg, d);
        if (!Y || !R || !X || !G) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = X + r * dim;
                double ss = 0;
                for (int64_t j = 0; j < dim; j++) ss += (double) xr[j] * xr[j];
                float rs = (float) (1.0 / sqrt(ss / (double) dim + (double) eps));
                float *yr = Y + r * dim;
                for (int64_t j = 0; j < dim; j++) yr[j] = xr[j] * rs * G[j];
                R[r] = rs;
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_rmsnorm_backward_input(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x,
                                                 ttpipe_tensor gamma, ttpipe_tensor rstd) {
    static const char *const names_[] = {"dx", "dy", "x", "gamma", "rstd"};
    OP_BEGIN("ttpipe_rmsnorm_backward_input", 0, dx, dy, x, gamma, rstd);
    tv *tdx = &c.t[0], *tdy = &c.t[1], *tx = &c.t[2], *tg = &c.t[3], *tr = &c.t[4];
    s = row_input(tx);
    if (!s) s = need_float(tdx);
    if (!s) s = need_float(tdy);
    if (!s) s = need_float(tg);
    if (!s) s = need_float(tr);
    if (!s) s = same_dims(tdx, tx);
    if (!s) s = same_dims(tdy, tx);
    if (!s) s = need_vector(tg, tx);
    if (!s) s = need_stats(tr, tx);
    int64_t rows = rows_of(tx), dim = last_of(tx);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *DX = stage_write(&g, tdx, d);
        const float *DY = stage_read(&g, tdy, d), *X = stage_read(&g, tx, d), *G = stage_read(&g, tg, d),
                    *R = stage_read(&g, tr, d);
        if (!DX || !DY || !X || !G || !R) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = X + r * dim, *dyr = DY + r * dim;
                float rs = R[r];
                double sgx = 0;
                for (int64_t j = 0; j < dim; j++) sgx += (double) G[j] * dyr[j] * xr[j] * rs;
                float mgx = (float) (sgx / (double) dim);
                float *dxr = DX + r * dim;
                for (int64_t j = 0; j < dim; j++) {
                    float xhat = xr[j] * rs;
                    dxr[j] = rs * (G[j] * dyr[j] - xhat * mgx);
                }
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_rmsnorm_backward_weight(ttpipe_tensor dy, ttpipe_tensor x, ttpipe_tensor rstd,
                                                  ttpipe_tensor d_gamma, int32_t accumulate) {
    static const char *const names_[] = {"dy", "x", "rstd", "d_gamma"};
    OP_BEGIN("ttpipe_rmsnorm_backward_weight", 0, dy, x, rstd, d_gamma);
    tv *tdy = &c.t[0], *tx = &c.t[1], *tr = &c.t[2], *tdg = &c.t[3];
    s = row_input(tx);
    if (!s) s = need_float(tdy);
    if (!s) s = need_float(tr);
    if (!s) s = need_float(tdg);
    if (!s) s = same_dims(tdy, tx);
    if (!s) s = need_stats(tr, tx);
    if (!s) s = need_vector(tdg, tx);
    int64_t rows = rows_of(tx), dim = last_of(tx);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *DY = stage_read(&g, tdy, d), *X = stage_read(&g, tx, d), *R = stage_read(&g, tr, d);
        float *DG = accumulate ? stage_update(&g, tdg, d) : stage_write(&g, tdg, d);
        if (!DY || !X || !R || !DG) {
            s = TTPIPE_E_HOST;
        } else {
            if (!accumulate) memset(DG, 0, sizeof(float) * (size_t) dim);
            for (int64_t r = 0; r < rows; r++) {
                const float *dyr = DY + r * dim, *xr = X + r * dim;
                float rs = R[r];
                for (int64_t j = 0; j < dim; j++) DG[j] += dyr[j] * xr[j] * rs;
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

/* ---- softmax, activations, rotary ------------------------------------------------------------------------ */

TTPIPE_API int32_t ttpipe_softmax(ttpipe_tensor y, ttpipe_tensor x, float scale, int32_t causal, int32_t p0, int32_t p1) {
    static const char *const names_[] = {"y", "x"};
    OP_BEGIN("ttpipe_softmax", 0, y, x);
    tv *ty = &c.t[0], *tx = &c.t[1];
    s = row_input(tx);
    if (!s) s = need_float(ty);
    if (!s) s = same_dims(ty, tx);
    if (!s) s = check_placements(tx->sub, tx->rank, p0, p1, 0);
    if (!s && axis_of_dim(p0, p1, tx->rank - 1) >= 0) s = err(TTPIPE_E_INVALID_ARGUMENT, "the last dim is sharded");
    if (!s && causal && tx->rank < 2) s = err(TTPIPE_E_INVALID_ARGUMENT, "causal softmax needs x [..., Tq, Tk]");
    int64_t rows = rows_of(tx), tk = last_of(tx);
    int32_t rank = tx->rank;
    int64_t tq_local = rank >= 2 ? tx->dims[rank - 2] : 1;
    int32_t q_axis = rank >= 2 ? axis_of_dim(p0, p1, rank - 2) : -1;
    int64_t tq_global = q_axis < 0 ? tq_local : tq_local * axis_size(tx->sub, q_axis);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *Y = stage_write(&g, ty, d);
        const float *X = stage_read(&g, tx, d);
        if (!Y || !X) {
            s = TTPIPE_E_HOST;
        } else {
            int64_t q_off = q_axis < 0 ? 0 : (int64_t) coord_along(tx->sub, d, q_axis) * tq_local;
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = X + r * tk;
                float *yr = Y + r * tk;
                int64_t valid = tk;
                if (causal) {
                    int64_t q = r % tq_local + q_off;
                    valid = q + tk - tq_global + 1;
                    if (valid > tk) valid = tk;
                    if (valid < 0) valid = 0;
                }
                float mx = -__builtin_inff();
                for (int64_t j = 0; j < valid; j++) {
                    float v = scale * xr[j];
                    if (v > mx) mx = v;
                }
                double sum = 0;
                for (int64_t j = 0; j < valid; j++) {
                    float e = fexp(scale * xr[j] - mx);
                    yr[j] = e;
                    sum += e;
                }
                float inv = (float) (1.0 / sum);
                for (int64_t j = 0; j < valid; j++) yr[j] *= inv;
                for (int64_t j = valid; j < tk; j++) yr[j] = 0.0f;
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_softmax_backward(ttpipe_tensor dx, ttpipe_tensor y, ttpipe_tensor dy, float scale) {
    static const char *const names_[] = {"dx", "y", "dy"};
    OP_BEGIN("ttpipe_softmax_backward", 0, dx, y, dy);
    tv *tdx = &c.t[0], *ty = &c.t[1], *tdy = &c.t[2];
    s = row_input(ty);
    if (!s) s = need_float(tdx);
    if (!s) s = need_float(tdy);
    if (!s) s = same_dims(tdx, ty);
    if (!s) s = same_dims(tdy, ty);
    int64_t rows = rows_of(ty), dim = last_of(ty);
    for (int32_t d = 0; !s && d < ty->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *DX = stage_write(&g, tdx, d);
        const float *Y = stage_read(&g, ty, d), *DY = stage_read(&g, tdy, d);
        if (!DX || !Y || !DY) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                const float *yr = Y + r * dim, *dyr = DY + r * dim;
                double sum = 0;
                for (int64_t j = 0; j < dim; j++) sum += (double) dyr[j] * yr[j];
                float sf = (float) sum;
                float *dxr = DX + r * dim;
                for (int64_t j = 0; j < dim; j++) dxr[j] = scale * yr[j] * (dyr[j] - sf);
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

typedef enum { GELU, GELU_BW, SILU, SILU_BW } activation;

static int32_t activation_op(const char *fn, activation f, ttpipe_tensor out, ttpipe_tensor dy, ttpipe_tensor x) {
    static const char *const names_fw[] = {"out", "x"};
    static const char *const names_bw[] = {"dx", "dy", "x"};
    int backward = f == GELU_BW || f == SILU_BW;
    enter_fn(fn);
    opctx c;
    uint64_t h[] = {out, backward ? dy : x, x};
    int s = op_begin(&c, backward ? 3 : 2, h, backward ? names_bw : names_fw, 0, SAME_SUBMESH);
    if (s) return s;
    tv *to = &c.t[0], *tx = &c.t[backward ? 2 : 1], *tdy = backward ? &c.t[1] : NULL;
    s = need_float(to);
    if (!s) s = need_float(tx);
    if (!s && tdy) s = need_float(tdy);
    if (!s) s = same_dims(to, tx);
    if (!s && tdy) s = same_dims(tdy, tx);
    int64_t n = tx->numel;
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *O = stage_write(&g, to, d);
        const float *X = stage_read(&g, tx, d);
        const float *DY = tdy ? stage_read(&g, tdy, d) : NULL;
        if (!O || !X || (tdy && !DY)) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t i = 0; i < n; i++) {
                float v = X[i];
                switch (f) {
                    case GELU: {
                        float u = GELU_C * (v + GELU_A * v * v * v);
                        O[i] = v * fsigmoid(2.0f * u);
                        break;
                    }
                    case GELU_BW: {
                        float u = GELU_C * (v + GELU_A * v * v * v);
                        float du = GELU_C * (1.0f + 3.0f * GELU_A * v * v);
                        float sg = fsigmoid(2.0f * u);
                        O[i] = DY[i] * (sg + 2.0f * v * sg * (1.0f - sg) * du);
                        break;
                    }
                    case SILU:
                        O[i] = v * fsigmoid(v);
                        break;
                    case SILU_BW: {
                        float sg = fsigmoid(v);
                        O[i] = DY[i] * sg * (1.0f + v * (1.0f - sg));
                        break;
                    }
                }
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_gelu(ttpipe_tensor out, ttpipe_tensor x) {
    return activation_op("ttpipe_gelu", GELU, out, 0, x);
}

TTPIPE_API int32_t ttpipe_gelu_backward(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x) {
    return activation_op("ttpipe_gelu_backward", GELU_BW, dx, dy, x);
}

TTPIPE_API int32_t ttpipe_silu(ttpipe_tensor out, ttpipe_tensor x) {
    return activation_op("ttpipe_silu", SILU, out, 0, x);
}

TTPIPE_API int32_t ttpipe_silu_backward(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x) {
    return activation_op("ttpipe_silu_backward", SILU_BW, dx, dy, x);
}

TTPIPE_API int32_t ttpipe_rope(ttpipe_tensor out, ttpipe_tensor x, float theta, int32_t inverse, int32_t p0, int32_t p1) {
    static const char *const names_[] = {"out", "x"};
    OP_BEGIN("ttpipe_rope", 0, out, x);
    tv *to = &c.t[0], *tx = &c.t[1];
    s = need_float(to);
    if (!s) s = need_float(tx);
    if (!s && (tx->rank != 4 || tx->dims[3] % 2 != 0)) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "x must be [B, H, T, hd] with an even hd");
    }
    if (!s) s = same_dims(to, tx);
    if (!s) s = distinct_storage(to, tx);
    if (!s) s = check_placements(tx->sub, 4, p0, p1, 0);
    if (!s && axis_of_dim(p0, p1, 3) >= 0) s = err(TTPIPE_E_INVALID_ARGUMENT, "hd (dim 3) is sharded");
    if (s) return op_end(&c, s);
    int64_t hd = tx->dims[3], half = hd / 2, t_local = tx->dims[2], rows = rows_of(tx);
    int32_t t_axis = axis_of_dim(p0, p1, 2);
    float *cosv = malloc(sizeof(float) * (size_t) (t_local * half + 1));
    float *sinv = malloc(sizeof(float) * (size_t) (t_local * half + 1));
    if (!cosv || !sinv) s = err_host(8 * t_local * half);
    float sign = inverse ? -1.0f : 1.0f;
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        int64_t t_off = t_axis < 0 ? 0 : (int64_t) coord_along(tx->sub, d, t_axis) * t_local;
        for (int64_t i = 0; i < half; i++) {
            double freq = pow((double) theta, -2.0 * (double) i / (double) hd);
            for (int64_t t = 0; t < t_local; t++) {
                double angle = (double) (t + t_off) * freq;
                cosv[t * half + i] = (float) cos(angle);
                sinv[t * half + i] = (float) sin(angle);
            }
        }
        staging g;
        staging_init(&g);
        float *O = stage_write(&g, to, d);
        const float *X = stage_read(&g, tx, d);
        if (!O || !X) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = X + r * hd;
                float *orow = O + r * hd;
                int64_t tb = (r % t_local) * half;
                for (int64_t i = 0; i < half; i++) {
                    float cs = cosv[tb + i], sn = sign * sinv[tb + i];
                    float x0 = xr[2 * i], x1 = xr[2 * i + 1];
                    orow[2 * i] = x0 * cs - x1 * sn;
                    orow[2 * i + 1] = x0 * sn + x1 * cs;
                }
            }
        }
        staging_end(&g, !s);
    }
    free(cosv);
    free(sinv);
    return op_end(&c, s);
}

/* ---- elementwise and reductions ------------------------------------------------------------------------- */

static int32_t binary_op(const char *fn, int mul, ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b) {
    static const char *const names_[] = {"out", "a", "b"};
    OP_BEGIN(fn, 0, out, a, b);
    tv *to = &c.t[0], *ta = &c.t[1], *tb = &c.t[2];
    s = need_float(to);
    if (!s) s = need_float(ta);
    if (!s) s = need_float(tb);
    if (!s) s = same_dims(to, ta);
    int fits = tb->rank <= ta->rank;
    for (int32_t i = 1; fits && i <= tb->rank; i++) fits = tb->dims[tb->rank - i] == ta->dims[ta->rank - i];
    if (!s && !fits) s = dims_str_err("do not broadcast: b must have a's shape or a's trailing dims", ta, tb);
    if (!s && to->st == tb->st && to->st != ta->st) s = err(TTPIPE_E_INVALID_ARGUMENT, "out shares memory with b");
    int64_t n = ta->numel, nb = tb->numel;
    for (int32_t d = 0; !s && d < ta->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *A = stage_read(&g, ta, d), *B = stage_read(&g, tb, d);
        float *O = stage_write(&g, to, d);
        if (!A || !B || !O) {
            s = TTPIPE_E_HOST;
        } else if (nb == n) {
            if (mul) for (int64_t i = 0; i < n; i++) O[i] = A[i] * B[i];
            else for (int64_t i = 0; i < n; i++) O[i] = A[i] + B[i];
        } else if (nb > 0) {
            for (int64_t base = 0; base < n; base += nb) {
                if (mul) for (int64_t j = 0; j < nb; j++) O[base + j] = A[base + j] * B[j];
                else for (int64_t j = 0; j < nb; j++) O[base + j] = A[base + j] + B[j];
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_add(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b) {
    return binary_op("ttpipe_add", 0, out, a, b);
}

TTPIPE_API int32_t ttpipe_mul(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b) {
    return binary_op("ttpipe_mul", 1, out, a, b);
}

TTPIPE_API int32_t ttpipe_scale(ttpipe_tensor out, ttpipe_tensor a, float sc) {
    static const char *const names_[] = {"out", "a"};
    OP_BEGIN("ttpipe_scale", 0, out, a);
    tv *to = &c.t[0], *ta = &c.t[1];
    s = need_float(to);
    if (!s) s = need_float(ta);
    if (!s) s = same_dims(to, ta);
    for (int32_t d = 0; !s && d < ta->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *A = stage_read(&g, ta, d);
        float *O = stage_write(&g, to, d);
        if (!A || !O) s = TTPIPE_E_HOST;
        else for (int64_t i = 0; i < ta->numel; i++) O[i] = sc * A[i];
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_add_scaled(ttpipe_tensor a, ttpipe_tensor b, float alpha) {
    static const char *const names_[] = {"a", "b"};
    OP_BEGIN("ttpipe_add_scaled", 0, a, b);
    tv *ta = &c.t[0], *tb = &c.t[1];
    s = need_float(ta);
    if (!s) s = need_float(tb);
    if (!s) s = same_dims(ta, tb);
    for (int32_t d = 0; !s && d < ta->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *B = stage_read(&g, tb, d);
        float *A = stage_update(&g, ta, d);
        if (!A || !B) s = TTPIPE_E_HOST;
        else for (int64_t i = 0; i < ta->numel; i++) A[i] = A[i] + alpha * B[i];
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_sum_rows(ttpipe_tensor x, ttpipe_tensor out, int32_t accumulate) {
    static const char *const names_[] = {"x", "out"};
    OP_BEGIN("ttpipe_sum_rows", 0, x, out);
    tv *tx = &c.t[0], *to = &c.t[1];
    s = row_input(tx);
    if (!s) s = need_float(to);
    if (!s) s = need_vector(to, tx);
    if (!s) s = distinct_storage(to, tx);
    int64_t rows = rows_of(tx), n = last_of(tx);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *X = stage_read(&g, tx, d);
        float *O = accumulate ? stage_update(&g, to, d) : stage_write(&g, to, d);
        if (!X || !O) {
            s = TTPIPE_E_HOST;
        } else {
            if (!accumulate) memset(O, 0, sizeof(float) * (size_t) n);
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = X + r * n;
                for (int64_t j = 0; j < n; j++) O[j] += xr[j];
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

/* out is x's dims with dim d removed, or kept as 1. */
static int need_reduced(const tv *o, const tv *x, int32_t d) {
    int32_t removed[TTPIPE_MAX_RANK], kept[TTPIPE_MAX_RANK];
    for (int32_t i = 0, j = 0; i < x->rank; i++) {
        kept[i] = i == d ? 1 : x->dims[i];
        if (i != d) removed[j++] = x->dims[i];
    }
    if (o->rank == x->rank) return need_dims(o, x->rank, kept);
    return need_dims(o, x->rank - 1, removed);
}

TTPIPE_API int32_t ttpipe_sum(ttpipe_tensor out, ttpipe_tensor x, int32_t dim) {
    static const char *const names_[] = {"out", "x"};
    OP_BEGIN("ttpipe_sum", 0, out, x);
    tv *to = &c.t[0], *tx = &c.t[1];
    int32_t d0 = 0;
    s = need_float(to);
    if (!s) s = need_float(tx);
    if (!s) s = dim_index(tx, dim, &d0);
    if (!s) s = need_reduced(to, tx, d0);
    if (!s) s = distinct_storage(to, tx);
    int64_t outer = 0, k = 0, inner = 0;
    if (!s) around_dim(tx->dims, tx->rank, d0, &outer, &k, &inner);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *X = stage_read(&g, tx, d);
        float *O = stage_write(&g, to, d);
        if (!X || !O) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t o = 0; o < outer; o++) {
                float *orow = O + o * inner;
                for (int64_t i = 0; i < inner; i++) orow[i] = 0.0f;
                for (int64_t kk = 0; kk < k; kk++) {
                    const float *xr = X + (o * k + kk) * inner;
                    for (int64_t i = 0; i < inner; i++) orow[i] += xr[i];
                }
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_sum_squares(ttpipe_tensor x, int32_t p0, int32_t p1, double *out) {
    static const char *const names_[] = {"x"};
    OP_BEGIN("ttpipe_sum_squares", 0, x);
    tv *tx = &c.t[0];
    s = need_float(tx);
    if (!s && !out) s = err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    if (!s) s = check_placements(tx->sub, tx->rank, p0, p1, 0);
    double total = 0;
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        if (!distinct_piece(tx->sub, p0, p1, d)) continue;
        staging g;
        staging_init(&g);
        const float *X = stage_read(&g, tx, d);
        if (!X) {
            s = TTPIPE_E_HOST;
        } else {
            double sum = 0;
            for (int64_t i = 0; i < tx->numel; i++) sum += (double) X[i] * X[i];
            total += sum;
        }
        staging_end(&g, 0);
    }
    if (!s) *out = total;
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_repeat_interleave(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t repeats) {
    static const char *const names_[] = {"out", "x"};
    OP_BEGIN("ttpipe_repeat_interleave", 0, out, x);
    tv *to = &c.t[0], *tx = &c.t[1];
    int32_t d0 = 0;
    s = need_float(to);
    if (!s) s = need_float(tx);
    if (!s) s = dim_index(tx, dim, &d0);
    if (!s && (repeats < 1 || (int64_t) tx->dims[d0] * repeats > INT32_MAX)) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "repeats %d must be >= 1 and keep the dim below 2^31", repeats);
    }
    if (!s) {
        int32_t expect[TTPIPE_MAX_RANK];
        memcpy(expect, tx->dims, sizeof expect);
        expect[d0] = tx->dims[d0] * repeats;
        s = need_dims(to, tx->rank, expect);
    }
    if (!s) s = distinct_storage(to, tx);
    int64_t outer = 0, k = 0, inner = 0;
    if (!s) around_dim(tx->dims, tx->rank, d0, &outer, &k, &inner);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *X = stage_read(&g, tx, d);
        float *O = stage_write(&g, to, d);
        if (!X || !O) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t sl = 0; sl < outer * k; sl++) {
                for (int32_t j = 0; j < repeats; j++) {
                    memcpy(O + (sl * repeats + j) * inner, X + sl * inner, sizeof(float) * (size_t) inner);
                }
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_sum_groups(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t group_size) {
    static const char *const names_[] = {"out", "x"};
    OP_BEGIN("ttpipe_sum_groups", 0, out, x);
    tv *to = &c.t[0], *tx = &c.t[1];
    int32_t d0 = 0;
    s = need_float(to);
    if (!s) s = need_float(tx);
    if (!s) s = dim_index(tx, dim, &d0);
    if (!s && (group_size < 1 || tx->dims[d0] % group_size != 0)) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "group size %d does not divide local dim %d (size %d)", group_size, d0,
                tx->dims[d0]);
    }
    if (!s) {
        int32_t expect[TTPIPE_MAX_RANK];
        memcpy(expect, tx->dims, sizeof expect);
        expect[d0] = tx->dims[d0] / group_size;
        s = need_dims(to, tx->rank, expect);
    }
    if (!s) s = distinct_storage(to, tx);
    int64_t outer = 0, k = 0, inner = 0;
    if (!s) around_dim(tx->dims, tx->rank, d0, &outer, &k, &inner);
    int64_t k_out = group_size > 0 ? k / group_size : 0;
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        const float *X = stage_read(&g, tx, d);
        float *O = stage_write(&g, to, d);
        if (!X || !O) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t sl = 0; sl < outer * k_out; sl++) {
                const float *xb = X + sl * group_size * inner;
                float *ob = O + sl * inner;
                for (int64_t i = 0; i < inner; i++) {
                    float acc = 0.0f;
                    for (int32_t j = 0; j < group_size; j++) acc += xb[j * inner + i];
                    ob[i] = acc;
                }
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

/* ---- loss ------------------------------------------------------------------------------------------------ */

static int ce_check(const tv *tl, const tv *tt, int32_t ignore_index) {
    int s = row_input(tl);
    if (!s) s = need_int(tt);
    if (!s) s = need_stats(tt, tl);
    if (!s) s = check_ids(tt, last_of(tl), 1, ignore_index, "target");
    return s;
}

static double log_sum_exp(const float *x, int64_t n) {
    float mx = -__builtin_inff();
    for (int64_t j = 0; j < n; j++) if (x[j] > mx) mx = x[j];
    double sum = 0;
    for (int64_t j = 0; j < n; j++) sum += fexp(x[j] - mx);
    return (double) mx + log(sum);
}

TTPIPE_API int32_t ttpipe_cross_entropy(ttpipe_tensor logits, ttpipe_tensor targets, int32_t ignore_index, int32_t p0,
                                        int32_t p1, double *sum, int64_t *count) {
    static const char *const names_[] = {"logits", "targets"};
    OP_BEGIN("ttpipe_cross_entropy", 0, logits, targets);
    tv *tl = &c.t[0], *tt = &c.t[1];
    s = (!sum || !count) ? err(TTPIPE_E_INVALID_ARGUMENT, "sum or count is null") : TTPIPE_OK;
    if (!s) s = ce_check(tl, tt, ignore_index);
    if (!s) s = check_placements(tl->sub, tl->rank, p0, p1, 0);
    if (!s && axis_of_dim(p0, p1, tl->rank - 1) >= 0) s = err(TTPIPE_E_INVALID_ARGUMENT, "the last dim is sharded");
    int64_t rows = rows_of(tl), v = last_of(tl), n = 0;
    double total = 0;
    for (int32_t d = 0; !s && d < tl->sub->n; d++) {
        if (!distinct_piece(tl->sub, p0, p1, d)) continue;
        staging g;
        staging_init(&g);
        const float *L = stage_read(&g, tl, d);
        const int32_t *T = int_piece(tt, d);
        if (!L) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                if (T[r] == ignore_index) continue;
                total += log_sum_exp(L + r * v, v) - L[r * v + T[r]];
                n++;
            }
        }
        staging_end(&g, 0);
    }
    if (!s) {
        *sum = total;
        *count = n;
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_cross_entropy_backward(ttpipe_tensor d_logits, ttpipe_tensor logits, ttpipe_tensor targets,
                                                 int32_t ignore_index, float scale) {
    static const char *const names_[] = {"d_logits", "logits", "targets"};
    OP_BEGIN("ttpipe_cross_entropy_backward", 0, d_logits, logits, targets);
    tv *tdl = &c.t[0], *tl = &c.t[1], *tt = &c.t[2];
    s = need_float(tdl);
    if (!s) s = ce_check(tl, tt, ignore_index);
    if (!s) s = same_dims(tdl, tl);
    if (!s) s = distinct_storage(tdl, tl);
    int64_t rows = rows_of(tl), v = last_of(tl);
    for (int32_t d = 0; !s && d < tl->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *DL = stage_write(&g, tdl, d);
        const float *L = stage_read(&g, tl, d);
        const int32_t *T = int_piece(tt, d);
        if (!DL || !L) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                float *dx = DL + r * v;
                const float *x = L + r * v;
                int32_t t = T[r];
                if (t == ignore_index) {
                    memset(dx, 0, sizeof(float) * (size_t) v);
                    continue;
                }
                float mx = -__builtin_inff();
                for (int64_t j = 0; j < v; j++) if (x[j] > mx) mx = x[j];
                double sum = 0;
                for (int64_t j = 0; j < v; j++) {
                    float e = fexp(x[j] - mx);
                    dx[j] = e;
                    sum += e;
                }
                float k = (float) ((double) scale / sum);
                for (int64_t j = 0; j < v; j++) dx[j] *= k;
                dx[t] -= scale;
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

/* ---- dropout --------------------------------------------------------------------------------------------- */

static float dropout_uniform(int64_t seed, int64_t index) {
    uint64_t z = (uint64_t) seed + ((uint64_t) index + 1u) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float) (z >> 40) * 0x1.0p-24f;
}

TTPIPE_API int32_t ttpipe_dropout(ttpipe_tensor out, ttpipe_tensor x, float p, int64_t seed, int64_t element_offset,
                                  int32_t rank, const int32_t *dims, int32_t p0, int32_t p1) {
    static const char *const names_[] = {"out", "x"};
    OP_BEGIN("ttpipe_dropout", 0, out, x);
    tv *to = &c.t[0], *tx = &c.t[1];
    s = need_float(to);
    if (!s) s = need_float(tx);
    if (!s) s = same_dims(to, tx);
    if (!s && !(p >= 0.0f && p < 1.0f)) s = err(TTPIPE_E_INVALID_ARGUMENT, "probability %g must be in [0, 1)", (double) p);
    if (!s && element_offset < 0) s = err(TTPIPE_E_INVALID_ARGUMENT, "element offset %" PRId64 " < 0", element_offset);
    if (!s) s = check_logical(tx, rank, dims, p0, p1, 0);
    float keep_scale = 1.0f / (1.0f - p);
    for (int32_t d = 0; !s && d < tx->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *O = stage_write(&g, to, d);
        const float *X = stage_read(&g, tx, d);
        if (!O || !X) {
            s = TTPIPE_E_HOST;
        } else {
            lpiece lp;
            lpiece_init(&lp, rank, dims, tx->dims, p0, p1, tx->sub, d);
            for (int64_t r = 0; r < lp.rows; r++) {
                int64_t gi = element_offset + lpiece_row(&lp, r), base = r * lp.row_length;
                for (int64_t j = 0; j < lp.row_length; j++) {
                    int keep = dropout_uniform(seed, gi + j) >= p;
                    O[base + j] = keep ? X[base + j] * keep_scale : 0.0f;
                }
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

/* ---- optimizers ------------------------------------------------------------------------------------------ */

TTPIPE_API int32_t ttpipe_adamw(ttpipe_tensor param, ttpipe_tensor grad, ttpipe_tensor exp_avg, ttpipe_tensor exp_avg_sq,
                                float lr, float beta1, float beta2, float eps, float weight_decay, int32_t step,
                                float grad_scale) {
    static const char *const names_[] = {"param", "grad", "exp_avg", "exp_avg_sq"};
    OP_BEGIN("ttpipe_adamw", 0, param, grad, exp_avg, exp_avg_sq);
    for (int i = 0; i < 4 && !s; i++) s = need_float(&c.t[i]);
    for (int i = 1; i < 4 && !s; i++) s = same_dims(&c.t[i], &c.t[0]);
    for (int i = 0; i < 4 && !s; i++) {
        for (int j = i + 1; j < 4 && !s; j++) s = distinct_storage(&c.t[i], &c.t[j]);
    }
    if (!s && step < 1) s = err(TTPIPE_E_INVALID_ARGUMENT, "step %d must be >= 1", step);
    tv *tp = &c.t[0], *tg = &c.t[1], *tm = &c.t[2], *tv_ = &c.t[3];
    float decay = 1.0f - lr * weight_decay;
    float step_size = (float) ((double) lr / (1.0 - pow((double) beta1, step)));
    float bc2_sqrt = (float) sqrt(1.0 - pow((double) beta2, step));
    for (int32_t d = 0; !s && d < tp->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *P = stage_update(&g, tp, d), *M = stage_update(&g, tm, d), *V = stage_update(&g, tv_, d);
        const float *G = stage_read(&g, tg, d);
        if (!P || !M || !V || !G) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t i = 0; i < tp->numel; i++) {
                float gi = G[i] * grad_scale;
                float mi = beta1 * M[i] + (1.0f - beta1) * gi;
                float vi = beta2 * V[i] + (1.0f - beta2) * gi * gi;
                M[i] = mi;
                V[i] = vi;
                float denom = (float) sqrt((double) vi) / bc2_sqrt + eps;
                P[i] = P[i] * decay - step_size * mi / denom;
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_sgd(ttpipe_tensor param, ttpipe_tensor grad, ttpipe_tensor momentum_buffer, float lr,
                              float momentum, float dampening, float weight_decay, int32_t nesterov, int32_t step,
                              float grad_scale) {
    static const char *const names_[] = {"param", "grad", "momentum_buffer"};
    OP_BEGIN("ttpipe_sgd", 1u << 2, param, grad, momentum_buffer);
    tv *tp = &c.t[0], *tg = &c.t[1], *tb = &c.t[2];
    s = need_float(tp);
    if (!s) s = need_float(tg);
    if (!s) s = same_dims(tg, tp);
    if (!s && momentum != 0.0f && !tb->st) s = err(TTPIPE_E_INVALID_ARGUMENT, "momentum %g needs a momentum buffer",
                                                    (double) momentum);
    int use_buf = momentum != 0.0f;
    if (!s && use_buf) s = need_float(tb);
    if (!s && use_buf) s = same_dims(tb, tp);
    if (!s) s = distinct_storage(tp, tg);
    if (!s && use_buf) s = distinct_storage(tp, tb);
    if (!s && use_buf) s = distinct_storage(tg, tb);
    if (!s && step < 1) s = err(TTPIPE_E_INVALID_ARGUMENT, "step %d must be >= 1", step);
    float damp = 1.0f - dampening;
    int first = step == 1;
    for (int32_t d = 0; !s && d < tp->sub->n; d++) {
        staging g;
        staging_init(&g);
        float *P = stage_update(&g, tp, d);
        const float *G = stage_read(&g, tg, d);
        float *B = use_buf ? stage_update(&g, tb, d) : NULL;
        if (!P || !G || (use_buf && !B)) {
            s = TTPIPE_E_HOST;
        } else {
            for (int64_t i = 0; i < tp->numel; i++) {
                float w = P[i];
                float dd = G[i] * grad_scale + weight_decay * w;
                if (use_buf) {
                    float b = first ? dd : momentum * B[i] + damp * dd;
                    B[i] = b;
                    dd = nesterov ? dd + momentum * b : b;
                }
                P[i] = w - lr * dd;
            }
        }
        staging_end(&g, !s);
    }
    return op_end(&c, s);
}
