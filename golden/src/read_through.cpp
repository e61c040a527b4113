// read_through: every byte of a golden file that a loader could make libhdf5 read, read once.
#include <H5Cpp.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "h5io.hpp"
#include "mla/core/error.hpp"
#include "mla/golden/golden.hpp"

namespace mla::golden {
namespace {

// Nothing is kept, so one bounded buffer serves every read: datasets are read in slabs of
// at most this many bytes along their first dimension.
constexpr std::size_t kSlabBytes = std::size_t{16} << 20;
// Attributes of a golden are scalars, shapes and strings; a larger one is not a golden's.
constexpr hssize_t kMaxAttributePoints = 1 << 16;

struct Walk {
  std::string file;
  std::string failure;  // the first problem HDF5 reported, with where
  std::vector<unsigned char> buffer;
};

// Closes an HDF5 id at scope exit (the C API: the C++ wrapper cannot open attributes by index
// without throwing on the kinds of damage this walk exists to touch).
struct Id {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Id() {
    if (id >= 0) close(id);
  }
};

bool fail(Walk& w, const std::string& where, const std::string& what) {
  if (w.failure.empty()) w.failure = fmt::format("{}: {}", where, what);
  return false;
}

// A memory type for `file_type` and whether it is variable-length (strings or sequences),
// whose buffers libhdf5 allocates and must reclaim.
hid_t memory_type(hid_t file_type, bool& vlen) {
  vlen = H5Tis_variable_str(file_type) > 0 || H5Tget_class(file_type) == H5T_VLEN;
  return H5Tget_native_type(file_type, H5T_DIR_ASCEND);
}

bool read_attribute(Walk& w, hid_t attr, const std::string& where) {
  const Id type{H5Aget_type(attr), H5Tclose};
  const Id space{H5Aget_space(attr), H5Sclose};
  if (type.id < 0 || space.id < 0) return fail(w, where, "unreadable attribute type or dataspace");
  const hssize_t n = H5Sget_simple_extent_npoints(space.id);
  if (n < 0 || n > kMaxAttributePoints) return fail(w, where, fmt::format("an attribute of {} elements", n));
  bool vlen = false;
  const Id mem{memory_type(type.id, vlen), H5Tclose};
  if (mem.id < 0) return fail(w, where, "an attribute type with no memory equivalent");
  const std::size_t size = H5Tget_size(mem.id);
  std::vector<unsigned char> buf(std::max<std::size_t>(1, size * static_cast<std::size_t>(n)));
  if (H5Aread(attr, mem.id, buf.data()) < 0) return fail(w, where, "HDF5 cannot read the attribute");
  if (vlen) H5Dvlen_reclaim(mem.id, space.id, H5P_DEFAULT, buf.data());
  return true;
}

herr_t each_attribute(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  auto& w = *static_cast<Walk*>(data);
  const Id attr{H5Aopen(obj, name, H5P_DEFAULT), H5Aclose};
  if (attr.id < 0) return fail(w, fmt::format("attribute '{}'", name), "HDF5 cannot open it") ? 0 : -1;
  return read_attribute(w, attr.id, fmt::format("attribute '{}'", name)) ? 0 : -1;
}

bool read_dataset(Walk& w, hid_t ds, const std::string& where) {
  const Id type{H5Dget_type(ds), H5Tclose};
  const Id space{H5Dget_space(ds), H5Sclose};
  if (type.id < 0 || space.id < 0) return fail(w, where, "unreadable type or dataspace");
  // What a loader refuses before it reads, this walk need not read either: data that is not in
  // the file (HDF5 would hand back fill values, possibly 2^40 of them) and extents past the
  // loader's bound.
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  if (H5Dget_space_status(ds, &status) < 0) return fail(w, where, "HDF5 cannot tell whether its data is stored");
  if (status == H5D_SPACE_STATUS_NOT_ALLOCATED) return true;
  const int rank = H5Sget_simple_extent_ndims(space.id);
  if (rank < 0 || rank > 32) return fail(w, where, fmt::format("a dataspace of rank {}", rank));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.id, dims.data(), nullptr) < 0) return fail(w, where, "unreadable extents");
  hsize_t total = 1;
  for (hsize_t d : dims) {
    if (d != 0 && total > static_cast<hsize_t>(kMaxElements) / d) return true;  // the loader refuses it
    total *= d;
  }
  if (total == 0) return true;
  bool vlen = false;
  const Id mem{memory_type(type.id, vlen), H5Tclose};
  if (mem.id < 0) return fail(w, where, "a type with no memory equivalent");
  const std::size_t elem = std::max<std::size_t>(1, H5Tget_size(mem.id));
  if (rank == 0) {
    w.buffer.resize(elem);
    if (H5Dread(ds, mem.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.buffer.data()) < 0) return fail(w, where, "HDF5 cannot read it");
    if (vlen) H5Dvlen_reclaim(mem.id, space.id, H5P_DEFAULT, w.buffer.data());
    return true;
  }
  const std::size_t row = elem * static_cast<std::size_t>(total / dims[0]);
  const hsize_t rows_per_slab = std::max<hsize_t>(1, kSlabBytes / std::max<std::size_t>(1, row));
  for (hsize_t r0 = 0; r0 < dims[0]; r0 += rows_per_slab) {
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    start[0] = r0;
    count[0] = std::min(rows_per_slab, dims[0] - r0);
    const Id file_space{H5Dget_space(ds), H5Sclose};
    const Id mem_space{H5Screate_simple(rank, count.data(), nullptr), H5Sclose};
    if (file_space.id < 0 || mem_space.id < 0 ||
        H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0) {
      return fail(w, where, "HDF5 cannot select a part of it");
    }
    w.buffer.resize(row * static_cast<std::size_t>(count[0]));
    if (H5Dread(ds, mem.id, mem_space.id, file_space.id, H5P_DEFAULT, w.buffer.data()) < 0) {
      return fail(w, where, "HDF5 cannot read it");
    }
    if (vlen) H5Dvlen_reclaim(mem.id, mem_space.id, H5P_DEFAULT, w.buffer.data());
  }
  return true;
}

