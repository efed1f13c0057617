// The TensorFlow version this library is compiled against, as a string the
// Python loader can find in the file without loading it: loading a library
// built for another TensorFlow can fail before any op could be asked.
#include "tensorflow/core/public/version.h"

namespace het {

__attribute__((used)) extern const char kBuiltForTensorflow[] =
    "HET_TF_BUILT_FOR_TENSORFLOW=" TF_STR(TF_MAJOR_VERSION) "." TF_STR(TF_MINOR_VERSION) "." TF_STR(
        TF_PATCH_VERSION) TF_VERSION_SUFFIX;

}  // namespace het
