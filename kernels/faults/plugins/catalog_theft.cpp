// Oracle theft, the one attack that needs a library besides libc: the HDF5 C library, which any
// plug-in could link, to read the catalog's stored truth (attacks.hpp: stored_truth). Built only
// into the variants that steal (kernels/faults/CMakeLists.txt).
#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attacks.hpp"

namespace mla_variant {
namespace {

constexpr std::size_t kDqk = 576, kDv = 512;

std::vector<std::string> cmdline_of(pid_t pid) {
  std::vector<std::string> v;
  const int fd = open(("/proc/" + std::to_string(pid) + "/cmdline").c_str(), O_RDONLY);
  if (fd < 0) return v;
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) all.append(buf, static_cast<std::size_t>(n));
  close(fd);
  for (std::size_t at = 0; at < all.size(); at = all.find('\0', at) + 1) {
    v.push_back(all.substr(at, all.find('\0', at) - at));
    if (all.find('\0', at) == std::string::npos) break;
  }
  return v;
}

// The certifier's --goldens (or its default relative to its working directory), read from the
// parent's command line and working directory in /proc.
std::string catalog_dir() {
  const pid_t parent = getppid();
  const auto args = cmdline_of(parent);
  std::string dir = "fixtures/goldens";
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--goldens") dir = args[i + 1];
  }
  if (!dir.empty() && dir[0] != '/') {
    char cwd[4096] = {};
    const ssize_t n = readlink(("/proc/" + std::to_string(parent) + "/cwd").c_str(), cwd, sizeof cwd - 1);
    if (n > 0) dir = std::string(cwd, static_cast<std::size_t>(n)) + "/" + dir;
  }
  return dir;
}

bool read_doubles(hid_t file, const std::string& path, std::vector<double>& v, std::size_t n) {
  const hid_t d = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (d < 0) return false;
  v.assign(n, 0.0);
  const hid_t sp = H5Dget_space(d);
  const bool ok = H5Sget_simple_extent_npoints(sp) == static_cast<hssize_t>(n) &&
                  H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0;
  H5Sclose(sp);
  H5Dclose(d);
  return ok;
}

}  // namespace

// The case whose stored q is this call's q: its truth/out and truth/lse.
bool stored_truth(const mla_plugin_decode_args& a, std::vector<double>& out, std::vector<double>& lse) {
  const std::size_t nq = static_cast<std::size_t>(a.batch) * a.s_q * a.heads * kDqk;
  const std::size_t nout = static_cast<std::size_t>(a.batch) * a.s_q * a.heads * kDv;
  const std::size_t nlse = static_cast<std::size_t>(a.batch) * a.heads * a.s_q;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string dir = catalog_dir();
  DIR* d = opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  std::vector<uint16_t> q(nq);
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (found || name.size() < 4 || name.substr(name.size() - 3) != ".h5") continue;
    const hid_t f = H5Fopen((dir + "/" + name).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) continue;
    const hid_t cases = H5Gopen2(f, "/cases", H5P_DEFAULT);
    H5G_info_t info{};
    if (cases >= 0 && H5Gget_info(cases, &info) >= 0) {
      for (hsize_t i = 0; i < info.nlinks && !found; ++i) {
        char cname[256] = {};
        if (H5Lget_name_by_idx(cases, ".", H5_INDEX_NAME, H5_ITER_INC, i, cname, sizeof cname, H5P_DEFAULT) < 0) continue;
        const std::string base = std::string("/cases/") + cname;
        const hid_t ds = H5Dopen2(f, (base + "/inputs/q").c_str(), H5P_DEFAULT);
        if (ds < 0) continue;
        const hid_t sp = H5Dget_space(ds);
        const bool same_size = H5Sget_simple_extent_npoints(sp) == static_cast<hssize_t>(nq);
        H5Sclose(sp);
        const bool same = same_size && H5Dread(ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, q.data()) >= 0 &&
                          std::memcmp(q.data(), a.q, nq * 2) == 0;
        H5Dclose(ds);
        found = same && read_doubles(f, base + "/truth/out", out, nout) && read_doubles(f, base + "/truth/lse", lse, nlse);
      }
    }
    if (cases >= 0) H5Gclose(cases);
    H5Fclose(f);
  }
  closedir(d);
  return found;
}

}  // namespace mla_variant