herr_t each_object(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  auto& w = *static_cast<Walk*>(data);
  const std::string where = std::string(name) == "." ? "/" : "/" + std::string(name);
  const Id obj{H5Oopen(root, name, H5P_DEFAULT), H5Oclose};
  if (obj.id < 0) return fail(w, where, "HDF5 cannot open it") ? 0 : -1;
  hsize_t idx = 0;
  if (H5Aiterate2(obj.id, H5_INDEX_NAME, H5_ITER_INC, &idx, each_attribute, &w) < 0) {
    fail(w, where, "HDF5 cannot list its attributes");
    return -1;
  }
  if (info->type == H5O_TYPE_DATASET && !read_dataset(w, obj.id, where)) return -1;
  return 0;
}

}  // namespace

void read_through(const std::filesystem::path& file) {
  // The loader's own first line of defence (the global heap walk that refuses collections
  // libhdf5 would loop on) runs first, as it does for every read.
  { const detail::Reader guard(file); }
  Walk w;
  w.file = file.string();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const Id f{H5Fopen(w.file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  if (f.id < 0) throw FixtureError(w.file, "", "a readable HDF5 file", "HDF5 cannot open it");
  const herr_t rc = H5Ovisit2(f.id, H5_INDEX_NAME, H5_ITER_INC, each_object, &w, H5O_INFO_BASIC);
  H5Eclear2(H5E_DEFAULT);
  if (!w.failure.empty()) throw FixtureError(w.file, "", "every object readable by HDF5", w.failure);
  if (rc < 0) throw FixtureError(w.file, "", "every object readable by HDF5", "HDF5 cannot walk its objects");
}

std::string file_identity(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return {};
  return fmt::format("{} {} {} {}.{:09}", file.string(), st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

std::string hdf5_identity() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  std::string id = fmt::format("HDF5 {}.{}.{}", major, minor, release);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&H5get_libversion), &info) != 0 && info.dli_fname) {
    id += " " + file_identity(info.dli_fname);
  }
  return id;
}

}  // namespace mla::golden
