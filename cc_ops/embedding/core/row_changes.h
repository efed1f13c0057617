// What changed in a stripe of a shard since its last incremental
// checkpoint: the arena slots whose rows were created or written, and the
// keys of the rows dropped (evicted, expired or erased).
//
// A checkpoint takes the changes (Take), writes them, and is only known to
// be kept at the next one: a save that failed or was deleted before it was
// kept leaves its changes taken but not dropped, so the next checkpoint
// writes them again with its own (Take(kept = false)).
#ifndef HET_TF_EMBEDDING_CORE_ROW_CHANGES_H_
#define HET_TF_EMBEDDING_CORE_ROW_CHANGES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace het {

class RowChanges {
 public:
  // The row in `slot` was created or written.
  void Changed(uint32_t slot) { Set(&changed_, slot); }
  // The row of `key` left `slot`; a row that takes the slot later is a
  // change of its own. Past `limit` dropped keys since the last Take (a
  // stream evicting far more than a checkpoint apart) the changes
  // overflow: they are no longer kept, and the next checkpoint is full.
  void Dropped(uint32_t slot, int64_t key, size_t limit);
  bool overflowed() const { return overflowed_; }
  // Moves the changes since the last Take into the taken ones, which first
  // drop what the last Take returned when that checkpoint was kept.
  void Take(bool kept);
  // Drops every change: after a full checkpoint or a restore.
  void Forget();
  // Calls visit(slot) for each taken slot.
  template <typename Visit>
  void ForEachTaken(Visit visit) const {
    for (size_t w = 0; w < taken_.size(); ++w) {
      for (uint64_t bits = taken_[w]; bits != 0; bits &= bits - 1) {
        visit(static_cast<uint32_t>(w * 64 + __builtin_ctzll(bits)));
      }
    }
  }
  const std::vector<int64_t>& taken_drops() const { return taken_drops_; }
  // Bitmap and key bytes, for the memory report.
  size_t MemoryBytes() const;

 private:
  static void Set(std::vector<uint64_t>* bits, uint32_t slot);
  static void Unset(std::vector<uint64_t>* bits, uint32_t slot);

  std::vector<uint64_t> changed_, taken_;
  std::vector<int64_t> drops_, taken_drops_;
  bool overflowed_ = false;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_ROW_CHANGES_H_
