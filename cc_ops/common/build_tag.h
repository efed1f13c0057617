// The TensorFlow version the op library was compiled against.
#ifndef HET_TF_CC_OPS_COMMON_BUILD_TAG_H_
#define HET_TF_CC_OPS_COMMON_BUILD_TAG_H_

namespace het {

// "2.16.2": what HetBuildInfo reports, and what the loader reads from the
// file (build_tag.cc).
const char* BuiltForTensorflow();

}  // namespace het

#endif  // HET_TF_CC_OPS_COMMON_BUILD_TAG_H_
