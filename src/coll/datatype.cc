// DataType and ReduceOp names and sizes.
#include <fmt/format.h>

#include "remora/communicator.h"

namespace remora {

size_t size_of(DataType type) noexcept {
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8: return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 1;
}

std::string_view to_string(DataType type) noexcept {
  switch (type) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
  }
  return "?";
}

Result<DataType> parse_data_type(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(DataType::kFloat64); ++i) {
    auto t = static_cast<DataType>(i);
    if (name == to_string(t)) return t;
  }
  if (name == "fp16" || name == "half") return DataType::kFloat16;
  if (name == "bf16") return DataType::kBFloat16;
  if (name == "fp32" || name == "float") return DataType::kFloat32;
  if (name == "fp64" || name == "double") return DataType::kFloat64;
  return Status(StatusCode::kInvalidArgument, fmt::format("unknown data type '{}' (int8, uint8, int32, uint32, int64, "
                                                          "uint64, fp16, bf16, fp32, fp64)", name));
}

std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

Result<ReduceOp> parse_reduce_op(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(ReduceOp::kAvg); ++i) {
    auto op = static_cast<ReduceOp>(i);
    if (name == to_string(op)) return op;
  }
  return Status(StatusCode::kInvalidArgument, fmt::format("unknown reduction '{}' (sum, prod, min, max, avg)", name));
}

}  // namespace remora
