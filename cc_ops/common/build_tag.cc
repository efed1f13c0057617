// The TensorFlow version this library is compiled against, as a string the
// Python loader can find in the file without loading it: loading a library
// built for another TensorFlow can fail before any op could be asked.
#include "cc_ops/common/build_tag.h"

#include "tensorflow/core/public/version.h"

// setup.py passes the version as HET_TF_VERSION: since TensorFlow 2.17 the
// installed headers no longer define TF_MAJOR_VERSION and its kin (TensorFlow's
// own build does). Bazel's build against 2.16 still finds them there.
#ifndef HET_TF_VERSION
#define HET_TF_VERSION     \
  TF_STR(TF_MAJOR_VERSION) \
  "." TF_STR(TF_MINOR_VERSION) "." TF_STR(TF_PATCH_VERSION) TF_VERSION_SUFFIX
#endif

#define HET_TF_TAG "HET_TF_BUILT_FOR_TENSORFLOW="  // _op_library.BUILD_TAG

namespace het {

__attribute__((used)) extern const char kBuiltForTensorflow[] = HET_TF_TAG HET_TF_VERSION;

const char* BuiltForTensorflow() { return kBuiltForTensorflow + sizeof(HET_TF_TAG) - 1; }

}  // namespace het
