/* Prints the part of libkolo's ABI that python/kolo mirrors through ctypes, one fact a
 * line, for test_abi.py: "enum NAME VALUE", "const NAME VALUE", "struct NAME SIZEOF" and
 * "field STRUCT MEMBER OFFSET SIZE". Only the public headers are read (nothing is called). */
#include <stddef.h>
#include <stdio.h>

#include "kolo/engine.h"
#include "kolo/kolo.h"
#include "kolo/log.h"
#include "kolo/mode.h"
#include "kolo/process_set.h"
#include "kolo/status.h"

#define ENUM(name) printf("enum %s %d\n", #name, (int)(name))
#define CONST(name) printf("const %s %lld\n", #name, (long long)(name))
#define STRUCT(type) printf("struct %s %zu\n", #type, sizeof(type))
#define FIELD(type, member)                                               \
  printf("field %s %s %zu %zu\n", #type, #member, offsetof(type, member), \
         sizeof(((type *)0)->member))

static void print_enums(void) {
#define KOLO_ABI_STATUS_(name, value, text) ENUM(name);
  KOLO_STATUS_LIST(KOLO_ABI_STATUS_)
#undef KOLO_ABI_STATUS_
  ENUM(KOLO_UINT8);
  ENUM(KOLO_INT32);
  ENUM(KOLO_INT64);
  ENUM(KOLO_FLOAT16);
  ENUM(KOLO_BFLOAT16);
  ENUM(KOLO_FLOAT32);
  ENUM(KOLO_FLOAT64);
  ENUM(KOLO_INT8);
  ENUM(KOLO_INT16);
  ENUM(KOLO_BOOL);
  ENUM(KOLO_DTYPE_COUNT);
  ENUM(KOLO_SUM);
  ENUM(KOLO_AVG);
  ENUM(KOLO_MIN);
  ENUM(KOLO_MAX);
  ENUM(KOLO_PROD);
  ENUM(KOLO_OP_COUNT);
  ENUM(KOLO_MODE_SYNC);
  ENUM(KOLO_MODE_ASYNC);
  ENUM(KOLO_MODE_LOCAL_SGD);
  ENUM(KOLO_MODE_DILOCO);
  ENUM(KOLO_COMPRESSION_NONE);
  ENUM(KOLO_COMPRESSION_FP16);
  ENUM(KOLO_COMPRESSION_INT8);
  ENUM(KOLO_LOG_ERROR);
  ENUM(KOLO_LOG_WARN);
  ENUM(KOLO_LOG_INFO);
  ENUM(KOLO_LOG_DEBUG);
  CONST(KOLO_NAME_MAX);
  CONST(KOLO_RESULT_MESSAGE_BYTES);
  CONST(KOLO_NCCL_ID_BYTES);
  CONST(KOLO_DEFAULT_TIMEOUT_MS);
  CONST(KOLO_CUDA_LOCAL_DEVICE);
  CONST(KOLO_PROCESS_SET_ID_MAX);
  CONST(KOLO_MODE_MAX_SYNC_EVERY);
  CONST(KOLO_MODE_MAX_STALENESS);
  CONST(KOLO_MODE_MAX_FRAGMENTS);
  CONST(KOLO_OP_BLOCKING);
  CONST(KOLO_OP_STREAM);
}

static void print_structs(void) {
  STRUCT(kolo_ring_spec);
  FIELD(kolo_ring_spec, epoch);
  FIELD(kolo_ring_spec, rank);
  FIELD(kolo_ring_spec, size);
  FIELD(kolo_ring_spec, local_rank);
  FIELD(kolo_ring_spec, local_size);
  FIELD(kolo_ring_spec, peers);
  FIELD(kolo_ring_spec, secret);
  FIELD(kolo_ring_spec, timeout_ms);
  FIELD(kolo_ring_spec, nccl_id);
  STRUCT(kolo_result);
  FIELD(kolo_result, status);
  FIELD(kolo_result, message);
  FIELD(kolo_result, output);
  FIELD(kolo_result, output_count);
  FIELD(kolo_result, last_rank);
  STRUCT(kolo_engine_stats);
  FIELD(kolo_engine_stats, cycles);
  FIELD(kolo_engine_stats, negotiation_ns);
  FIELD(kolo_engine_stats, negotiation_bytes);
  FIELD(kolo_engine_stats, announced);
  FIELD(kolo_engine_stats, cached);
  FIELD(kolo_engine_stats, batches);
  FIELD(kolo_engine_stats, fused_tensors);
  FIELD(kolo_engine_stats, negotiation_work_ns);
  STRUCT(kolo_op_options);
  FIELD(kolo_op_options, name);
  FIELD(kolo_op_options, cuda_stream);
  FIELD(kolo_op_options, flags);
  FIELD(kolo_op_options, prescale);
  FIELD(kolo_op_options, postscale);
  FIELD(kolo_op_options, process_set);
  FIELD(kolo_op_options, alloc);
  FIELD(kolo_op_options, alloc_context);
  STRUCT(kolo_split_options);
  FIELD(kolo_split_options, ranks);
  FIELD(kolo_split_options, n_ranks);
  FIELD(kolo_split_options, id);
  FIELD(kolo_split_options, timeout_ms);
  STRUCT(kolo_mode_spec);
  FIELD(kolo_mode_spec, mode);
  FIELD(kolo_mode_spec, sync_every);
  FIELD(kolo_mode_spec, max_staleness);
  FIELD(kolo_mode_spec, outer_lr);
  FIELD(kolo_mode_spec, outer_momentum);
  FIELD(kolo_mode_spec, nesterov);
  FIELD(kolo_mode_spec, compression);
  FIELD(kolo_mode_spec, fragments);
}

int main(void) {
  print_enums();
  print_structs();
  return 0;
}
