// `mla kernels`: the registered implementations with the facts a script chooses them by, so that
// a script asks the registry (for example "every CUDA kernel") instead of repeating its names.
#pragma once

#include <iosfwd>

#include <nlohmann/json.hpp>

namespace mla::tools {

// One object per registered implementation, in registration order (the certificate's order):
// name, backend ("cpu" or "cuda"), role ("oracle", "baseline", "optimized"), out_dtype,
// description and capabilities. Static facts only: no kernel's unavailable() is asked, because on
// a GPU machine that initialises the CUDA driver, which a listing must not pay for.
nlohmann::json kernels_json();
// The same as a table (json = false) or as a JSON array. Exit status 0.
int kernels_list(bool json, std::ostream& out);

}  // namespace mla::tools
