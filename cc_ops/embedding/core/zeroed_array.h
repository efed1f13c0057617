// A fixed-size array of zero bytes whose memory is only resident once used.
//
// A worker cache is sized for its capacity when made, but fills over
// training, and a cache that only evaluates (the chief's) never fills.
// std::vector value-initializes every element, writing every page at once: a
// 10M-row cache was 3.4 GB resident before its first lookup. Pages mapped
// fresh from the kernel read as zero and take no memory until written, so
// the array costs what the slots in use touch. (Not calloc: glibc serves
// blocks below its mmap threshold, which grows to 32 MB as large blocks are
// freed, from the heap, and clears them page by page.)
#ifndef HET_TF_EMBEDDING_CORE_ZEROED_ARRAY_H_
#define HET_TF_EMBEDDING_CORE_ZEROED_ARRAY_H_

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <type_traits>

namespace het {

// T must be valid as all zero bytes, with nothing to destroy.
template <typename T>
class ZeroedArray {
  static_assert(std::is_trivially_copyable<T>::value && std::is_trivially_destructible<T>::value,
                "ZeroedArray holds plain data");

 public:
  explicit ZeroedArray(size_t size) : size_(size) {
    if (size == 0) return;
    void* p = mmap(nullptr, Bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
  }
  ~ZeroedArray() {
    if (data_ != nullptr) munmap(data_, Bytes());
  }
  ZeroedArray(const ZeroedArray&) = delete;
  ZeroedArray& operator=(const ZeroedArray&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  size_t size() const { return size_; }

 private:
  size_t Bytes() const { return size_ * sizeof(T); }
  T* data_ = nullptr;
  size_t size_;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_ZEROED_ARRAY_H_
