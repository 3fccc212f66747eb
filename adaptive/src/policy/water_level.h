// The water level of a batch allocation: the smallest t with f(t) >= target,
// for f non-decreasing and piecewise linear (a sum of clamped linear terms).
// Newton steps kept inside a bisection bracket: exact within a linear piece, so
// a decision over thousands of workers takes a few passes instead of ~30
// halvings; the same bracket and stopping rule as plain bisection, so the
// result is the same level to within rel_tol. Thread rule: a pure function.
#pragma once

#include <algorithm>
#include <utility>

namespace groupsgd::adaptive::policy {

// eval(t) returns {f(t), slope of f at t}. Stops when hi - lo <= rel_tol * hi
// or after max_iter evaluations; returns hi (f(hi) >= target when the target is
// reachable). `start`: the first point probed when it lies inside (lo, hi) (a
// neighbouring problem's level: a Newton step from there is usually exact), else
// the middle.
template <class Eval>
double waterLevel(const Eval& eval, double target, double lo, double hi, double rel_tol,
                  int max_iter, double start = -1.0) {
  double t = start > lo && start < hi ? start : 0.5 * (lo + hi);
  bool probed = false;  // the last step probed just below a point that reached the target
  for (int it = 0; it < max_iter && hi - lo > rel_tol * hi; ++it) {
    const std::pair<double, double> fs = eval(t);
    const bool below = fs.first < target;
    (below ? lo : hi) = t;
    double next = 0.5 * (lo + hi);
    if (below && fs.second > 0) {
      // Exact on this linear piece; at least half the tolerance up, so a step
      // that rounding leaves just below the level still closes the bracket.
      next = std::max(t + (target - fs.first) / fs.second, t + 0.5 * rel_tol * hi);
      if (next >= hi) next = 0.5 * (lo + hi);
      probed = false;
    } else if (!below && !probed) {
      // Reached it: probe just below, which closes the bracket when t is the
      // level.
      next = std::max(next, hi - 0.5 * rel_tol * hi);
      probed = true;
    }
    t = next;
  }
  return hi;
}

}  // namespace groupsgd::adaptive::policy
