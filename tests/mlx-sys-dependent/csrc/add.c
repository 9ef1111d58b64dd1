/* mlx-c from C, through the headers mlx-sys's DEP_MLX_INCLUDE names. */
#include <string.h>

#include "mlx/c/mlx.h"

/* x + x on the CPU, evaluated; NaN on any error. */
float dependent_twice(float x) {
  float result = 0.0f / 0.0f;
  mlx_stream s = mlx_default_cpu_stream_new();
  mlx_array a = mlx_array_new_float(x);
  mlx_array sum = mlx_array_new();
  if (mlx_add(&sum, a, a, s) == 0 && mlx_array_eval(sum) == 0) {
    mlx_array_item_float32(&result, sum);
  }
  mlx_array_free(sum);
  mlx_array_free(a);
  mlx_stream_free(s);
  return result;
}

/* The MLX version the linked library reports, into buf (NUL-terminated). */
int dependent_version(char* buf, size_t size) {
  mlx_string v = mlx_string_new();
  int status = mlx_version(&v);
  if (status == 0 && size > 0) {
    strncpy(buf, mlx_string_data(v), size - 1);
    buf[size - 1] = '\0';
  }
  mlx_string_free(v);
  return status;
}
