// Reads the optimizer and initializer attrs that HetTableShard and HetCache
// share.
#ifndef HET_TF_EMBEDDING_KERNELS_OPTIMIZER_ATTRS_H_
#define HET_TF_EMBEDDING_KERNELS_OPTIMIZER_ATTRS_H_

#include <string>

#include "cc_ops/embedding/core/row_initializer.h"
#include "cc_ops/embedding/core/sparse_optimizer.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {

// The optimizer attrs (HET_OPTIMIZER_ATTRS) of a table or of its cache.
inline tensorflow::Status ParseOptimizerAttrs(tensorflow::OpKernelConstruction* ctx,
                                              const std::string& table, OptimizerConfig* c) {
  std::string name;
  TF_RETURN_IF_ERROR(ctx->GetAttr("optimizer", &name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta_1", &c->beta_1));
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta_2", &c->beta_2));
  TF_RETURN_IF_ERROR(ctx->GetAttr("epsilon", &c->epsilon));
  TF_RETURN_IF_ERROR(ctx->GetAttr("initial_accumulator_value", &c->initial_accumulator));
  TF_RETURN_IF_ERROR(ctx->GetAttr("l1", &c->l1));
  TF_RETURN_IF_ERROR(ctx->GetAttr("l2", &c->l2));
  TF_RETURN_IF_ERROR(ctx->GetAttr("learning_rate_power", &c->learning_rate_power));
  TF_RETURN_IF_ERROR(ctx->GetAttr("ftrl_beta", &c->beta));
  std::string constraint;
  TF_RETURN_IF_ERROR(ctx->GetAttr("constraint", &constraint));
  TF_RETURN_IF_ERROR(ctx->GetAttr("constraint_min_value", &c->constraint.min_value));
  TF_RETURN_IF_ERROR(ctx->GetAttr("constraint_max_value", &c->constraint.max_value));
  TF_RETURN_IF_ERROR(ctx->GetAttr("constraint_rate", &c->constraint.rate));
  Status s = ParseOptimizerKind(name, &c->kind);
  if (s.ok()) s = ParseConstraintKind(constraint, &c->constraint.kind);
  if (!s.ok()) return tensorflow::errors::InvalidArgument(TableLabel(table), ": ", s.message());
  return tensorflow::OkStatus();
}

// The initializer attrs (HET_INITIALIZER_ATTRS) of a table or of its cache.
inline tensorflow::Status ParseInitializerAttrs(tensorflow::OpKernelConstruction* ctx,
                                                const std::string& table, InitializerConfig* c) {
  std::string kind;
  TF_RETURN_IF_ERROR(ctx->GetAttr("initializer", &kind));
  TF_RETURN_IF_ERROR(ctx->GetAttr("initializer_a", &c->a));
  TF_RETURN_IF_ERROR(ctx->GetAttr("initializer_b", &c->b));
  TF_RETURN_IF_ERROR(ctx->GetAttr("seed", &c->seed));
  const Status s = ParseInitializerKind(kind, &c->kind);
  if (!s.ok()) return tensorflow::errors::InvalidArgument(TableLabel(table), ": ", s.message());
  return tensorflow::OkStatus();
}

}  // namespace het

#endif  // HET_TF_EMBEDDING_KERNELS_OPTIMIZER_ATTRS_H_
