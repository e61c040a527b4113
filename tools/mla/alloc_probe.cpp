// Counting replacements of the global allocation functions, linked into the `mla` executable
// only: `mla memory --check` reads how many bytes an implementation's prepare() keeps, which is
// how the KV-cache byte model is confirmed against the code that really allocates the cache.
//
// Each block carries a small header holding its size (and the header's own size, which grows
// for over-aligned requests), so deallocation knows what to subtract even when the unsized
// operator delete is called.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "memory.hpp"

namespace {

std::atomic<int64_t> g_live{0};
constexpr std::size_t kHeader = 2 * sizeof(std::size_t);
static_assert(kHeader >= alignof(std::max_align_t));

void* allocate(std::size_t n, std::size_t align) noexcept {
  const std::size_t head = align > kHeader ? align : kHeader;
  void* raw = nullptr;
  if (align <= alignof(std::max_align_t)) {
    raw = std::malloc(n + head);
  } else {
    const std::size_t total = (n + head + align - 1) / align * align;
    raw = std::aligned_alloc(align, total);
  }
  if (!raw) return nullptr;
  auto* p = static_cast<unsigned char*>(raw) + head;
  reinterpret_cast<std::size_t*>(p)[-1] = n;
  reinterpret_cast<std::size_t*>(p)[-2] = head;
  g_live.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  return p;
}

void release(void* ptr) noexcept {
  if (!ptr) return;
  auto* p = static_cast<unsigned char*>(ptr);
  const std::size_t n = reinterpret_cast<std::size_t*>(p)[-1];
  const std::size_t head = reinterpret_cast<std::size_t*>(p)[-2];
  g_live.fetch_sub(static_cast<int64_t>(n), std::memory_order_relaxed);
  std::free(p - head);
}

void* allocate_or_throw(std::size_t n, std::size_t align) {
  for (;;) {
    if (void* p = allocate(n == 0 ? 1 : n, align)) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}

}  // namespace

namespace mla::tools {
int64_t live_heap_bytes() { return g_live.load(std::memory_order_relaxed); }
}  // namespace mla::tools

constexpr std::size_t kDefaultAlign = alignof(std::max_align_t);

void* operator new(std::size_t n) { return allocate_or_throw(n, kDefaultAlign); }
void* operator new[](std::size_t n) { return allocate_or_throw(n, kDefaultAlign); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n == 0 ? 1 : n, kDefaultAlign); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n == 0 ? 1 : n, kDefaultAlign); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n == 0 ? 1 : n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n == 0 ? 1 : n, static_cast<std::size_t>(a));
}

void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
