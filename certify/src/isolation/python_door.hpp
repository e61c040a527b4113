// Private to mla_certify: the Python front door (`mla certify --python SPEC`). A Python kernel
// is certified through the same children, arena, audit and judge as a C plug-in; only the
// program a child runs differs: the user's Python running kernels/python/mla_door/child.py,
// which speaks the same wire messages and writes the same control block (arena.hpp) as
// `mla __child`. This process never imports the user's code: the declaration is read in a child
// and validated here with the rules of a C descriptor.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "mla/certify/python_declaration.hpp"
#include "run/session.hpp"

namespace mla::certify {

// The folder holding the mla_door package: $MLA_DOOR_PATH, else `python` beside the folder of the
// mla executable (the device bundle's bin/ and python/), else kernels/python of the source tree
// it was built from.
// Throws UsageError naming what was tried when none holds mla_door/child.py.
std::filesystem::path door_dir(const std::filesystem::path& self);

// The child's command line: `EXE <door>/mla_door/child.py VERB --spec SPEC ARGS...`.
std::vector<std::string> python_child_argv(const PythonRef& p, const std::string& verb,
                                           const std::vector<std::string>& args);

// The child `argv` (python_child_argv) forked from the door's fork server of its executable
// instead of started anew: the server has imported torch once, so a child pays a fork, not the
// import (about 1.8 s on a 2-core machine). The server is started at the first such child; one
// that cannot start is said once on the progress stream, and children are then started the
// usual way. MLA_DOOR_SERVER=0 turns it off (to compare, or to rule it out).
void use_door_server(Session& s, const PythonRef& p, const std::vector<std::string>& argv, ChildHooks& hooks);

// The implementation `--python spec` names, described by a child and validated here, with its
// KernelReport (origin: the spec, the executable, Python's and torch's versions, the module's
// digest). No python3 that imports torch, or a "cuda" kernel without a CUDA device: the
// implementation is unavailable (every case SKIPPED) with the reason naming what was tried. A
// malformed SPEC, a module that does not import or a declaration that breaks a rule:
// UsageError naming the spec and the field.
// One implementation per entry: its decode first (when it has one), then its prefill and its
// merge (when it has them), each under the entry's name.
std::vector<std::pair<Implementation, reports::KernelReport>> describe_python(Session& s, const std::string& spec,
                                                                             std::size_t i);

}  // namespace mla::certify
