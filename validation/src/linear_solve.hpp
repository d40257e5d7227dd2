// A small dense linear solve shared by the validation fits (external_memory.cpp, host_pace_fit.cpp).
#pragma once

#include <cmath>
#include <utility>

namespace preflight::validation {

// Solves a x = y for N unknowns (Gauss-Jordan elimination with partial pivoting); false if singular.
template <int N>
bool solve_linear(double a[N][N], double y[N], double x[N]) {
    for (int i = 0; i < N; ++i) {
        int piv = i;
        for (int r = i + 1; r < N; ++r)
            if (std::fabs(a[r][i]) > std::fabs(a[piv][i])) piv = r;
        if (std::fabs(a[piv][i]) < 1e-300) return false;
        std::swap(a[i], a[piv]);
        std::swap(y[i], y[piv]);
        for (int r = 0; r < N; ++r) {
            if (r == i) continue;
            const double f = a[r][i] / a[i][i];
            for (int k = i; k < N; ++k) a[r][k] -= f * a[i][k];
            y[r] -= f * y[i];
        }
    }
    for (int i = 0; i < N; ++i) x[i] = y[i] / a[i][i];
    return true;
}

}  // namespace preflight::validation
