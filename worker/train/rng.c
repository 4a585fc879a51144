/* kolo_train_rng: the non-inline part of the seeded generator (normal variates). */
#include "worker/train/rng.h"

#include <math.h>

double kolo_train_rng_normal(kolo_train_rng *rng) {
  double u1 = kolo_train_rng_uniform(rng);
  double u2 = kolo_train_rng_uniform(rng);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
